"""Create certificate authorities and issue serving and client certificates.

Values are PEM bytes in frozen dataclasses so they can be written anywhere (files for
kube-apiserver, base64 in a kubeconfig, a caBundle in a webhook configuration) without this
module knowing about any of those places.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import dsa, ec, ed448, ed25519, rsa
from cryptography.hazmat.primitives.asymmetric.types import (
    CertificateIssuerPrivateKeyTypes,
    CertificateIssuerPublicKeyTypes,
)
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# Long enough for a demo cluster left running for weeks, short enough not to matter if leaked.
DEFAULT_VALIDITY = dt.timedelta(days=365)
# Tolerate a little clock skew between issuing and first use.
_BACKDATE = dt.timedelta(minutes=5)


@dataclass(frozen=True)
class KeyPair:
    """A certificate and its private key, both PEM-encoded."""

    cert_pem: bytes
    key_pem: bytes

    def write(self, cert_path: Path, key_path: Path) -> None:
        """Write the certificate (0644) and the key (0600: it grants whatever the cert grants)."""
        cert_path.parent.mkdir(parents=True, exist_ok=True)
        key_path.parent.mkdir(parents=True, exist_ok=True)
        cert_path.write_bytes(self.cert_pem)
        key_path.touch(mode=0o600, exist_ok=True)
        key_path.chmod(0o600)
        key_path.write_bytes(self.key_pem)

    @property
    def certificate(self) -> x509.Certificate:
        """The parsed certificate, for inspection (subject, SANs) in tests and tools."""
        return x509.load_pem_x509_certificate(self.cert_pem)


def new_private_key_pem() -> bytes:
    """A fresh ECDSA P-256 private key in PKCS#8 PEM, e.g. for service-account token signing."""
    return _key_pem(ec.generate_private_key(ec.SECP256R1()))


def public_key_pem(private_key_pem: bytes) -> bytes:
    """The SubjectPublicKeyInfo PEM of a private key (what token verifiers are given)."""
    key = serialization.load_pem_private_key(private_key_pem, password=None)
    return key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def _key_usage(*, signs_certificates: bool) -> x509.KeyUsage:
    """ECDSA keys only sign: TLS handshakes always, certificates and CRLs only for a CA."""
    return x509.KeyUsage(
        digital_signature=True,
        key_cert_sign=signs_certificates,
        crl_sign=signs_certificates,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        encipher_only=False,
        decipher_only=False,
    )


def create_ca(common_name: str, *, valid_for: dt.timedelta = DEFAULT_VALIDITY) -> KeyPair:
    """A self-signed CA that may sign leaf certificates only (path length 0)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    builder = (
        _base_builder(name, name, key.public_key(), valid_for)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(signs_certificates=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )
    cert = builder.sign(key, hashes.SHA256())
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def issue_serving(
    ca: KeyPair,
    common_name: str,
    *,
    dns_names: Sequence[str] = (),
    ip_addresses: Sequence[str] = (),
    valid_for: dt.timedelta = DEFAULT_VALIDITY,
) -> KeyPair:
    """A TLS server certificate; clients match the host they dial against the SANs only.

    Give at least one DNS name or IP address: Go ignores the common name for host checks.
    """
    if not dns_names and not ip_addresses:
        raise ValueError("a serving certificate needs at least one DNS name or IP address SAN")
    sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns_names]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses]
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    return _issue(ca, subject, ExtendedKeyUsageOID.SERVER_AUTH, valid_for, sans)


def issue_client(
    ca: KeyPair,
    user: str,
    groups: Sequence[str] = (),
    *,
    valid_for: dt.timedelta = DEFAULT_VALIDITY,
) -> KeyPair:
    """A TLS client certificate as kube-apiserver reads it: CN is the user, each O a group."""
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, g) for g in groups]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, user))
    return _issue(ca, x509.Name(attrs), ExtendedKeyUsageOID.CLIENT_AUTH, valid_for, [])


def _issue(
    ca: KeyPair,
    subject: x509.Name,
    usage: x509.ObjectIdentifier,
    valid_for: dt.timedelta,
    sans: list[x509.GeneralName],
) -> KeyPair:
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem)
    ca_key = _issuer_private_key(ca.key_pem)
    key = ec.generate_private_key(ec.SECP256R1())
    builder = (
        _base_builder(subject, ca_cert.subject, key.public_key(), valid_for)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(signs_certificates=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(_issuer_public_key(ca_cert)), critical=False)
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


# Key types that can sign a certificate: X25519/X448 (key agreement) and DH keys cannot, though a PEM
# file may hold one; CertificateBuilder.sign refuses them with a TypeError, and so does this.
_ISSUER_PRIVATE_KEYS = (
    ec.EllipticCurvePrivateKey,
    rsa.RSAPrivateKey,
    dsa.DSAPrivateKey,
    ed25519.Ed25519PrivateKey,
    ed448.Ed448PrivateKey,
)


def _issuer_private_key(key_pem: bytes) -> CertificateIssuerPrivateKeyTypes:
    key = serialization.load_pem_private_key(key_pem, password=None)
    if not isinstance(key, _ISSUER_PRIVATE_KEYS):
        raise TypeError(f"the CA key is a {type(key).__name__}, which cannot sign certificates")
    return key


def _issuer_public_key(ca_cert: x509.Certificate) -> CertificateIssuerPublicKeyTypes:
    # The CA certificate holds the public half of the CA key, a signing key (_issuer_private_key).
    return cast(CertificateIssuerPublicKeyTypes, ca_cert.public_key())


def _base_builder(
    subject: x509.Name,
    issuer: x509.Name,
    public_key: ec.EllipticCurvePublicKey,
    valid_for: dt.timedelta,
) -> x509.CertificateBuilder:
    now = dt.datetime.now(dt.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(now + valid_for)
    )


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )

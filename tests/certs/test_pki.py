"""The tiny PKI: what kube-apiserver, etcd and Go's TLS stack will check in our certificates."""

from __future__ import annotations

import ipaddress
import socket
import ssl
import threading

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from migops import certs


def test_client_certificate_carries_user_as_cn_and_groups_as_o() -> None:
    ca = certs.create_ca("test-ca")
    client = certs.issue_client(
        ca, "system:serviceaccount:ns:sa", ["system:serviceaccounts", "system:serviceaccounts:ns"]
    )
    subject = client.certificate.subject
    assert subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "system:serviceaccount:ns:sa"
    assert [a.value for a in subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)] == [
        "system:serviceaccounts",
        "system:serviceaccounts:ns",
    ]
    eku = client.certificate.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    assert client.certificate.issuer == ca.certificate.subject


def test_serving_certificate_has_the_sans_and_is_not_a_ca() -> None:
    ca = certs.create_ca("test-ca")
    serving = certs.issue_serving(ca, "webhook", dns_names=["localhost", "webhook.svc"], ip_addresses=["127.0.0.1"])
    san = serving.certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["localhost", "webhook.svc"]
    assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    bc = serving.certificate.extensions.get_extension_for_class(x509.BasicConstraints).value
    assert bc.ca is False
    ca_bc = ca.certificate.extensions.get_extension_for_class(x509.BasicConstraints).value
    assert ca_bc.ca is True and ca_bc.path_length == 0


def test_serving_certificate_without_sans_is_refused() -> None:
    with pytest.raises(ValueError, match="SAN"):
        certs.issue_serving(certs.create_ca("ca"), "nameless")


def test_key_files_are_private(tmp_path) -> None:
    pair = certs.issue_client(certs.create_ca("ca"), "u")
    pair.write(tmp_path / "u.crt", tmp_path / "u.key")
    assert (tmp_path / "u.key").stat().st_mode & 0o077 == 0
    assert (tmp_path / "u.crt").read_bytes() == pair.cert_pem


def test_public_key_matches_private_key() -> None:
    key = certs.new_private_key_pem()
    pub = certs.public_key_pem(key)
    assert pub.startswith(b"-----BEGIN PUBLIC KEY-----")
    assert certs.public_key_pem(certs.new_private_key_pem()) != pub


def test_a_real_tls_handshake_verifies_against_the_ca(tmp_path) -> None:
    """Python's ssl (OpenSSL) accepts the chain for 127.0.0.1 and rejects another CA."""
    ca = certs.create_ca("ca")
    serving = certs.issue_serving(ca, "srv", ip_addresses=["127.0.0.1"])
    serving.write(tmp_path / "s.crt", tmp_path / "s.key")
    (tmp_path / "ca.crt").write_bytes(ca.cert_pem)
    (tmp_path / "other.crt").write_bytes(certs.create_ca("other").cert_pem)

    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(tmp_path / "s.crt", tmp_path / "s.key")
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve() -> None:
        for _ in range(2):
            conn, _ = listener.accept()
            try:
                with server_ctx.wrap_socket(conn, server_side=True) as tls:
                    tls.recv(1)
            except (ssl.SSLError, OSError):
                pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    good = ssl.create_default_context(cafile=tmp_path / "ca.crt")
    with socket.create_connection(("127.0.0.1", port)) as raw:
        with good.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            assert tls.version() is not None
            tls.send(b"x")
    bad = ssl.create_default_context(cafile=tmp_path / "other.crt")
    with socket.create_connection(("127.0.0.1", port)) as raw:
        with pytest.raises(ssl.SSLCertVerificationError):
            bad.wrap_socket(raw, server_hostname="127.0.0.1")
    thread.join(timeout=5)
    listener.close()

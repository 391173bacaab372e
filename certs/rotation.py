"""The webhook's serving certificate: create, publish the CA bundle, and rotate before expiry.

Rotation never drops a request (the pattern Kyverno and OPA's cert-controller use):
1. the serving certificate is renewed from the same CA well before it expires; the API server trusts
   it already, new connections get it (gunicorn loads the files per connection), open ones finish;
2. when the CA itself nears expiry, a new CA is made and the bundle published to the webhook
   configurations holds the old and the new CA; after `settle` (the API server picks up a changed
   configuration within seconds) the serving certificate is re-issued from the new CA;
3. a later run drops CAs from the bundle that no longer sign the served certificate.

Stores: a directory (for `migops local` and tests) or a Kubernetes Secret (in the cluster, mounted
into the webhook's pods; the kubelet swaps the mounted files together). In a directory the served
certificate and key are one file, `tls.pem`, replaced by a single rename, so no connection can ever
read a new certificate with an old key; `tls.crt` and `tls.key` are written beside it for tools.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from migops.certs.pki import KeyPair, create_ca, issue_serving

CA_VALIDITY = dt.timedelta(days=5 * 365)
SERVING_VALIDITY = dt.timedelta(days=90)
RENEW_BEFORE = dt.timedelta(days=30)  # serving certificate; the CA is renewed when it nears this too


def service_dns_names(service: str, namespace: str) -> list[str]:
    """The names the API server may dial a Service by (it uses <svc>.<ns>.svc)."""
    return [service, f"{service}.{namespace}", f"{service}.{namespace}.svc", f"{service}.{namespace}.svc.cluster.local"]


@dataclass(frozen=True)
class Material:
    """What a store holds: the current CA (with key), the serving pair, the bundle in publication."""

    ca: KeyPair | None = None
    serving: KeyPair | None = None
    bundle: bytes = b""


class Store(Protocol):
    def load(self) -> Material: ...

    def save(self, material: Material) -> None: ...


@dataclass(frozen=True)
class DirectoryStore:
    """ca.crt, ca.key, ca-bundle.crt, tls.pem (key + certificate: what the server loads), tls.crt, tls.key."""

    path: Path

    @property
    def serving_file(self) -> Path:
        return self.path / "tls.pem"

    def load(self) -> Material:
        def read(name: str) -> bytes | None:
            p = self.path / name
            return p.read_bytes() if p.exists() else None

        ca_cert, ca_key, pem = read("ca.crt"), read("ca.key"), read("tls.pem")
        serving = None
        if pem:
            key, cert = _split_pem(pem)
            serving = KeyPair(cert, key)
        return Material(KeyPair(ca_cert, ca_key) if ca_cert and ca_key else None, serving, read("ca-bundle.crt") or b"")

    def save(self, material: Material) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        if material.ca:
            _atomic(self.path / "ca.key", material.ca.key_pem, 0o600)
            _atomic(self.path / "ca.crt", material.ca.cert_pem, 0o644)
        _atomic(self.path / "ca-bundle.crt", material.bundle, 0o644)
        if material.serving:
            _atomic(self.path / "tls.pem", material.serving.key_pem + material.serving.cert_pem, 0o600)
            _atomic(self.path / "tls.key", material.serving.key_pem, 0o600)
            _atomic(self.path / "tls.crt", material.serving.cert_pem, 0o644)


def _atomic(path: Path, data: bytes, mode: int) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(tmp, mode)
    tmp.replace(path)


def _split_pem(pem: bytes) -> tuple[bytes, bytes]:
    """(key, certificates) of a combined PEM file."""
    marker = b"-----BEGIN CERTIFICATE-----"
    at = pem.index(marker)
    return pem[:at], pem[at:]


def certificates(bundle: bytes) -> list[x509.Certificate]:
    return x509.load_pem_x509_certificates(bundle) if bundle.strip() else []


def remaining(cert_pem: bytes, now: dt.datetime | None = None) -> dt.timedelta:
    cert = x509.load_pem_x509_certificate(cert_pem)
    return cert.not_valid_after_utc - (now or dt.datetime.now(dt.UTC))


def _signed_by(leaf_pem: bytes, ca_pem: bytes) -> bool:
    leaf = x509.load_pem_x509_certificate(leaf_pem)
    ca = x509.load_pem_x509_certificate(ca_pem)
    try:
        leaf.verify_directly_issued_by(ca)
        return True
    except Exception:  # noqa: BLE001 - InvalidSignature, a key type mismatch: not issued by this CA
        return False


def _sans(cert_pem: bytes) -> tuple[set[str], set[str]]:
    cert = x509.load_pem_x509_certificate(cert_pem)
    try:
        ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return set(), set()
    return set(ext.get_values_for_type(x509.DNSName)), {str(i) for i in ext.get_values_for_type(x509.IPAddress)}


@dataclass
class Rotation:
    """What one `rotate` run did, in order (for the CLI and tests)."""

    steps: list[str] = field(default_factory=list)
    material: Material = field(default_factory=Material)


def rotate(
    store: Store,
    *,
    dns_names: Sequence[str],
    ip_addresses: Sequence[str] = (),
    publish: Callable[[bytes], None],
    settle: Callable[[], None] = lambda: None,
    renew_before: dt.timedelta = RENEW_BEFORE,
    ca_validity: dt.timedelta = CA_VALIDITY,
    serving_validity: dt.timedelta = SERVING_VALIDITY,
    force: bool = False,
    now: dt.datetime | None = None,
) -> Rotation:
    """Bring the store to a valid CA + serving certificate and publish the bundle; idempotent.

    `publish(bundle)` writes the CA bundle wherever clients read it (the webhook configurations);
    `settle()` waits until they use it. `force` renews the CA and the serving certificate now.
    """
    now = now or dt.datetime.now(dt.UTC)
    m = store.load()
    cn = dns_names[0] if dns_names else (ip_addresses[0] if ip_addresses else "migops-webhook")

    def issue(ca: KeyPair) -> KeyPair:
        return issue_serving(ca, cn, dns_names=dns_names, ip_addresses=ip_addresses, valid_for=serving_validity)

    # Drop expired CAs from the bundle; it must always hold the current CA.
    live = [c for c in certificates(m.bundle) if c.not_valid_after_utc > now]
    bundle = b"".join(c.public_bytes(Encoding.PEM) for c in live)
    if m.ca is None:
        return _first_ca(store, publish, issue, ca_validity)
    if m.ca.cert_pem not in bundle:
        bundle += m.ca.cert_pem
    if force or remaining(m.ca.cert_pem, now) < renew_before:
        return _new_ca(store, m, m.ca, bundle, publish, settle, issue, ca_validity)
    dns, ips = _sans(m.serving.cert_pem) if m.serving else (set(), set())
    stale = (
        m.serving is None
        or not _signed_by(m.serving.cert_pem, m.ca.cert_pem)
        or remaining(m.serving.cert_pem, now) < renew_before
        or dns != set(dns_names)
        or ips != {str(i) for i in ip_addresses}
    )
    return _same_ca(store, m, m.ca, bundle, stale, publish, issue)


def _first_ca(
    store: Store, publish: Callable[[bytes], None], issue: Callable[[KeyPair], KeyPair], ca_validity: dt.timedelta
) -> Rotation:
    """A store without a CA: a new CA, its bundle published, then a serving certificate from it."""
    ca = create_ca("migops-webhook-ca", valid_for=ca_validity)
    m = Material(ca, issue(ca), ca.cert_pem)
    publish(m.bundle)
    store.save(m)
    return Rotation(["created CA", "published bundle (1 CA)", "issued serving certificate"], m)


def _new_ca(
    store: Store,
    m: Material,
    ca: KeyPair,
    bundle: bytes,
    publish: Callable[[bytes], None],
    settle: Callable[[], None],
    issue: Callable[[KeyPair], KeyPair],
    ca_validity: dt.timedelta,
) -> Rotation:
    """The CA renewed: the new CA joins the bundle and clients use it before the serving certificate
    comes from it, so the served certificate is trusted throughout."""
    out = Rotation()
    new_ca = create_ca("migops-webhook-ca", valid_for=ca_validity)
    bundle += new_ca.cert_pem
    publish(bundle)
    store.save(Material(ca, m.serving, bundle))
    out.steps.append(f"new CA; published bundle ({len(certificates(bundle))} CAs)")
    settle()
    out.material = Material(new_ca, issue(new_ca), bundle)
    store.save(out.material)
    out.steps.append("issued serving certificate from the new CA")
    return out


def _same_ca(
    store: Store,
    m: Material,
    ca: KeyPair,
    bundle: bytes,
    stale: bool,
    publish: Callable[[bytes], None],
    issue: Callable[[KeyPair], KeyPair],
) -> Rotation:
    """The CA kept: the bundle published where it changed, a serving certificate issued where the one
    served is `stale`, and CAs older than the current one dropped once nothing served needs them."""
    out = Rotation()
    if bundle != m.bundle:
        publish(bundle)
        out.steps.append(f"published bundle ({len(certificates(bundle))} CAs)")
    if stale:
        m = Material(ca, issue(ca), bundle)
        store.save(m)
        out.steps.append("issued serving certificate")
    else:
        current = [c for c in certificates(bundle) if c.public_bytes(Encoding.PEM) == ca.cert_pem]
        if len(certificates(bundle)) > len(current):
            bundle = ca.cert_pem  # the served certificate comes from the current CA: older ones can go
            publish(bundle)
            out.steps.append("dropped old CAs from the bundle")
        if bundle != m.bundle:
            m = Material(ca, m.serving, bundle)
            store.save(m)
    out.material = m
    return out

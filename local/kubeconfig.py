"""Write self-contained kubeconfig files (CA and credentials embedded, nothing to lose).

One context, named `migops-local`, so `kubectl` and the Python client behave the same with
every kubeconfig the control plane hands out.
"""

from __future__ import annotations

import base64
from pathlib import Path

import yaml

from migops.certs import KeyPair

CONTEXT = "migops-local"
CLUSTER = "migops-local"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def build(server: str, ca_pem: bytes, user: str, *, client: KeyPair | None = None, token: str | None = None) -> dict:
    """A kubeconfig document for `user`, authenticated by a client certificate or a token."""
    if (client is None) == (token is None):
        raise ValueError("give exactly one of client (certificate) or token")
    credentials: dict[str, str] = (
        {"client-certificate-data": _b64(client.cert_pem), "client-key-data": _b64(client.key_pem)}
        if client is not None
        else {"token": token or ""}
    )
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": CLUSTER, "cluster": {"server": server, "certificate-authority-data": _b64(ca_pem)}}],
        "users": [{"name": user, "user": credentials}],
        "contexts": [{"name": CONTEXT, "context": {"cluster": CLUSTER, "user": user}}],
        "current-context": CONTEXT,
        "preferences": {},
    }


def write(path: Path, config: dict) -> Path:
    """Write `config` to `path`, readable by the owner only (it holds credentials)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600, exist_ok=True)
    path.chmod(0o600)
    path.write_text(yaml.dump(config, Dumper=yaml.CSafeDumper, sort_keys=False))
    return path

"""A tiny PKI for loopback TLS: certificate authorities, serving and client certificates.

Used by the local control plane (API server and etcd serving certificates, client
certificates that carry a Kubernetes user name and groups) and meant to be reused by the
admission webhook for its own serving certificate. Everything is ECDSA P-256: small keys,
fast to generate, accepted by Go's crypto/tls and by kube-apiserver for service-account
token signing (ES256).
"""
from migops.certs.pki import (
    KeyPair,
    create_ca,
    issue_client,
    issue_serving,
    new_private_key_pem,
    public_key_pem,
)

__all__ = [
    "KeyPair",
    "create_ca",
    "issue_client",
    "issue_serving",
    "new_private_key_pem",
    "public_key_pem",
]

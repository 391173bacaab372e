"""A tiny PKI for loopback TLS and the admission webhook.

`pki`: certificate authorities, serving and client certificates (the local control plane's API server
and etcd certificates; user certificates carrying a Kubernetes user name and groups). `rotation`: the
webhook's CA and serving certificate, created and rotated before expiry without dropping requests.
`publish`: the caBundle in the webhook configurations and the Secret the webhook's pods mount.
Everything is ECDSA P-256: small keys, fast to generate, accepted by Go's crypto/tls and by
kube-apiserver for service-account token signing (ES256).
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

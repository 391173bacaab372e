"""Where the webhook's certificates live in a cluster: the caBundle of its webhook configurations
(server-side apply, field manager `migops-certs`, so it owns that one field and nothing else) and a
`kubernetes.io/tls` Secret mounted into its pods."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from migops.api.names import CERTS_MANAGER
from migops.certs.pki import KeyPair
from migops.certs.rotation import Material
from migops.kube import ssa

KINDS = ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")


def publish_ca_bundle(api: k8s.ApiClient, bundle: bytes, configurations: list[str]) -> list[str]:
    """Set clientConfig.caBundle on every webhook of the named configurations (either kind) that
    exist; return `Kind/name` of those written."""
    encoded = base64.b64encode(bundle).decode()
    admission = k8s.AdmissionregistrationV1Api(api)
    readers = {
        "ValidatingWebhookConfiguration": admission.read_validating_webhook_configuration,
        "MutatingWebhookConfiguration": admission.read_mutating_webhook_configuration,
    }
    written = []
    for kind in KINDS:
        for name in configurations:
            try:
                found = readers[kind](name)
            except ApiException as exc:
                if exc.status == 404:
                    continue
                raise
            hooks = [{"name": w.name, "clientConfig": {"caBundle": encoded}} for w in found.webhooks or ()]
            if hooks:
                ssa.apply(
                    api,
                    {
                        "apiVersion": "admissionregistration.k8s.io/v1",
                        "kind": kind,
                        "metadata": {"name": name},
                        "webhooks": hooks,
                    },
                    field_manager=CERTS_MANAGER,
                    force=True,
                )
                written.append(f"{kind}/{name}")
    return written


@dataclass(frozen=True)
class SecretStore:
    """A kubernetes.io/tls Secret: tls.crt, tls.key (what the pods mount), ca.crt, ca.key, ca-bundle.crt."""

    api: k8s.ApiClient
    namespace: str
    name: str

    def load(self) -> Material:
        try:
            secret = k8s.CoreV1Api(self.api).read_namespaced_secret(self.name, self.namespace)
        except ApiException as exc:
            if exc.status == 404:
                return Material()
            raise
        return material_from_secret(secret)

    def save(self, material: Material) -> None:
        ssa.apply(self.api, secret_body(self.name, self.namespace, material), field_manager=CERTS_MANAGER, force=True)


def material_from_secret(secret: k8s.V1Secret) -> Material:
    """The Secret's layout (ca.crt/ca.key, tls.crt/tls.key, ca-bundle.crt) read back as Material."""
    data = {k: base64.b64decode(v) for k, v in (secret.data or {}).items()}
    ca = KeyPair(data["ca.crt"], data["ca.key"]) if "ca.crt" in data and "ca.key" in data else None
    serving = KeyPair(data["tls.crt"], data["tls.key"]) if "tls.crt" in data and "tls.key" in data else None
    return Material(ca, serving, data.get("ca-bundle.crt", b""))


def secret_body(name: str, namespace: str, material: Material) -> dict[str, Any]:
    """A kubernetes.io/tls Secret holding the material in that layout (the mount reads tls.crt/tls.key)."""
    data = {"ca-bundle.crt": material.bundle}
    if material.ca:
        data |= {"ca.crt": material.ca.cert_pem, "ca.key": material.ca.key_pem}
    if material.serving:
        data |= {"tls.crt": material.serving.cert_pem, "tls.key": material.serving.key_pem}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/tls",
        "metadata": {"name": name, "namespace": namespace},
        "data": {k: base64.b64encode(v).decode() for k, v in data.items()},
    }

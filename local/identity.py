"""The identities the local stack's components run as: the ServiceAccounts and RBAC of manifests/base,
never `system:masters`.

Each component's manifests are packaged as copies in local/data/ (kept identical to
manifests/base by tests/agent/test_local_agents.py and tests/cluster/test_local_identities.py) and
applied in namespace `migops-system` as `kubectl apply -k` would place them. A component gets a
kubeconfig holding a token of its ServiceAccount, asked of the API server (TokenRequest), so it
authenticates as `system:serviceaccount:migops-system:<name>` exactly as its pod would: the reconciler
with the Deployment's rights and under the applied record's admission policy, the webhook with its
read-only ones. Tokens live TOKEN_SECONDS (nothing refreshes them; a local stack lives less).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s
from kubernetes.client import ApiClient

from migops.api.names import LOCAL_MANAGER
from migops.kube import ssa
from migops.local import kubeconfig

NAMESPACE = "migops-system"  # the manifests' namespace (manifests/base/kustomization.yaml)
# A year: longer than any local stack lives; the API server here sets no maximum.
TOKEN_SECONDS = 365 * 24 * 3600


@dataclass(frozen=True)
class Identity:
    """A component's ServiceAccount and the packaged copies of its manifests (data/<file>)."""

    service_account: str
    manifests: tuple[str, ...]
    probe: tuple[str, str]  # (verb, resource) it must be allowed before it starts: RBAC is in force

    @property
    def user(self) -> str:
        return f"system:serviceaccount:{NAMESPACE}:{self.service_account}"


# manifests/base/reconciler/{rbac,applied-record-policy}.yaml (its ServiceAccount is in rbac.yaml)
RECONCILER = Identity(
    "migops-reconciler", ("reconciler-rbac.yaml", "reconciler-applied-record-policy.yaml"), ("patch", "nodes")
)
# manifests/base/webhook/rbac.yaml (its ServiceAccount is in it)
WEBHOOK = Identity("migops-webhook", ("webhook-rbac.yaml",), ("list", "nodes"))


def objects(manifests: tuple[str, ...]) -> list[dict[str, Any]]:
    """The packaged manifests' objects, as written (install puts namespaced ones without a namespace in
    NAMESPACE)."""
    out: list[dict[str, Any]] = []
    for name in manifests:
        text = resources.files("migops.local").joinpath(f"data/{name}").read_text()
        out.extend(doc for doc in yaml.safe_load_all(text) if doc)  # our own packaged file
    return out


def install(api: ApiClient, manifests: tuple[str, ...]) -> None:
    """The namespace, then the manifests' objects (server-side apply)."""
    ssa.apply(
        api, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}, field_manager=LOCAL_MANAGER
    )
    for doc in objects(manifests):
        ssa.apply(api, doc, field_manager=LOCAL_MANAGER, force=True, namespace=NAMESPACE)


def token_kubeconfig(
    api: ApiClient,
    server: str,
    ca_pem: bytes,
    service_account: str,
    out: Path,
    bound: dict[str, str] | None = None,
) -> Path:
    """A kubeconfig with a token of ServiceAccount `service_account` (bound to object `bound`, a
    boundObjectRef, when given)."""
    spec: dict[str, Any] = {"expirationSeconds": TOKEN_SECONDS}
    if bound is not None:
        spec["boundObjectRef"] = bound
    token = k8s.CoreV1Api(api).create_namespaced_service_account_token(
        service_account,
        NAMESPACE,
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec},
    )
    user = f"system:serviceaccount:{NAMESPACE}:{service_account}"
    return kubeconfig.write(out, kubeconfig.build(server, ca_pem, user, token=token.status.token))


def kubeconfig_for(
    api: ApiClient, server: str, ca_pem: bytes, identity: Identity, out: Path, timeout: float = 30.0
) -> Path:
    """Install `identity`'s manifests, write a kubeconfig with its ServiceAccount's token, and return
    once the API server grants it `identity.probe` (the RBAC authorizer learns new bindings through
    an informer: a component started at once could meet a 403 on its first list)."""
    from kubernetes import config

    install(api, identity.manifests)
    path = token_kubeconfig(api, server, ca_pem, identity.service_account, out)
    verb, resource = identity.probe
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": {"verb": verb, "resource": resource}},
    }
    deadline = time.monotonic() + timeout
    with config.new_client_from_config(config_file=str(path)) as own:
        while True:
            try:
                if k8s.AuthorizationV1Api(own).create_self_subject_access_review(review).status.allowed:
                    return path
            except k8s.exceptions.ApiException as exc:
                if exc.status != 401:  # the token reaches the authenticator a moment late too
                    raise
            if time.monotonic() > deadline:
                raise TimeoutError(f"{identity.user} was not allowed to {verb} {resource} after {timeout:.0f}s")
            time.sleep(0.1)

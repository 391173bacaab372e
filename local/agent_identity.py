"""The local agents' identity: the one an agent has in a cluster, not `system:masters`.

`install` applies manifests/base/agent's ServiceAccount, RBAC and own-node admission policy (packaged
copies in local/data/agent-*.yaml, kept identical to the manifests by
tests/agent/test_local_agents.py) in namespace `migops-system`, as `kubectl apply -k` would place them.
`kubeconfig` asks the API server for a token of that ServiceAccount bound to the agent's Node object
(TokenRequest, boundObjectRef kind Node): simulated nodes run no pods, and such a token carries the
node's name in the user's extra (`authentication.kubernetes.io/node-name`, with `node-uid`) exactly as
a pod-bound one does, so the policy and the agent's own identity check treat it the same. The token
lives identity.TOKEN_SECONDS (nothing refreshes it) and dies with its Node: a node deleted and re-created needs
`migops local down` and `up` again. (migops.local.identity does the same for the reconciler and the
webhook, without a Node.)
"""

from __future__ import annotations

import time
from pathlib import Path

from kubernetes import client as k8s
from kubernetes.client import ApiClient

from migops.api.names import POLICY_PROBE_LABEL
from migops.local import identity
from migops.local.identity import NAMESPACE

SERVICE_ACCOUNT = "migops-agent"
USER = f"system:serviceaccount:{NAMESPACE}:{SERVICE_ACCOUNT}"
MANIFESTS = ("agent-rbac.yaml", "agent-own-node-policy.yaml")  # the ServiceAccount is in agent-rbac.yaml
DRA_STANDIN = "agent-dra-standin.yaml"  # `local up --dra`: the agents publish the DRA driver's slices
POLICY = "migops-agent-own-node"


def install(api: ApiClient, *, dra: bool = False) -> None:
    """Apply the ServiceAccount, RBAC and policy (wait_in_force tells when the policy denies); with `dra`,
    the right to publish ResourceSlices the stand-in for the DRA driver needs."""
    identity.install(api, MANIFESTS + ((DRA_STANDIN,) if dra else ()))


def wait_in_force(agent_kubeconfig: Path, node: str, timeout: float = 30.0) -> None:
    """Return once the policy denies this agent a label it does not own (a dry run: nothing is written).
    The policy reaches admission through an informer, and its status is written by a controller that
    does not run here, so its effect is the only sign."""
    from kubernetes import config

    probe = {"metadata": {"labels": {POLICY_PROBE_LABEL: "x"}}}
    deadline = time.monotonic() + timeout
    with config.new_client_from_config(config_file=str(agent_kubeconfig)) as api:
        core = k8s.CoreV1Api(api)
        while time.monotonic() < deadline:
            try:
                core.patch_node(node, probe, dry_run="All")
            except k8s.exceptions.ApiException as exc:
                if exc.status in (403, 422) and POLICY in (exc.body or ""):
                    return
                if exc.status not in (401, 403):  # RBAC and the token reach the authorizer a moment late too
                    raise
            time.sleep(0.2)
    raise TimeoutError(f"ValidatingAdmissionPolicy {POLICY} not in force after {timeout:.0f}s")


def kubeconfig_for_node(api: ApiClient, server: str, ca_pem: bytes, node: str, out: Path) -> Path:
    """A kubeconfig with the agent ServiceAccount's token bound to Node `node`."""
    uid = k8s.CoreV1Api(api).read_node(node).metadata.uid
    bound = {"apiVersion": "v1", "kind": "Node", "name": node, "uid": uid}
    return identity.token_kubeconfig(api, server, ca_pem, SERVICE_ACCOUNT, out, bound)

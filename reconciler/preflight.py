"""Will migops's own webhook accept the reconciler's node writes from the identity a command runs as?
Asked before `migops reconcile --once` writes anything and before `migops diff` sends its dry runs.

The webhook lets only the reconciler's identities (`migops webhook --reconciler-user`) write what git
owns on a managed node: nvidia.com/mig.config, migops.io/managed-by, migops.io/mig.config.revision.
A cluster admin running the reconciler by hand is not one of them, and would be refused at the first
node, after the ConfigMap and the MigSync were written. So one server-side dry run of the write every
sync makes first on a node (the managed-by annotation) asks the webhook itself, with the identity the
command runs as (a SelfSubjectReview names it); a refusal then names that identity, the ones the
webhook accepts, and how to run as one (`--as`, or that ServiceAccount's token).

`migops diff` asks the same before its server-side dry runs: the webhook would deny them to such an
identity whatever the change, and a denial there would read as a verdict on a change that is valid.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from migops.api.names import MANAGED_BY_ANNOTATION, RECONCILER_MANAGER
from migops.api.objects import NodeFacts

# The in-cluster reconciler's ServiceAccount (manifests/base/reconciler), the webhook's default.
SERVICE_ACCOUNT = ("migops-system", "migops-reconciler")
DEFAULT_USER = f"system:serviceaccount:{SERVICE_ACCOUNT[0]}:{SERVICE_ACCOUNT[1]}"
_ACCEPTED = re.compile(r"the reconciler's identities: ([^)]*)\)")


@dataclass(frozen=True)
class Identity:
    username: str
    groups: tuple[str, ...] = ()

    def describe(self) -> str:
        return f"{self.username} (groups: {', '.join(self.groups)})" if self.groups else self.username


def whoami(api: k8s.ApiClient) -> Identity:
    """Who the API server takes this client for (SelfSubjectReview, Kubernetes 1.28+)."""
    try:
        review = k8s.AuthenticationV1Api(api).create_self_subject_review(
            {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
        )
    except ApiException as exc:
        return Identity(f"(unknown: SelfSubjectReview answered HTTP {exc.status})")
    info = review.status.user_info if review.status else None
    if info is None:
        return Identity("(unknown)")
    return Identity(info.username or "(anonymous)", tuple(info.groups or ()))


@dataclass(frozen=True)
class Asker:
    """Who asks whether the node writes would be admitted, and what it says when they would not be."""

    command: str  # the command line to repeat with --as
    headline: str  # the first line of the refusal
    otherwise: tuple[str, ...] = ()  # further ways out, one line each


RECONCILE = Asker(
    "migops reconcile --once",
    "refused before writing anything: migops's webhook would deny this reconciler's node writes",
)


def refusal(api: k8s.ApiClient, owner: str, asker: Asker = RECONCILE) -> str | None:
    """Why this client's node writes would be refused (the text to print), or None when they would
    not be (the webhook admits them, is not installed, or there is no node to ask about)."""
    core = k8s.CoreV1Api(api)
    try:
        nodes = core.list_node(limit=50).items
    except ApiException:
        return None  # the reconciler's start lists Nodes too, and stops saying why, before any write
    node = next((f for f in (NodeFacts.from_obj(n, offers=False) for n in nodes) if not f.unmanaged), None)
    if node is None:
        return None
    probe = {"metadata": {"annotations": {MANAGED_BY_ANNOTATION: None if node.managed_by == owner else owner}}}
    try:
        core.patch_node(node.name, probe, dry_run="All", field_manager=RECONCILER_MANAGER)
    except ApiException as exc:
        if exc.status not in (401, 403):
            return None  # not a question of identity: the sync reports it as it would
        try:
            message = str(json.loads(exc.body or "{}").get("message") or exc.reason)
        except ValueError:
            message = str(exc.reason)
        return _text(whoami(api), message, f"Node {node.name}", asker)
    return None


def _text(who: Identity, denial: str, where: str, asker: Asker) -> str:
    found = _ACCEPTED.search(denial)
    accepted = found.group(1) if found else f"{DEFAULT_USER} (the default of migops webhook --reconciler-user)"
    namespace, account = SERVICE_ACCOUNT
    lines = [
        asker.headline,
        f"  it runs as: {who.describe()}",
        f"  the webhook accepts, for what git owns on a managed node: {accepted}",
        "  run as one of them:",
        f"    {asker.command} --as {DEFAULT_USER} ...   (impersonation: a cluster admin may)",
        f"    or with a kubeconfig holding that ServiceAccount's token (kubectl create token {account} -n {namespace})",
        *(f"    {line}" for line in asker.otherwise),
        f"  the API server answered a dry run on {where}:",
    ]
    lines += [f"    {line}" for line in denial.splitlines()[:12]]
    return "\n".join(lines)

"""The MigSync custom resource, defined once: its API names, its spec and status as typed values, the
one reader of a MigSync's spec (`parse_spec`), and its CustomResourceDefinition (`crd`), whose schema
is made from the same types (api/schema.py). The reconciler serves it, the webhook reads which MigSync
owns a node and where its nodes.yaml is, the CLI writes one from its flags; none of them parses a
MigSync another way. The CRD file the chart and the manifests ship is this `crd()` as written by
`make generate` (hack/generate.py), and a test fails when the two differ.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from migops.api.schema import dump, openapi, parse, prop

GROUP, VERSION, PLURAL, KIND = "migops.io", "v1alpha1", "migsyncs", "MigSync"
API_VERSION = f"{GROUP}/{VERSION}"
CRD_NAME = f"{PLURAL}.{GROUP}"

# The repository's two files (docs/gitops.md), under the MigSync's spec.path.
CONFIG_FILE = "config.yaml"
NODES_FILE = "nodes.yaml"
# The applied record (reconciler/record.py): a ConfigMap beside the MigSync whose plain data says which
# revision is in force and the digest of its config.yaml, the text the MIG ConfigMap holds while it is.
# The agent compares the MIG ConfigMap's text with it before it acts on new content.
RECORD_REVISION_KEY = "revision"
RECORD_DIGEST_KEY = "configDigest"


def record_name(migsync: str) -> str:
    """The applied record of MigSync `migsync`, in its namespace."""
    return f"migops-applied-{migsync}"[:253]


def config_text_digest(text: str) -> str:
    """The digest of a whole config.yaml as the applied record writes it."""
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


# ------------------------------------------------------------------------------------------ spec
class VerifyMode(StrEnum):
    NONE = "none"
    HEAD = "head"  # the commit applied must be signed by a trusted key


@dataclass(frozen=True)
class TrustPolicy:
    """spec.verify: what to verify and which keys are trusted (public keys only: they are not secrets)."""

    mode: VerifyMode = prop(default=VerifyMode.NONE, served_default=True)
    allowed_signers: str = prop(
        "OpenSSH allowed_signers text (principal [options] key-type key, one per line)", default=""
    )
    openpgp_keys: tuple[str, ...] = prop("ASCII-armored OpenPGP public keys", default=())

    def __post_init__(self) -> None:
        if self.mode not in set(VerifyMode):
            modes = ", ".join(VerifyMode)
            raise ValueError(f"verification mode must be one of {modes}, not {self.mode!r}")
        object.__setattr__(self, "mode", VerifyMode(self.mode))  # "head" as given by a flag
        if self.enabled and not self.allowed_signers.strip() and not self.openpgp_keys:
            raise ValueError(
                "signature verification needs trusted keys: an allowed-signers list (SSH) or OpenPGP public keys"
            )

    @property
    def enabled(self) -> bool:
        return self.mode != VerifyMode.NONE


@dataclass(frozen=True)
class SuggestSpec:
    """spec.suggest: publish `migops suggest`'s proposal (never applied)."""

    enabled: bool = prop(default=False, served_default=True)
    # A proposal costs a list of every pod, and seconds of solving.
    interval: float = prop(
        "how often to compute the proposal (a list of every pod, and seconds of solving)", duration="5m", always=True
    )


@dataclass(frozen=True)
class SyncSpec:
    """What to sync: a MigSync's spec, or the command line's flags."""

    url: str = prop("git URL: a path, file://, https:// or ssh:// (scp-style user@host:path too)", min_length=1)
    ref: str = prop("branch, tag, commit SHA or full ref; empty follows the remote's HEAD", default="")
    path: str = prop("directory holding config.yaml and nodes.yaml; empty is the root", default="")
    interval: float = prop(
        "how often to fetch the repo (a POST /hook triggers a sync at once)", duration="60s", always=True
    )
    suspend: bool = prop("true stops syncing (nothing is fetched or written) until set back", default=False)
    trust: TrustPolicy = prop(
        "commits must be signed by one of these keys (public keys only)", json="verify", factory=TrustPolicy
    )
    suggest: SuggestSpec = prop(
        "opt-in: publish migops suggest's proposal for the pending MIG pods in status.suggestion, the "
        "migops_pending_mig_requests metric and an Event when it changes; never applied (docs/suggest.md)",
        factory=SuggestSpec,
    )


def parse_spec(obj: Mapping[str, Any]) -> SyncSpec:
    """A MigSync object's spec; ValueError naming the field and its rule (`spec.interval: ...`)."""
    spec: SyncSpec = parse(SyncSpec, obj.get("spec") or {}, "spec")
    return spec


def migsync_object(name: str, namespace: str, spec: SyncSpec) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": name, "namespace": namespace},
        "spec": dump(spec),
    }


# ------------------------------------------------------------------------------------------ status
class ConditionStatus(StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class NodePhase(StrEnum):
    """A managed node's phase, as status and `migops_nodes{phase}` show it."""

    IN_SYNC = "InSync"
    PROGRESSING = "Progressing"  # given its config (or changing for another reason), not done yet
    WAITING = "Waiting"  # its turn has not come (waves) or the rollout is halted
    FAILED = "Failed"
    DRIFTED = "Drifted"  # applied, but its GPUs differ from the config (the agent's drift annotation)
    SKIPPED = "Skipped"  # a dynamic MIG manager owns its geometry (migops.kube.owners): never written


@dataclass(frozen=True)
class Condition:
    """A kstatus condition; the time and generation are set when it is merged into the status."""

    type: str
    status: ConditionStatus
    reason: str
    message: str = prop(default="", always=True)
    observed_generation: int | None = prop(default=None, fmt="int64")
    last_transition_time: str = prop(default="", required=True, fmt="date-time")


@dataclass(frozen=True)
class StatusSummary:
    in_sync: str = prop("in sync / managed, for kubectl get", required=False)
    total: int = prop(required=False)
    progressing: int = prop(required=False)
    waiting: int = prop(required=False)
    failed: int = prop(required=False)
    drifted: int = prop("applied, but the agent reports GPUs that differ from the config", required=False)
    skipped: int = prop("owned by a dynamic MIG manager: left alone", required=False)
    max_unavailable: int = prop(required=False)


@dataclass(frozen=True)
class NodeEntry:
    name: str
    config: str = prop("desired nvidia.com/mig.config", required=False)
    phase: NodePhase = prop(required=False)
    state: str = prop("nvidia.com/mig.config.state as the node reports it", required=False)
    revision: str = prop("the revision that gave the node this config", default="")
    message: str = prop(default="")


@dataclass(frozen=True)
class MigSyncStatus:
    """What the reconciler reports; None (or an empty default) is left out of the object."""

    observed_generation: int | None = prop(default=None, fmt="int64")
    last_applied_revision: str | None = None
    last_attempted_revision: str | None = None
    last_handled_resume: str | None = None
    suggestion: Mapping[str, Any] | None = prop(
        "spec.suggest: the proposal for the revision in force (summary, changes, unserved, patch); git "
        "applies it, not the reconciler",
        default=None,
        open_object=True,
    )
    config_map: str | None = None
    conditions: tuple[Condition, ...] = prop(default=(), map_keys=("type",))
    summary: StatusSummary | None = None
    nodes: tuple[NodeEntry, ...] | None = prop(
        "per node, nodes not in sync first; at most 1,000 entries (summary counts all)", default=None
    )
    warnings: tuple[str, ...] | None = prop(
        "warnings of the revision in force (assignments that match no node, ...)", default=None
    )
    problems: tuple[str, ...] | None = prop(
        "why the last attempted revision was not applied (file: path: message [rule])", default=None
    )


def parse_status(obj: Mapping[str, Any]) -> MigSyncStatus:
    """A MigSync object's status (empty when it has none); ValueError naming the field."""
    status: MigSyncStatus = parse(MigSyncStatus, obj.get("status") or {}, "status")
    return status


# ------------------------------------------------------------------------------------------ the CRD
_PRINTER_COLUMNS = [
    {"name": "Ready", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].status'},
    {
        "name": "Nodes",
        "type": "string",
        "description": "nodes in sync / nodes managed",
        "jsonPath": ".status.summary.inSync",
    },
    {"name": "Revision", "type": "string", "jsonPath": ".status.lastAppliedRevision"},
    {"name": "Status", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].message'},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


def crd() -> dict[str, Any]:
    """The MigSync CustomResourceDefinition, its schema made from SyncSpec and MigSyncStatus."""
    schema = {
        "type": "object",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": openapi(SyncSpec),
            "status": openapi(MigSyncStatus),
        },
    }
    version = {
        "name": VERSION,
        "served": True,
        "storage": True,
        "subresources": {"status": {}},
        "additionalPrinterColumns": _PRINTER_COLUMNS,
        "schema": {"openAPIV3Schema": schema},
    }
    names = {
        "kind": KIND,
        "listKind": f"{KIND}List",
        "plural": PLURAL,
        "singular": KIND.lower(),
        "shortNames": ["msync"],
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD_NAME, "labels": {"app.kubernetes.io/part-of": "migops"}},
        "spec": {"group": GROUP, "scope": "Namespaced", "names": names, "versions": [version]},
    }

"""Rules for a Node whose nvidia.com/mig.config label is set or changed.

The webhook configuration's matchConditions send only those writes here (kubelets and mig-manager
write Nodes constantly), and those that change the migops.io/managed-by annotation; through the Node
and its `status` subresource alike (a status write can carry labels too).

- On a node a MigSync manages (migops.io/managed-by, set by the reconciler) and not labelled
  migops.io/unmanaged=true, git is the only writer of nvidia.com/mig.config: a change by anyone but
  the reconciler's identity is denied, naming the MigSync, its repo and the file to change, and so is
  anyone else's change of the annotation itself (which would otherwise take the node out in one step).
- The name must exist in the MIG ConfigMap in force, and that config must be placeable on this
  node's GPUs under the cluster's MIG strategy (so under `single`, one MIG device type):
  `migops.mig.fit` answers that, with the errors of the config's text itself (as `migops validate`
  and gitops do). Removing the label is allowed: mig-manager then leaves the GPUs as they are.

A verdict reads no other node: it is cached under the settings, the config in force and the MigSync
named, so a rollout across thousands of nodes never invalidates it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, Literal

from migops.api.migsync import NODES_FILE
from migops.api.names import (
    DEVICE_ID_LABEL,
    GPU_COUNT_LABEL,
    GPU_PRODUCT_LABEL,
    GPUS_ANNOTATION,
    MANAGED_BY_ANNOTATION,
    MIG_CONFIG_LABEL,
    REVISION_ANNOTATION,
    UNMANAGED_LABEL,
)
from migops.api.objects import NodeFacts, annotations_of, is_unmanaged, labels
from migops.kube import owners
from migops.mig.gfd import NodeGpus
from migops.mig.problems import MigError
from migops.mig.text import did_you_mean, listed
from migops.webhook import checks
from migops.webhook.admission import ALLOW, Request, Verdict, allow, deny, merge_warnings
from migops.webhook.findings import Finding, Warning_, split
from migops.webhook.state import MigSyncRef, Snapshot

_GPU_KEYS = (GPU_PRODUCT_LABEL, GPU_COUNT_LABEL, DEVICE_ID_LABEL)


def _bounded(value: object) -> object:
    """A value for a cache key: short ones as they are, long ones (an annotation) by digest."""
    return checks.digest(value) if isinstance(value, str) and len(value) > 128 else value


def cache_key(req: Request) -> tuple:
    """What the verdict depends on in the request. Every part is bounded: label values by
    admission.check_object (63 characters), the GPUs annotation by digest."""
    new, old = labels(req.object), labels(req.old_object)
    return (
        req.name,
        req.operation,
        new.get(MIG_CONFIG_LABEL),
        old.get(MIG_CONFIG_LABEL),
        tuple(new.get(k) for k in _GPU_KEYS),
        _bounded(annotations_of(req.object).get(GPUS_ANNOTATION)),
        _ownership_key(req),
    )


def _ownership_key(req: Request) -> tuple:
    return (
        req.username,
        _bounded(annotations_of(req.object).get(MANAGED_BY_ANNOTATION)),
        _bounded(annotations_of(req.old_object).get(MANAGED_BY_ANNOTATION)),
        labels(req.object).get(UNMANAGED_LABEL),
        _bounded(annotations_of(req.object).get(REVISION_ANNOTATION)),
        _bounded(annotations_of(req.old_object).get(REVISION_ANNOTATION)),
        owners.node_owner(req.object or {}),
    )


def reads(req: Request, snap: Snapshot, fetched: Fetched | None = None) -> tuple:
    """What the verdict reads of the cluster state: the settings and the config in force, the MigSync
    the node names and who the reconciler is (no other node); and what a live read of a MigSync found
    (a failed read's verdict is never cached: the review's uid)."""
    owner = _owner(req)
    base = (snap.mig.key, snap.migsync(owner) if owner else None, snap.reconciler_users)
    if fetched is None:
        return base
    return (*base, req.uid if isinstance(fetched[1], Exception) else fetched)


def _owner(req: Request) -> str | None:
    """The MigSync (namespace/name) managing the node before this write (after it, on CREATE)."""
    obj = req.old_object if req.operation == "UPDATE" else req.object
    found = annotations_of(obj).get(MANAGED_BY_ANNOTATION)
    return found or None


# What a live GET of a MigSync the cache lacks found: the MigSync, ABSENT when it does not exist, or
# the failure (the rule then denies: it never decides "unmanaged" on a cache miss, nor unread).
ABSENT: Final = "absent"
Live = MigSyncRef | Literal["absent"] | Exception
Fetched = tuple[str, Live]  # (the MigSync named, what its live read found)
# (namespace, name) -> the MigSync, None when it does not exist; raises when it cannot tell.
ReadMigSync = Callable[[str, str], MigSyncRef | None]


def prefetch(req: Request, snap: Snapshot, read: ReadMigSync | None) -> Fetched | None:
    """The MigSync uncached_owner names, read from the API server (before the rule, unlocked)."""
    owner = uncached_owner(req, snap)
    if owner is None:
        return None
    if read is None:
        return owner, LookupError("this webhook cannot read MigSyncs")
    namespace, _, name = owner.partition("/")
    try:
        found = read(namespace, name) if namespace and name else None
    except Exception as exc:  # noqa: BLE001 - the rule turns it into a denial that says why
        return owner, exc
    return owner, ABSENT if found is None else found


def uncached_owner(req: Request, snap: Snapshot) -> str | None:
    """The MigSync (namespace/name) the node names that the webhook's cache does not hold, when the
    verdict depends on whether it exists (a change of the label by someone other than the
    reconciler): app.py reads it from the API server before deciding."""
    owner = _owner(req)
    if owner is None or snap.migsync(owner) is not None or req.username in snap.reconciler_users:
        return None
    if is_unmanaged(req.object):
        return None
    if labels(req.object).get(MIG_CONFIG_LABEL) == labels(req.old_object).get(MIG_CONFIG_LABEL):
        return None
    return owner


def ownership(req: Request, snap: Snapshot, live: Live | None = None) -> tuple[list[Finding], list[Warning_]]:
    """Git owns nvidia.com/mig.config of a managed node: only the reconciler changes it (or the
    managed-by annotation), unless the write labels the node migops.io/unmanaged=true."""
    if req.username in snap.reconciler_users:
        return [], []
    who = f"{req.username or 'this user'} (the reconciler's identities: {listed(sorted(snap.reconciler_users), 4)})"
    findings = _revision(req, who)
    if is_unmanaged(req.object):
        return findings, []
    new_owner = annotations_of(req.object).get(MANAGED_BY_ANNOTATION)
    old_owner = annotations_of(req.old_object).get(MANAGED_BY_ANNOTATION) if req.operation == "UPDATE" else new_owner
    if req.operation == "UPDATE" and new_owner != old_owner:
        findings.append(
            (
                "managed-by",
                f"metadata.annotations.\"{MANAGED_BY_ANNOTATION}\": written by the reconciler "
                f"only, not by {who}; {_WAY_OUT}",
            )
        )
    if not old_owner or labels(req.object).get(MIG_CONFIG_LABEL) == labels(req.old_object).get(MIG_CONFIG_LABEL):
        return findings, []
    found, warnings = _owner_verdict(old_owner, snap.migsync(old_owner), live, who)
    return findings + found, warnings


_WAY_OUT = (
    f"to take the node out of management, label it {UNMANAGED_LABEL}=true (the reconciler then leaves it "
    "alone and anyone may set its labels)"
)


def _revision(req: Request, who: str) -> list[Finding]:
    """The revision annotation is the reconciler's, even on an unmanaged node: labelling it back would
    restore a forgery."""
    new_revision = annotations_of(req.object).get(REVISION_ANNOTATION)
    old_revision = annotations_of(req.old_object).get(REVISION_ANNOTATION) if req.operation == "UPDATE" else None
    if new_revision == old_revision:
        return []
    return [
        (
            "revision",
            f"metadata.annotations.\"{REVISION_ANNOTATION}\": written by the reconciler only, with "
            f"the label it describes (its MigSync reports it as the revision that gave the node its config), "
            f"not by {who}",
        )
    ]


def _owner_verdict(
    owner: str, sync: MigSyncRef | None, live: Live | None, who: str
) -> tuple[list[Finding], list[Warning_]]:
    """A change of the config label of a node MigSync `owner` manages (`sync` from the cache, `live`
    from the API server when the cache lacks it)."""
    if sync is None and isinstance(live, MigSyncRef):  # the cache lags: the API server has it
        sync = live
    if sync is None and live != ABSENT:  # not read, or the read failed
        reason = (getattr(live, "reason", None) or str(live)[:200] or type(live).__name__) if live else "not read"
        return [
            (
                "managed-by-unverified",
                f"metadata.annotations.\"{MANAGED_BY_ANNOTATION}\": names MigSync {owner}, which the "
                f"webhook could not read ({reason}), so it cannot tell whether git owns this node's MIG "
                "config; try again",
            )
        ], []
    if sync is None:
        return [], [("managed-by-unknown", MANAGED_BY_ANNOTATION, f"MigSync {owner} does not exist; not git-owned")]
    where = f"{sync.path}/{NODES_FILE}" if sync.path else NODES_FILE
    ref = f" (ref {sync.ref})" if sync.ref else ""
    return [
        (
            "git-owned",
            f"metadata.labels.\"{MIG_CONFIG_LABEL}\": this node is managed by MigSync "
            f"{owner}: git is the only writer of its MIG config; change {where} in {sync.url}{ref} "
            f"and let the reconciler apply it (not {who}); {_WAY_OUT}",
        )
    ], []


def owners_findings(req: Request, value: object) -> list[Finding]:
    """A node whose MIG geometry a dynamic MIG manager owns (migops.kube.owners) takes no config label."""
    owner = owners.node_owner(req.object or {})
    if owner is None or value is None or value == labels(req.old_object).get(MIG_CONFIG_LABEL):
        return []
    return [
        (
            "dynamic-mig-owner",
            f"metadata.labels.\"{MIG_CONFIG_LABEL}\": this node's MIG geometry is owned by {owner}: "
            f"{owners.why(owner)}; remove the label",
        )
    ]


def validate(req: Request, snap: Snapshot, fetched: Fetched | None = None) -> Verdict:
    """`fetched`: the MigSync uncached_owner names, as prefetch read it from the API server (None: not
    read, so a cache miss is denied as unverified)."""
    if req.operation not in ("CREATE", "UPDATE"):
        return ALLOW
    live = fetched[1] if fetched is not None else None
    value = labels(req.object).get(MIG_CONFIG_LABEL)
    subject = f"Node {req.name}: {MIG_CONFIG_LABEL}={value}" if value is not None else f"Node {req.name}"
    owned, warnings = ownership(req, snap, live)
    owned += owners_findings(req, value)
    findings, more = _config(req, snap, value)
    warnings += more
    if owned:  # with what else is wrong, so one answer says everything
        return deny(subject, owned + findings, code=403, reason="Forbidden", warnings=merge_warnings(warnings))
    if findings:
        return deny(subject, findings, warnings=merge_warnings(warnings))
    return allow(merge_warnings(warnings))


def _config(req: Request, snap: Snapshot, value: object) -> tuple[list[Finding], list[Warning_]]:
    """The label's value against the MIG ConfigMap in force and this node's GPUs."""
    if value is None or value == labels(req.old_object).get(MIG_CONFIG_LABEL):
        return [], []  # removed or unchanged
    where = f"metadata.labels.\"{MIG_CONFIG_LABEL}\""
    if not isinstance(value, str):
        return [("label-value", f"{where}: must be a string")], []
    config = snap.active_config
    if config is None:
        return [
            (
                "configmap-missing",
                f"{where}: the MIG ConfigMap {snap.configmap_name} (named by the "
                "ClusterPolicy) does not exist or has no config.yaml; mig-manager has nothing to apply",
            )
        ], []
    if isinstance(config, MigError):
        first = config.problems[0]
        return [
            (
                "configmap-invalid",
                f"{where}: the MIG ConfigMap {snap.configmap_name} is itself invalid ({first.path}: {first.message})",
            )
        ], []
    names = config.names()
    if value not in names:
        hint = did_you_mean(value, names)
        shown = listed(names, 8)
        return [("config-not-found", f"{where}: no config {value!r} in {snap.configmap_name} (has: {shown}){hint}")], []
    node = NodeFacts.from_obj(req.object or {})
    warnings: list[Warning_] = []
    strategy = snap.strategy
    if node.gpus:
        verdict = checks.fit(config, value, NodeGpus(node.gpus, node.exact), strategy)
        context = f"on this node: {node.describe()}"
    else:  # the text's own errors still hold; the geometry on this node cannot be checked
        why = node.gpu_problem or "the node has no GPU labels"
        warnings.append(("gpus-unknown", req.name, f"geometry not checked: {why}"))
        verdict = checks.fit(config, value, None, strategy)
        context = ""
    findings, warns = split(verdict.problems, context)
    return findings, warnings + warns

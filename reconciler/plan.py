"""Desired state + what the cluster shows → what to write now. Pure: no I/O, unit-testable.

A node given a config is *done* when its `nvidia.com/mig.config.state` is `success` for that config:
with the migops agent (it leaves `migops.io/` annotations) that means the digest annotation equals the
digest of the config assigned; a node run by NVIDIA's mig-manager has no digest, so after we change its
label we wait to see the state leave `success` and come back (the caller tracks that: `awaiting`).

Waves: at most `maxUnavailable` nodes reconfigure at once. Unavailable = busy (given its config, not
done yet; or mid-change for another reason: pending/rebooting; or drifted: its agent reports that the
GPUs differ from the applied config) + failed on the config it was given.
A node that failed on its desired config halts the rollout (nothing more is written to nodes) until a
new commit or a resume acknowledges the failure; acknowledged failures no longer count.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from migops.api import objects
from migops.api.migsync import NodePhase
from migops.api.names import (
    AGENT_ANNOTATIONS,
    DRIFT_ANNOTATION,
    MANAGED_BY_ANNOTATION,
    MIG_CONFIG_LABEL,
    REASON_ANNOTATION,
    RECONCILER_MANAGER,
    REVISION_ANNOTATION,
    STATE_FAILED,
    STATE_PENDING,
    STATE_REBOOTING,
    STATE_SUCCESS,
)
from migops.api.objects import NodeFacts, is_unmanaged, label_owner_entry
from migops.gitops.desired import DesiredState, NodeTarget
from migops.kube.owners import node_owner

_KEPT_ANNOTATIONS = (
    *AGENT_ANNOTATIONS,
    REASON_ANNOTATION,
    DRIFT_ANNOTATION,
    MANAGED_BY_ANNOTATION,
    REVISION_ANNOTATION,
)
_LABEL_FIELD = "f:" + MIG_CONFIG_LABEL


IN_SYNC, PROGRESSING, WAITING, FAILED, DRIFTED, SKIPPED = (
    NodePhase.IN_SYNC,
    NodePhase.PROGRESSING,
    NodePhase.WAITING,
    NodePhase.FAILED,
    NodePhase.DRIFTED,
    NodePhase.SKIPPED,
)


def trim_for_reconciler(obj: dict[str, Any]) -> dict[str, Any]:
    """Informer transform: a Node as the reconciler reads it (name, labels, the agent's annotations, and
    our own managedFields entry for the config label when we own it); the rest is status nobody here
    needs. The result is still a Node's shape: resolve() and node_gpus() read it like any Node."""
    meta = objects.meta(obj)
    annotations = objects.annotations_of(obj)
    return {
        "metadata": {
            "name": meta.get("name"),
            "uid": meta.get("uid"),
            "resourceVersion": meta.get("resourceVersion"),
            "labels": meta.get("labels") or {},
            "annotations": {k: annotations[k] for k in _KEPT_ANNOTATIONS if k in annotations},
            "managedFields": _our_label_entry(obj),
        }
    }


def _our_label_entry(obj: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Our Apply entry, cut down to the config label, when our field manager owns that label."""
    entry = label_owner_entry(obj, RECONCILER_MANAGER, MIG_CONFIG_LABEL)
    return [] if entry is None else [_owned_entry(entry.time)]


def _owned_entry(time: str | None) -> dict[str, Any]:
    """A managedFields entry of ours that owns the config label (what our apply leaves)."""
    return {
        "manager": RECONCILER_MANAGER,
        "operation": "Apply",
        "time": time,
        "fieldsV1": {"f:metadata": {"f:labels": {_LABEL_FIELD: {}}}},
    }


def owns_config_label(obj: Mapping[str, Any]) -> bool:
    """Whether our field manager owns the node's nvidia.com/mig.config (from its managedFields)."""
    return label_owner_entry(obj, RECONCILER_MANAGER, MIG_CONFIG_LABEL) is not None


def config_state(obj: Mapping[str, Any]) -> NodeFacts:
    """What a node shows of its MIG config, as the reconciler reads it (the offers left unread)."""
    return NodeFacts.from_obj(obj, offers=False)


def label_written_at(obj: Mapping[str, Any]) -> float | None:
    """When our field manager last wrote the config label (its managedFields time), unix seconds."""
    return config_state(obj).label_written_at


def defaulted(new: DesiredState, before: Mapping[str, str] | None) -> tuple[str, ...]:
    """Nodes `new` gives the `default` config that an assignment chose a config for before
    (`before`: node -> the source that chose its config, as the revision in force resolved it)."""
    if not before:
        return ()
    return tuple(
        sorted(
            name
            for name, t in new.targets.items()
            if t.source == "default" and before.get(name) not in (None, "default")
        )
    )


def with_config_label(obj: Mapping[str, Any], label: str | None, owner: str = "", revision: str = "") -> dict[str, Any]:
    """The node as it is once our write of `label` (with the managed-by `owner` and `revision`
    annotations) lands; None: our label and annotations released and removed."""
    meta = objects.meta(obj)
    labels = dict(objects.labels(obj))
    annotations = {
        k: v for k, v in objects.annotations_of(obj).items() if k not in (MANAGED_BY_ANNOTATION, REVISION_ANNOTATION)
    }
    if label is None:
        labels.pop(MIG_CONFIG_LABEL, None)
    else:
        labels[MIG_CONFIG_LABEL] = label
        annotations[MANAGED_BY_ANNOTATION] = owner
        if revision:
            annotations[REVISION_ANNOTATION] = revision
    owned = [_owned_entry(None)] if label is not None else []
    return {**obj, "metadata": {**meta, "labels": labels, "annotations": annotations, "managedFields": owned}}


def without_annotations(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The node once our release (managed-by and revision annotations removed) lands."""
    meta = objects.meta(obj)
    annotations = {
        k: v for k, v in objects.annotations_of(obj).items() if k not in (MANAGED_BY_ANNOTATION, REVISION_ANNOTATION)
    }
    return {**obj, "metadata": {**meta, "annotations": annotations}}


@dataclass(frozen=True)
class NodeStatus:
    name: str
    config: str
    phase: NodePhase
    state: str  # the state label, or "-"
    message: str = ""
    revision: str | None = None  # the revision that gave it its config, from the node's annotation


@dataclass(frozen=True)
class Plan:
    configmap_changed: bool
    writes: tuple[tuple[str, str], ...]  # (node, config) to label now, in order
    drift: frozenset[str]  # nodes among `writes` whose label was changed by hand from a config they had reached
    prunes: tuple[str, ...]  # nodes whose label we remove (prune: true)
    nodes: tuple[NodeStatus, ...]
    max_unavailable: int
    unavailable: int
    halted: tuple[NodeStatus, ...] = ()  # failed nodes that stop the rollout
    counts: dict[NodePhase, int] = field(default_factory=dict)
    annotate: tuple[tuple[str, str], ...] = ()  # (node, config): already has its label, lacks our managed-by
    releases: tuple[str, ...] = ()  # nodes that left management: our annotations go, the label stays

    @property
    def converged(self) -> bool:
        # Skipped nodes (a dynamic MIG manager owns them) are never written, so never wait on them.
        settled = self.counts.get(IN_SYNC, 0) + self.counts.get(SKIPPED, 0)
        return not self.configmap_changed and settled == len(self.nodes) and not self.prunes


def max_unavailable(value: int | str, total: int) -> int:
    """A count, or a percentage of the managed nodes rounded down; at least 1 so a rollout can move."""
    if isinstance(value, str):
        return max(1, math.floor(total * int(value.rstrip("%")) / 100))
    return max(1, value)


def is_done(view: NodeFacts, target: NodeTarget, awaiting: bool) -> bool:
    if view.config != target.config:
        return False
    awaiting = awaiting and not view.agent  # the digest tells an agent's node; only mig-manager needs the transition
    if view.state is None:
        # Nothing reports on this node. If we did not set its label, nothing is waiting for it.
        return not view.owned and not awaiting and not view.agent
    if view.state != STATE_SUCCESS or awaiting:
        return False
    return not view.agent or view.digest == target.digest


def plan(
    desired: DesiredState,
    nodes: Mapping[str, Mapping[str, Any]],
    configmap_text: str | None,
    *,
    acknowledged: frozenset[str] = frozenset(),
    awaiting: frozenset[str] = frozenset(),
    reached: Mapping[str, str] | None = None,
    skip: frozenset[str] = frozenset(),
    owner: str = "",
) -> Plan:
    """What to write for `desired` on `nodes` (name -> trimmed Node).

    acknowledged: failed nodes a resume or a new commit has acknowledged (they no longer halt or count);
    awaiting: mig-manager nodes we relabelled and have not yet seen leave `success`;
    reached: node -> config it was last seen done with (to tell a hand edit from a new assignment);
    skip: nodes not to write this time (a write to them was refused and nothing has changed since);
    owner: "<namespace>/<migsync>", the managed-by annotation every node given a config carries.
    Nodes a person took out of management (unmanaged) are neither targets nor written, only released.
    """
    reached = reached or {}
    statuses: list[NodeStatus] = []
    busy = 0
    halted: list[NodeStatus] = []
    eligible: list[tuple[int, str, str]] = []  # (priority, node, config)
    annotate: list[tuple[str, str]] = []
    counts = {phase: 0 for phase in NodePhase}
    skipped: list[NodeStatus] = []
    for name in sorted(desired.targets):
        obj = nodes.get(name)
        if obj is None or is_unmanaged(obj):
            continue
        dynamic = node_owner(obj)
        if dynamic is not None:  # neither written nor counted against the rollout's budget
            skipped.append(
                NodeStatus(
                    name,
                    desired.targets[name].config,
                    SKIPPED,
                    config_state(obj).state or "-",
                    f"MIG geometry owned by {dynamic}; migops leaves this node alone",
                )
            )
            counts[SKIPPED] += 1
            continue
        view = config_state(obj)
        s, turn = _classify(view, desired.targets[name], name in awaiting)
        if owner and view.config == s.config and view.managed_by != owner and name not in skip:
            annotate.append((name, s.config))
        if s.phase == FAILED and name not in acknowledged:
            halted.append(s)
        busy += s.phase in (PROGRESSING, DRIFTED)
        if turn is not None and name not in skip:
            eligible.append((turn, name, s.config))
        counts[s.phase] += 1
        statuses.append(s)
    return _wave(
        desired, nodes, configmap_text, owner, reached, statuses, skipped, halted, eligible, annotate, counts, busy
    )


def _wave(
    desired: DesiredState,
    nodes: Mapping[str, Mapping[str, Any]],
    configmap_text: str | None,
    owner: str,
    reached: Mapping[str, str],
    statuses: list[NodeStatus],
    skipped: list[NodeStatus],
    halted: list[NodeStatus],
    eligible: list[tuple[int, str, str]],
    annotate: list[tuple[str, str]],
    counts: dict[NodePhase, int],
    busy: int,
) -> Plan:
    """The plan from what `plan` saw of each node: this wave's writes within maxUnavailable."""
    limit = max_unavailable(desired.spec.nodes.max_unavailable, len(statuses))
    unavailable = busy + len(halted)
    budget = 0 if halted else max(0, limit - unavailable)
    eligible.sort()
    writes = tuple((name, config) for _, name, config in eligible[:budget])
    drift = frozenset(name for name, config in writes if reached.get(name) == config)
    prunes = _prunes(desired, nodes)
    return Plan(
        configmap_text != desired.spec.config_text,
        writes,
        drift,
        prunes,
        tuple(statuses + skipped),
        limit,
        unavailable,
        tuple(halted),
        counts,
        tuple(annotate),
        _releases(desired, nodes, owner, prunes),
    )


def _classify(view: NodeFacts, target: NodeTarget, awaiting: bool) -> tuple[NodeStatus, int | None]:
    """The node's status, and its priority for a new label (None: it needs none now)."""

    def status(phase: NodePhase, message: str = "") -> NodeStatus:
        return NodeStatus(
            view.name,
            target.config,
            phase,
            view.state or "-",
            message,
            view.revision if view.config == target.config else None,
        )

    at_desired = view.config == target.config
    if view.state == STATE_FAILED:
        why = view.reason or "the node reports nvidia.com/mig.config.state=failed"
        if at_desired:
            return status(FAILED, why), None
        return status(WAITING, f"failed on {view.config!r}: {why}"), 0
    if at_desired:
        if not is_done(view, target, awaiting):
            return status(PROGRESSING, _progress_message(view, target, awaiting)), None
        if view.drift:
            return status(DRIFTED, f"the GPUs differ from {target.config!r}: {view.drift}"), None
        return status(IN_SYNC), None
    if view.state in (STATE_PENDING, STATE_REBOOTING):
        return status(PROGRESSING, f"still changing to {view.config!r}; waits its turn"), None
    return status(WAITING, f"has {view.config!r}" if view.config else "has no config label"), 1


def _prunes(desired: DesiredState, nodes: Mapping[str, Mapping[str, Any]]) -> tuple[str, ...]:
    """With prune: nodes outside every assignment whose label we set (and still own)."""
    if not desired.spec.nodes.prune:
        return ()
    return tuple(
        sorted(
            name
            for name, obj in nodes.items()
            if name not in desired.targets
            and owns_config_label(obj)
            and not is_unmanaged(obj)
            and node_owner(obj) is None
            and objects.labels(obj).get(MIG_CONFIG_LABEL) is not None
        )
    )


def _releases(
    desired: DesiredState, nodes: Mapping[str, Mapping[str, Any]], owner: str, prunes: tuple[str, ...]
) -> tuple[str, ...]:
    """Nodes carrying our managed-by that are no longer ours to manage (unmanaged, or outside every
    assignment without prune; a pruned node loses the annotation with its label)."""
    if not owner:
        return ()
    return tuple(
        sorted(
            name
            for name, obj in nodes.items()
            if objects.annotations_of(obj).get(MANAGED_BY_ANNOTATION) == owner
            and (name not in desired.targets or is_unmanaged(obj))
            and name not in prunes
        )
    )


def _progress_message(view: NodeFacts, target: NodeTarget, awaiting: bool) -> str:
    if view.state is None:
        return "waiting for the node's MIG manager to report nvidia.com/mig.config.state"
    if view.state == STATE_SUCCESS and view.agent and view.digest != target.digest:
        return f"applied content {view.digest or '(none)'}; waiting for {target.digest[:19]}"
    if awaiting:
        return "waiting for mig-manager to pick up the new label"
    return f"state {view.state}"

"""The MigSync's status as the reconciler makes it (the types are migops.api.migsync's).

Conditions follow kstatus as Flux uses it: `Ready` (True when the revision is applied and every node
is in sync; Unknown while rolling out; False on a failure, with the reason), `Reconciling` (True while
a rollout is under way), `Stalled` (True when nothing will move without a person: an invalid or
unverified commit, a halted rollout, a refused write). Each has reason, message, observedGeneration
and a lastTransitionTime that changes only when the status does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from kubernetes import client as k8s

from migops.api import migsync
from migops.api.migsync import Condition, NodeEntry, StatusSummary
from migops.kube import crds
from migops.reconciler.plan import DRIFTED, FAILED, IN_SYNC, PROGRESSING, SKIPPED, WAITING, Plan

DEFAULT_NAME, DEFAULT_NAMESPACE = "migops", "migops-system"
MAX_STATUS_NODES = 1000  # keeps the object far below etcd's request limit at 10,000 nodes


def install_crd(api: k8s.ApiClient, *, field_manager: str, timeout: float = 30.0) -> None:
    """Apply the MigSync CRD and wait until it is Established."""
    crds.install(api, [migsync.crd()], field_manager=field_manager, timeout=timeout)


# ------------------------------------------------------------------------------------------ conditions


def merge_conditions(
    old: Sequence[Mapping[str, Any]], new: Sequence[Condition], generation: int | None
) -> tuple[Condition, ...]:
    """New conditions, keeping lastTransitionTime where the status did not change."""
    before = {c.get("type"): c for c in old}
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    out = []
    for c in new:
        prev = before.get(c.type)
        when = prev.get("lastTransitionTime") if prev and prev.get("status") == c.status else now
        out.append(
            replace(c, message=c.message[:32768], last_transition_time=when or now, observed_generation=generation)
        )
    return tuple(out)


def summary(plan: Plan) -> StatusSummary:
    total = len(plan.nodes)
    return StatusSummary(
        in_sync=f"{plan.counts.get(IN_SYNC, 0)}/{total}",
        total=total,
        progressing=plan.counts.get(PROGRESSING, 0),
        waiting=plan.counts.get(WAITING, 0),
        failed=plan.counts.get(FAILED, 0),
        drifted=plan.counts.get(DRIFTED, 0),
        skipped=plan.counts.get(SKIPPED, 0),
        max_unavailable=plan.max_unavailable,
    )


_ORDER = {FAILED: 0, DRIFTED: 1, PROGRESSING: 2, WAITING: 3, IN_SYNC: 4, SKIPPED: 5}


def node_entries(plan: Plan) -> tuple[NodeEntry, ...]:
    """Per node, those needing attention first, capped at MAX_STATUS_NODES."""
    ranked = sorted(plan.nodes, key=lambda s: (_ORDER[s.phase], s.name))[:MAX_STATUS_NODES]
    return tuple(NodeEntry(s.name, s.config, s.phase, s.state, s.revision or "", s.message[:1024]) for s in ranked)

"""Which nodes a revision's assignments reach: entries that match no node, and nodes that a commit
moves to `default` because their assignment stopped matching (a selector's typo must not pass quietly:
it turns MIG off, or on, for a pool). Shown in the AssignmentsMatched condition, Events and diff."""

from __future__ import annotations

from migops.api.migsync import Condition, ConditionStatus
from migops.gitops.desired import DesiredState
from migops.gitops.repo import RepoProblem
from migops.mig.text import listed
from migops.reconciler.plan import defaulted
from migops.reconciler.reasons import Reason
from migops.reconciler.record import AppliedRecord

UNMATCHED_RULES = ("matches-no-node", "node-not-found")
SHOWN = 5  # entries said in full; the rest are counted


def moved_to_default(
    desired: DesiredState, in_force: DesiredState | None, record: AppliedRecord | None
) -> tuple[str, ...]:
    """Nodes `desired` moves to `default` that an assignment chose for in the revision in force (or,
    after a restart, in the cluster's applied record)."""
    if in_force is not None:
        return defaulted(desired, {n: t.source for n, t in in_force.targets.items()})
    if record is not None and record.revision != desired.revision:
        return defaulted(desired, {n: t[1] for n, t in record.targets.items()})
    return ()


def moved_text(desired: DesiredState, moved: tuple[str, ...]) -> str:
    shown = listed(moved, 10)
    return (
        f"revision {desired.revision[:12]} moves {len(moved)} node(s) to default {desired.spec.nodes.default!r} "
        f"because no assignment matches them any more: {shown}"
    )


def unmatched(desired: DesiredState) -> tuple[RepoProblem, ...]:
    """The entries of nodes.yaml that match no node (a selector, or one listed name each)."""
    return tuple(w for w in desired.warnings if w.problem.rule in UNMATCHED_RULES)


def unmatched_text(found: tuple[RepoProblem, ...]) -> str:
    """What one line says of them all, however many: the first few in full, and how many more."""
    if len(found) == 1:
        return str(found[0])
    return f"{len(found)} entries match no node: " + listed(found, SHOWN, sep="; ", total=len(found))


def warnings(desired: DesiredState | None, moved: tuple[str, ...]) -> list[str]:
    """Entries that match no node (the first few, and how many more), and the nodes moved to default,
    as the condition says them."""
    if desired is None:
        return []
    found = unmatched(desired)
    shown = [unmatched_text(found)] if found else []
    return shown + ([moved_text(desired, moved)] if moved else [])


def condition(desired: DesiredState | None, moved: tuple[str, ...]) -> list[Condition]:
    """AssignmentsMatched: True when every entry matches some node and no node was moved to default."""
    if desired is None:
        return []
    found = warnings(desired, moved)
    if not found:
        return [Condition("AssignmentsMatched", ConditionStatus.TRUE, Reason.ALL_MATCHED, "")]
    reason = Reason.MOVED_TO_DEFAULT if moved and len(found) == 1 else Reason.MATCHES_NO_NODE
    return [Condition("AssignmentsMatched", ConditionStatus.FALSE, reason, "; ".join(found)[:4096])]

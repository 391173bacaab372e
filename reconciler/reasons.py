"""The reconciler's declared vocabulary: outcomes of a sync, reasons of conditions and Events, failures.

Reasons of a refused revision come from gitops (`migops.gitops.reasons.SourceReason`); the ones here
are the reconciler's own. Steps of a sync return a `Failure` (typed, with its reason) or nothing;
the summary alone turns them into conditions, Events and metrics.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from migops.gitops.reasons import SourceReason


class Outcome(StrEnum):
    """What one sync did (`migops_reconcile_total{outcome}`). The first three are fine."""

    APPLIED = "Applied"
    IN_SYNC = "InSync"
    PROGRESSING = "Progressing"  # nothing to write now; nodes are still reconfiguring
    INVALID = "Invalid"
    UNVERIFIED = "Unverified"
    UNREACHABLE = "Unreachable"
    APPLY_FAILED = "ApplyFailed"
    HALTED = "Halted"
    SUSPENDED = "Suspended"
    RELEASED = "Released"  # the MigSync was deleted: its nodes released, nothing managed any more


GOOD = frozenset({Outcome.APPLIED, Outcome.IN_SYNC, Outcome.PROGRESSING, Outcome.RELEASED})


class Reason(StrEnum):
    """The reconciler's own condition and Event reasons."""

    INVALID_SPEC = "InvalidSpec"
    SUSPENDED = "Suspended"
    APPLY_FAILED = "ApplyFailed"
    ROLLOUT_HALTED = "RolloutHalted"
    PROGRESS_DEADLINE = "ProgressDeadlineExceeded"
    SUCCEEDED = "ReconciliationSucceeded"
    PROGRESSING = "Progressing"
    RETRYING = "Retrying"
    # Events only
    CONFIGMAP_APPLIED = "ConfigMapApplied"
    DRIFT_REVERTED = "DriftReverted"
    ASSIGNED = "MigConfigAssigned"
    PRUNED = "MigConfigPruned"
    RELEASED = "NodeReleased"
    RESUMED = "RolloutResumed"
    SUGGESTION_CHANGED = "MigSuggestionChanged"  # spec.suggest: the proposal for pending MIG pods changed
    # The AssignmentsMatched condition, and its Event
    ALL_MATCHED = "AllMatched"
    MATCHES_NO_NODE = "MatchesNoNode"
    MOVED_TO_DEFAULT = "MovedToDefault"
    # The AppliedRevisionAvailable condition
    REVISION_AVAILABLE = "RevisionAvailable"
    REVISION_VANISHED = "RevisionVanished"
    RECORD_REFUSED = "AppliedRecordRefused"  # (and its Event) the record does not verify: not enforced


AnyReason = Reason | SourceReason


@dataclass(frozen=True)
class Failure:
    """Why a sync could not do all it should: the condition's reason and message, and the outcome."""

    reason: AnyReason
    message: str
    stalled: bool  # nothing will change without a person (new commit, resume)
    outcome: Outcome
    revision: str | None = None
    problems: tuple[str, ...] = ()
    # The message goes on to say what the cluster keeps instead; the summary adds that, once the
    # sync knows (a fallback later in the sync may find a revision to keep).
    kept: bool = False


@dataclass(frozen=True)
class Note:
    """An Event to record. `key` de-duplicates repeats; `involved` defaults to the MigSync."""

    reason: AnyReason
    message: str
    type: str = "Normal"
    key: tuple[Any, ...] | None = None
    involved: Mapping[str, Any] | None = None
    kept: bool = False  # as Failure.kept: the summary adds what the cluster keeps


@dataclass(frozen=True)
class SyncResult:
    """What one sync did, for its caller (the loop, `migops reconcile --once`, tests)."""

    outcome: Outcome
    revision: str | None = None
    writes: int = 0
    message: str = ""
    problems: tuple[str, ...] = ()
    plan: Any = None  # the Plan synced to, when it got that far

    @property
    def ok(self) -> bool:
        return self.outcome in GOOD

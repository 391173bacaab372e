"""The reconciler's declared vocabulary: outcomes of a sync, reasons of conditions and Events, failures.

Reasons of a refused revision come from gitops (`migops.gitops.reasons.SourceReason`); the ones here
are the reconciler's own, each with what it means and what to do (docs/troubleshooting.md). Steps of a sync return a `SyncFailure` (typed, with its reason) or nothing;
the summary alone turns them into conditions, Events and metrics.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from migops.gitops.reasons import SourceReason
from migops.mig.explain import Explanation


class SyncOutcome(StrEnum):
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


GOOD = frozenset({SyncOutcome.APPLIED, SyncOutcome.IN_SYNC, SyncOutcome.PROGRESSING, SyncOutcome.RELEASED})


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
    CONFIGMAP_UNMANAGED = "ConfigMapUnmanaged"  # (and the Ready condition while its content is not git's)
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
class SyncFailure:
    """Why a sync could not do all it should: the condition's reason and message, and the outcome."""

    reason: AnyReason
    message: str
    stalled: bool  # nothing will change without a person (new commit, resume)
    outcome: SyncOutcome
    revision: str | None = None
    problems: tuple[str, ...] = ()
    # The message goes on to say what the cluster keeps instead; the summary adds that, once the
    # sync knows (a fallback later in the sync may find a revision to keep).
    kept: bool = False


@dataclass(frozen=True)
class SyncNote:
    """An Event to record. `key` de-duplicates repeats; `involved` defaults to the MigSync."""

    reason: AnyReason
    message: str
    type: str = "Normal"
    key: tuple[Any, ...] | None = None
    involved: Mapping[str, Any] | None = None
    kept: bool = False  # as SyncFailure.kept: the summary adds what the cluster keeps


@dataclass(frozen=True)
class SyncResult:
    """What one sync did, for its caller (the loop, `migops reconcile --once`, tests)."""

    outcome: SyncOutcome
    revision: str | None = None
    writes: int = 0
    message: str = ""
    problems: tuple[str, ...] = ()
    plan: Any = None  # the Plan synced to, when it got that far

    @property
    def ok(self) -> bool:
        return self.outcome in GOOD


RECONCILER_REASONS: Mapping[Reason, Explanation] = {
    Reason.INVALID_SPEC: Explanation(
        "The MigSync's own spec is invalid (a malformed `interval`, `url` or `verify`); nothing is fetched.",
        "Fix the field the message names (`kubectl edit migsync NAME`); the CRD's schema documents each field.",
    ),
    Reason.SUSPENDED: Explanation(
        "`spec.suspend` is true: nothing is fetched or written; the nodes keep what they have.",
        "Set `spec.suspend: false` to resume.",
    ),
    Reason.APPLY_FAILED: Explanation(
        "Writes to the cluster failed: a node label, an annotation or the MIG ConfigMap. A refusal (400, 403, "
        "404, 422, an admission webhook's denial) is not tried again until the next fetch; conflicts, throttling "
        "and unavailability are retried with backoff. The message quotes the API server.",
        "Read the API server's words in the message: a denial says which rule; a 403 is the reconciler's "
        "RBAC (the chart's and the manifests' ClusterRole grant what it writes).",
    ),
    Reason.ROLLOUT_HALTED: Explanation(
        "A node failed to apply the config it was given (`nvidia.com/mig.config.state=failed`): nothing more "
        "is written to nodes. The message names the node and the agent's (or mig-manager's) reason.",
        "Fix the cause on the node (`kubectl describe node`: `migops.io/mig.config.reason`, the agent's "
        "Events), then push a new commit or resume: `kubectl annotate migsync NAME migops.io/resume=<new value> "
        "--overwrite`.",
    ),
    Reason.PROGRESS_DEADLINE: Explanation(
        "A node has been reconfiguring for longer than `rollout.progressDeadlineSeconds` (default 600): the "
        "MigSync is Stalled and the Node gets a Warning Event.",
        "Check that the node's agent (or mig-manager) runs and what it says (`kubectl logs` of its pod, its "
        "Events); a busy GPU waits for its clients to stop.",
    ),
    Reason.SUCCEEDED: Explanation(
        "The revision is applied: every managed node runs its config. The Event gives the rollout's time.",
        "Nothing.",
    ),
    Reason.PROGRESSING: Explanation(
        "A rollout is under way: nodes are reconfiguring in waves of at most `maxUnavailable`.",
        "Nothing; `migops status --nodes` shows each node's phase.",
    ),
    Reason.RETRYING: Explanation(
        "The last sync failed in a way that may pass (the source unreachable, a write retried): the reconciler "
        "tries again with backoff. Shown on the Stalled condition (False).",
        "Nothing unless it lasts; the Ready condition's reason says what failed.",
    ),
    Reason.CONFIGMAP_APPLIED: Explanation(
        "The MIG ConfigMap's `config.yaml` was written from the revision.", "Nothing."
    ),
    Reason.CONFIGMAP_UNMANAGED: Explanation(
        "The MIG ConfigMap in force is labelled `migops.io/unmanaged=true`: the reconciler never writes it and "
        "leaves it to whoever does (a person, or Flux or Argo CD beside the reconciler). While its `config.yaml` "
        "is the revision's, node labels roll out as usual (a Normal Event says who owns the ConfigMap); while it "
        "differs, no node gets a new label (a label could name a config the ConfigMap lacks or defines "
        "otherwise): Ready is False with this reason and a Warning Event names the revision awaited.",
        "Put the revision's `config.yaml` into the ConfigMap (or let your GitOps tool apply it), or remove the "
        "label to give the ConfigMap back to git (`kubectl label configmap -n NS NAME migops.io/unmanaged-`): "
        "the reconciler then writes the revision's content at its next sync.",
    ),
    Reason.DRIFT_REVERTED: Explanation(
        "Someone changed a managed node's `nvidia.com/mig.config` or the MIG ConfigMap by hand; the reconciler "
        "put back what git says (an Event on the Node or the ConfigMap).",
        "Change the geometry in git, not in the cluster; the admission webhook denies such edits when it runs.",
    ),
    Reason.ASSIGNED: Explanation(
        "A wave of nodes got their new config label (one Event per wave, listing the nodes).", "Nothing."
    ),
    Reason.PRUNED: Explanation(
        "With `prune: true`, the label was removed from nodes that left every assignment (only labels the "
        "reconciler set).",
        "Nothing, if the nodes left on purpose.",
    ),
    Reason.RELEASED: Explanation(
        "Nodes left management (`migops.io/unmanaged=true`, outside every assignment, or their MigSync was "
        "deleted): their `nvidia.com/mig.config` is no longer enforced.",
        "Nothing, if meant; to manage a node again, remove `migops.io/unmanaged` or assign it in nodes.yaml.",
    ),
    Reason.RESUMED: Explanation(
        "A person resumed a halted rollout (`migops.io/resume`); the failures seen so far are acknowledged.",
        "Nothing.",
    ),
    Reason.SUGGESTION_CHANGED: Explanation(
        "With `spec.suggest`, the proposal for the pending MIG pods changed (`status.suggestion`); nothing is applied.",
        "Review it (`migops suggest`, docs/suggest.md) and commit the geometry if you want it.",
    ),
    Reason.ALL_MATCHED: Explanation("Every assignment of nodes.yaml matches at least one node.", "Nothing."),
    Reason.MATCHES_NO_NODE: Explanation(
        "An assignment of nodes.yaml matches no node: its selector matches none, or a node it lists does not "
        "exist (yet). A warning: the rest is applied. One Event says them all (how many, the first five), "
        "again only when they change.",
        "Fix the selector or the name (rules matches-no-node and node-not-found below).",
    ),
    Reason.MOVED_TO_DEFAULT: Explanation(
        "The revision moves nodes to `default` because the assignment that chose their config stopped matching "
        "them (often a typo in a selector). `rollout.maxDefaulted` refuses such a revision when set.",
        "If the move is not meant, fix the selector and push; `migops diff` marks such nodes before you merge.",
    ),
    Reason.REVISION_AVAILABLE: Explanation(
        "The revision in force is in the history of the followed branch.", "Nothing."
    ),
    Reason.REVISION_VANISHED: Explanation(
        "The revision in force is no longer in the branch's history (a force-push rewrote it); it stays "
        "enforced from the cluster's applied record until a new revision can be applied.",
        "Push a commit that holds the geometry you want; nothing is lost meanwhile.",
    ),
    Reason.RECORD_REFUSED: Explanation(
        "The cluster's applied record (the ConfigMap `migops-applied-<migsync>` beside the MigSync) does not verify "
        "against the MigSync's trust settings, or is unreadable: nothing of it is enforced.",
        "A new revision from git replaces it; if nobody changed the record, check `spec.verify` and the keys.",
    ),
}

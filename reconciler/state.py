"""The reconciler's state as values: `SyncState`, what lasts from one sync to the next (restored from
the MigSync's status and the cluster's applied record after a restart), and `Run`, what one sync
computes, filled in step by step and dropped at its end.

A sync never edits a `SyncState`: each step returns a new one (`dataclasses.replace`), and the
controller swaps it in once the summary has written status -- as Flux's controllers keep what lasts in
the object's status and hand each step the object and a result, nothing else.

Node events reach the state only through a sync: the informer's thread records them in a journal, and
the sync, under its lock, folds them in (`SyncState.observed`) and takes one snapshot of the nodes
(`Seen`) that all its steps read. Nothing a sync reads changes under it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from migops.api.migsync import Condition, SyncSpec, TrustPolicy
from migops.api.names import STATE_FAILED, STATE_SUCCESS
from migops.api.objects import MigSettings
from migops.gitops.desired import DesiredState
from migops.gitops.repo import RepoSpec
from migops.gitops.source import Fetched, GitSource
from migops.reconciler.apply import WriteError
from migops.reconciler.changes import Numbered
from migops.reconciler.memo import ResolveMemo
from migops.reconciler.overlay import WriteOverlay
from migops.reconciler.plan import IN_SYNC, Plan
from migops.reconciler.reasons import AnyReason, SyncFailure, SyncNote
from migops.reconciler.record import AppliedRecord


@dataclass(frozen=True)
class RecordState:
    """The cluster's applied record of the revision in force (ConfigMap migops-applied-<migsync>), and what is
    known of it."""

    record: AppliedRecord | None = None
    written: str | None = None  # the revision whose record we wrote or found
    trust: TrustPolicy | None = None  # the policy `record` was verified under (steps.check_record)
    refused: str | None = None  # why the record found at start was refused
    unreadable: str | None = None  # why the ConfigMap found at start holds no record


@dataclass(frozen=True)
class FetchVerdict:
    """The newest fetch's verdict (`latest`, `failure`: they last until the next fetch, a sync without
    one reuses them), and the revisions refused for good."""

    latest: RepoSpec | None = None  # the last fetched revision that parsed and verified
    failure: SyncFailure | None = None  # why it (or the fetch) was refused
    unverified: Mapping[str, SyncFailure] = field(default_factory=dict)  # revision -> why its signature is refused


@dataclass(frozen=True)
class NodeMemory:
    """What the syncs remember of nodes (rebuilt from the cluster after a restart)."""

    reached: Mapping[str, str] = field(default_factory=dict)  # node -> config it was last seen in sync with
    # (node, config) -> why its write was refused (terminal): not tried again until the next fetch
    refused: Mapping[tuple[str, str | None], str] = field(default_factory=dict)
    configmap_text: str | None = None  # what we last wrote or saw in sync: a different text later is drift
    since: Mapping[str, float] = field(default_factory=dict)  # node -> when it began reconfiguring (unix seconds)
    # Nodes run by mig-manager that we relabelled and have not yet seen leave `success`, and failed nodes
    # a resume or a new revision acknowledged; each -> the node journal's count when marked, as only a
    # later event may clear it.
    awaiting: Mapping[str, int] = field(default_factory=dict)
    acknowledged: Mapping[str, int] = field(default_factory=dict)

    def observed(self, changes: Sequence[Numbered]) -> NodeMemory:
        """After these node events: mig-manager picked up a new label (its state left `success`), an
        acknowledged node no longer fails."""
        if not self.awaiting and not self.acknowledged:
            return self
        awaiting, acknowledged = dict(self.awaiting), dict(self.acknowledged)
        for number, c in changes:
            if number > awaiting.get(c.name, number) and c.state is not None and c.state != STATE_SUCCESS:
                del awaiting[c.name]
            if number > acknowledged.get(c.name, number) and c.state != STATE_FAILED:
                del acknowledged[c.name]
        if len(awaiting) == len(self.awaiting) and len(acknowledged) == len(self.acknowledged):
            return self
        return replace(self, awaiting=awaiting, acknowledged=acknowledged)


@dataclass(frozen=True)
class SyncCache:
    """What a sync keeps to follow its own writes and to save work; never restored after a restart."""

    written: WriteOverlay = WriteOverlay()  # our writes the informers do not show yet
    resolved: ResolveMemo = ResolveMemo()  # the answers of resolving, until a node changes what it reads


@dataclass(frozen=True)
class Reported:
    """What the last summary reported: the failure (as said), the plan and the generation it was for,
    which a later flush re-sends; once our MigSync was deleted and its nodes released (the finalizer),
    what every sync reports."""

    failure: SyncFailure | None = None
    plan: Plan | None = None
    released: str = ""
    generation: int | None = None  # the MigSync generation whose spec the last sync read (observedGeneration)


@dataclass(frozen=True)
class SyncState:
    """What lasts between syncs."""

    desired: DesiredState | None = None  # the desired state in force
    moved: tuple[str, ...] = ()  # nodes the revision in force moved to `default`
    last_applied: str | None = None  # the last revision every node reached
    last_attempted: str | None = None  # the last revision fetched
    handled_resume: str | None = None  # the last value of the resume annotation acted on
    fetched: FetchVerdict = FetchVerdict()
    record: RecordState = RecordState()
    revision_condition: Condition | None = None  # AppliedRevisionAvailable
    started_at: Mapping[str, float] = field(default_factory=dict)  # revision -> when adopted (unix seconds)
    nodes: NodeMemory = NodeMemory()
    reported: Reported = Reported()
    cache: SyncCache = SyncCache()

    def observed(self, changes: Sequence[Numbered], ours: str) -> SyncState:
        """The state after these node events (in the order they arrived); `ours`: our managed-by value."""
        if not changes:
            return self
        cache = SyncCache(self.cache.written.observed(changes, ours), self.cache.resolved.observed(changes))
        return replace(self, nodes=self.nodes.observed(changes), cache=cache)


def restore(status: Mapping[str, Any], record: AppliedRecord | None, unreadable: str | None) -> SyncState:
    """The state after a restart: revisions and the configs nodes reached from the MigSync's status, the
    applied record as found (verified by the first sync, `steps.check_record`)."""
    started = {record.revision: record.adopted_at} if record is not None and record.adopted_at else {}
    reached = {  # per-node revisions are on the nodes themselves
        e["name"]: e["config"] for e in status.get("nodes") or () if e.get("phase") == IN_SYNC and e.get("config")
    }
    return SyncState(
        last_applied=status.get("lastAppliedRevision") or None,
        last_attempted=status.get("lastAttemptedRevision") or None,
        handled_resume=status.get("lastHandledResume"),
        record=RecordState(record=record, unreadable=unreadable),
        started_at=started,
        nodes=NodeMemory(reached=reached),
    )


@dataclass
class Got:
    """What this sync read of the repository."""

    fetched: Fetched | None = None  # this sync's fetch, when it fetched and the fetch worked
    seconds: float | None = None  # how long the fetch took
    verified: bool = False
    candidate: RepoSpec | None = None  # the newest revision that verified and parsed
    from_record: bool = False  # the candidate is the cluster's applied record (git no longer has it)


@dataclass
class Wave:
    """What this sync planned and wrote."""

    plan: Plan | None = None
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)  # the nodes planned on (overlay applied)
    configmap_text: str | None = None
    configmap_unmanaged: bool = False  # labelled migops.io/unmanaged=true: never written, labels wait on it
    skip: frozenset[str] = frozenset()  # nodes whose write was refused before (until the next fetch)
    overdue: list[tuple[str, str]] = field(default_factory=list)  # (node, why): past its progress deadline
    writes: int = 0
    errors: list[WriteError] = field(default_factory=list)


@dataclass(frozen=True)
class Seen:
    """The nodes as this sync sees them: one snapshot of the informer (trimmed Nodes by name, shared:
    read only), taken once the node journal's entries up to `count` were folded into the state."""

    nodes: Mapping[str, dict[str, Any]] = field(default_factory=dict)
    count: int = 0


@dataclass
class Run:
    """One sync's working record, filled in step by step (steps add to it; the summary reads it)."""

    fetch: bool  # fetch the remote (else follow the cluster with what was fetched last)
    seen: Seen = Seen()
    spec: SyncSpec | None = None
    path: str = ""
    source: GitSource | None = None
    settings: MigSettings | None = None
    got: Got = field(default_factory=Got)
    wave: Wave = field(default_factory=Wave)
    failure: SyncFailure | None = None  # why the newest revision is not (all) in force; the steps go on
    notes: list[SyncNote] = field(default_factory=list)  # Events, recorded by the summary
    resolved: bool = False  # `resolve` has decided what is in force
    unkept_record: str | None = None  # nothing is in force, and this is why the applied record was refused

    def revision(self, state: SyncState) -> str | None:
        """The revision this sync is about now, which its log lines name: the newest one while it is
        fetched, verified, loaded and resolved; once `resolve` has decided, the one in force."""
        if self.resolved and state.desired is not None:
            return state.desired.revision
        if self.got.fetched is not None:
            return self.got.fetched.revision
        if self.got.candidate is not None:
            return self.got.candidate.revision
        return state.desired.revision if state.desired is not None else None

    def keep(self, failure: SyncFailure) -> None:
        """The first failure is the one status shows."""
        if self.failure is None:
            self.failure = failure

    def note(
        self,
        reason: AnyReason,
        message: str,
        type: str = "Normal",
        key: tuple[Any, ...] | None = None,
        involved: Mapping[str, Any] | None = None,
    ) -> None:
        self.notes.append(SyncNote(reason, message, type, key, involved))

    def note_failure(self, failure: SyncFailure, key: tuple[Any, ...]) -> None:
        """A Warning saying `failure` as status does (what the cluster keeps is added by the summary)."""
        self.notes.append(SyncNote(failure.reason, failure.message, "Warning", key, kept=failure.kept))

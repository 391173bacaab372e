"""One sync as a list of steps, after Flux's source-controller: load spec → check the record → resume →
fetch → verify → load → fall back → resolve → history → record → warn → plan → deadline → apply the ConfigMap → apply
a wave (`SYNC`, at the end).

Every step has one signature, `step(reconciler, run) -> Failure | None`: it reads what earlier steps
left in `run`, adds its own result there, and returns a Failure only when the sync must stop (nothing
to apply). A failure that leaves the last good state in force (an unreachable remote, a refused
commit) is kept in `run.failure` and the steps go on with the last good desired state. Events go to
`run.notes`; only the summary (`summary.finish`) records them and writes status and metrics.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from migops.api.names import CONFIGMAP_KEY, RESUME_ANNOTATION
from migops.api.objects import is_unmanaged as unmanaged
from migops.gitops.desired import DesiredState
from migops.gitops.desired import resolve as resolve_desired
from migops.gitops.reasons import UNREADABLE, SourceReason
from migops.gitops.repo import RepoError, RepoSpec
from migops.gitops.source import Fetched, GitSource, SourceError, normalise_path
from migops.gitops.verify import CommitProof, VerificationError
from migops.kube.clusterpolicy import MigSettings
from migops.mig.text import listed
from migops.reconciler import matching
from migops.reconciler import record as applied_record
from migops.reconciler import status as st
from migops.reconciler.apply import WriteError
from migops.reconciler.plan import DRIFTED, IN_SYNC, PROGRESSING, Plan, config_state, label_written_at
from migops.reconciler.plan import plan as plan_wave
from migops.reconciler.reasons import Failure, Note, Outcome, Reason
from migops.reconciler.record import record_name

if TYPE_CHECKING:
    from migops.reconciler.controller import Reconciler

log = logging.getLogger(__name__)
NOTHING_KEPT = "nothing has been applied"


@dataclass
class Run:
    """One sync's working state, filled in step by step."""

    fetch: bool  # fetch the remote (else follow the cluster with what was fetched last)
    spec: st.SyncSpec | None = None
    path: str = ""
    source: GitSource | None = None
    settings: MigSettings | None = None
    fetched: Fetched | None = None  # this sync's fetch, when it fetched and the fetch worked
    fetch_seconds: float | None = None
    verified: bool = False
    candidate: RepoSpec | None = None  # the newest revision that verified and parsed
    failure: Failure | None = None  # why the newest revision is not (all) in force; the steps go on
    from_record: bool = False  # the candidate is the cluster's applied record (git no longer has it)
    overdue: list[tuple[str, str]] = field(default_factory=list)  # (node, why): past its progress deadline
    plan: Plan | None = None
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)  # the nodes planned on (overlay applied)
    configmap_text: str | None = None
    skip: frozenset[str] = frozenset()
    writes: int = 0
    errors: list[WriteError] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)
    resolved: bool = False  # `resolve` has decided what is in force

    def revision(self, r: Reconciler) -> str | None:
        """The revision this sync is about now, which its log lines name: the newest one while it is
        fetched, verified, loaded and resolved; once `resolve` has decided, the one in force."""
        if self.resolved and r.desired is not None:
            return r.desired.revision
        if self.fetched is not None:
            return self.fetched.revision
        if self.candidate is not None:
            return self.candidate.revision
        return r.desired.revision if r.desired is not None else None

    def keep(self, failure: Failure) -> None:
        """The first failure is the one status shows."""
        if self.failure is None:
            self.failure = failure

    def note(
        self, reason: Any, message: str, type: str = "Normal", key: tuple[Any, ...] | None = None, involved: Any = None
    ) -> None:
        self.notes.append(Note(reason, message, type, key, involved))


Step = Callable[["Reconciler", Run], Failure | None]


def load_spec(r: Reconciler, run: Run) -> Failure | None:
    try:
        spec = r.current_spec()
        run.path = normalise_path(spec.path)
    except ValueError as exc:
        return Failure(Reason.INVALID_SPEC, str(exc), True, Outcome.INVALID)
    if spec.suspend:
        return Failure(
            Reason.SUSPENDED, "spec.suspend is true: nothing is fetched or written", False, Outcome.SUSPENDED
        )
    run.spec = spec
    run.source = r.revisions.source(spec.url, spec.ref)
    run.settings = r.settings()
    return None


def check_record(r: Reconciler, run: Run) -> Failure | None:
    """The cluster's applied record counts only if it verifies under the trust policy in force (checked
    once per record and policy, so at start): with signatures required, a record whose commit is not
    signed by a trusted key, or whose files are not that commit's, is refused -- the condition
    AppliedRevisionAvailable and an Event say why -- and nothing of it is enforced or compared with.
    So is a ConfigMap of that name that holds no record at all (whatever the policy)."""
    kept = r.record
    if kept is None and r.record_unreadable is not None:
        _refuse_record(r, run, "", r.record_unreadable)
        r.record_unreadable = None
    if kept is None or run.spec is None or r.record_trust == run.spec.trust:
        return None
    try:
        applied_record.verify(kept, run.spec.trust)
    except VerificationError as exc:
        _refuse_record(r, run, kept.revision, str(exc))
        return None
    r.record_trust = run.spec.trust
    return None


def _refuse_record(r: Reconciler, run: Run, revision: str, why: str) -> None:
    of = f" of revision {revision[:12]}" if revision else ""
    message = (
        f"the cluster's applied record (ConfigMap {r.namespace}/{record_name(r.name)}){of} is refused: {why}; "
        "nothing of it is applied"
    )
    log.warning("%s", message, extra={"revision": revision} if revision else {})
    r.record, r.recorded, r.record_refused = None, None, message
    r.revision_condition = ("False", Reason.RECORD_REFUSED, message)
    run.note(Reason.RECORD_REFUSED, message, "Warning", key=("record-refused", revision, why))


def resume(r: Reconciler, run: Run) -> Failure | None:
    """A new value of the resume annotation acknowledges the failures seen so far."""
    obj = r.migsync_object()
    token = ((obj or {}).get("metadata") or {}).get("annotations", {}).get(RESUME_ANNOTATION)
    if token and token != r.handled_resume:
        r.acknowledge(f"resume {token!r}")
        r.handled_resume = token
        run.note(Reason.RESUMED, f"resumed ({RESUME_ANNOTATION}={token})", key=("resume", token))
    return None


def fetch(r: Reconciler, run: Run) -> Failure | None:
    if not run.fetch and r.desired is not None:
        # Following the cluster: the last fetch's verdicts stand (a refused newest revision stays
        # refused) and the newest good revision is tried again (a node that did not fit may have gone).
        if r.fetch_failure is not None:
            run.keep(r.fetch_failure)
        run.candidate = r.latest or r.desired.spec
        return None
    assert run.source is not None
    r.memory.refused.clear()  # a refused write is tried again once per fetch, never in a hot loop
    began = time.monotonic()
    try:
        run.fetched = run.source.fetch()
    except SourceError as exc:
        run.keep(Failure(exc.reason, f"{exc}; {r.kept()}", False, Outcome.UNREACHABLE))
        r.fetch_failure, r.latest = run.failure, None
        return None
    run.fetch_seconds = time.monotonic() - began
    r.last_attempted = run.fetched.revision
    return None


def _source_failure(r: Reconciler, run: Run, exc: SourceError) -> None:
    assert run.fetched is not None
    run.keep(Failure(exc.reason, f"{exc}; {r.kept()}", False, Outcome.UNREACHABLE, run.fetched.revision))


def verify(r: Reconciler, run: Run) -> Failure | None:
    if run.fetched is None or run.spec is None or run.source is None:
        return None
    revision = run.fetched.revision
    known = r.revisions.refused.get(revision)
    if known is not None and known.reason == SourceReason.VERIFICATION_FAILED:
        run.keep(known)
        return None
    try:
        r.revisions.verify(run.source, revision, run.path, run.spec.trust)
    except VerificationError as exc:
        bad = Failure(exc.reason, f"{exc}; {r.kept()}", True, Outcome.UNVERIFIED, revision)
        r.revisions.refused[revision] = bad
        run.keep(bad)
        run.note(exc.reason, bad.message, "Warning", key=("unverified", revision))
    except SourceError as exc:
        _source_failure(r, run, exc)
    else:
        run.verified = True
    return None


def load(r: Reconciler, run: Run) -> Failure | None:
    if run.fetched is None or run.source is None:
        return None
    if run.verified:
        try:
            run.candidate = r.revisions.load(run.source, run.fetched.revision, run.path)
        except RepoError as exc:
            bad = Failure(
                exc.reason,
                f"revision {run.fetched.short} is invalid: {exc}; {r.kept()}",
                True,
                Outcome.INVALID,
                run.fetched.revision,
                tuple(str(p) for p in exc.problems),
            )
            r.revisions.refused[run.fetched.revision] = bad
            run.keep(bad)
            run.note(exc.reason, bad.message, "Warning", key=("invalid", run.fetched.revision))
        except SourceError as exc:
            _source_failure(r, run, exc)
    # Both last until the next fetch (see `fetch`).
    r.fetch_failure, r.latest = run.failure, run.candidate
    return None


def fall_back(r: Reconciler, run: Run) -> Failure | None:
    """Restarted on a bad or unreachable HEAD: keep enforcing what was in force before, from git if
    the mirror still has it, else from the cluster's applied record (a fresh cache, a rewritten branch)."""
    if r.desired is not None or run.candidate is not None or not r.enforce_last_good:
        return None
    _fall_back(r, run)
    if run.candidate is None and r.record_refused and run.failure is not None:
        # Nothing kept: say that the record was there, and why it was not enforced.
        run.failure = replace(run.failure, message=f"{run.failure.message} ({r.record_refused})")
    return None


def _fall_back(r: Reconciler, run: Run) -> None:
    assert run.source is not None and run.spec is not None
    record = r.record if r.record is not None and r.record.path == run.path else None
    revision = record.revision if record is not None else r.last_applied
    if revision is None:
        return
    try:
        run.candidate = r.revisions.verified_load(run.source, revision, run.path, run.spec.trust)
        return
    except (SourceError, VerificationError, RepoError) as exc:
        log.warning("cannot reload revision %s from git: %s", revision, exc, extra={"revision": revision})
    if record is not None:
        try:
            run.candidate = record.spec()
            run.from_record = True
            log.warning(
                "enforcing revision %s from the cluster's applied record",
                record.revision,
                extra={"revision": record.revision},
            )
        except RepoError as exc:
            log.warning(
                "the applied record of %s does not parse: %s", record.revision, exc, extra={"revision": record.revision}
            )


def managed_nodes(nodes: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Nodes without migops.io/unmanaged=true: the only ones assignments can give a config."""
    return {name: obj for name, obj in nodes.items() if not unmanaged(obj)}


def resolve(r: Reconciler, run: Run) -> Failure | None:
    """The candidate on today's nodes; if it cannot be applied, the desired state in force stays."""
    assert run.settings is not None
    tries = [c for c in (run.candidate, r.desired.spec if r.desired else None) if c is not None]
    for i, attempt in enumerate(tries):
        if i and attempt.revision == tries[0].revision:
            break
        found = _resolved(r, run, attempt)
        if isinstance(found, Failure):
            r.revisions.refused[attempt.revision] = found
            run.keep(found)
            run.note(found.reason, found.message, "Warning", key=("invalid", attempt.revision, found.message))
        else:
            r.adopt(found, run)
            if run.failure is not None and run.failure.message.endswith(NOTHING_KEPT):
                # Said before the fallback found what to keep: say what is kept.
                run.failure = replace(run.failure, message=run.failure.message[: -len(NOTHING_KEPT)] + r.kept())
            break
    run.resolved = True
    if run.failure is not None and run.failure.reason in UNREADABLE:
        run.note(run.failure.reason, run.failure.message, "Warning", key=("unreachable", run.failure.message))
    if r.desired is None:
        return run.failure or Failure(SourceReason.VALIDATION_FAILED, "nothing to apply", True, Outcome.INVALID)
    if run.failure is not None and not r.enforce_last_good:
        return run.failure  # --once: a refused commit means no writes at all
    return None


def _resolved(r: Reconciler, run: Run, attempt: RepoSpec) -> DesiredState | Failure:
    """`attempt` on today's nodes (or why not), remembered until a node changes in a way resolving
    reads (labels other than the config and state, GPUs, a node added or gone) or the settings do:
    a watch event of a node's state costs no resolve of every node."""
    assert run.settings is not None
    key = r.resolve_memo.key(attempt.revision, attempt.path, run.settings)
    known = r.resolve_memo.get(key)
    if known is not None:
        return known
    found: DesiredState | Failure
    try:
        desired = resolve_desired(attempt, managed_nodes(r.nodes.items()), run.settings, r.fit_cache)
    except RepoError as exc:
        found = Failure(
            exc.reason,
            f"revision {attempt.revision[:12]} cannot be applied: {exc}; {r.kept()}",
            True,
            Outcome.INVALID,
            attempt.revision,
            tuple(str(p) for p in exc.problems),
        )
    else:
        found = _guard_defaulted(r, desired) or desired
    r.resolve_memo.put(key, found)
    return found


def _guard_defaulted(r: Reconciler, desired: DesiredState) -> Failure | None:
    """rollout.maxDefaulted: refuse a new revision moving more nodes than that to `default` because
    their assignment stopped matching (a typo in a selector must not turn MIG off on a pool)."""
    if r.desired is not None and r.desired.revision == desired.revision:
        return None
    moved = r.moved_to_default(desired)
    limit = desired.spec.nodes.max_defaulted
    if limit is None or len(moved) <= limit:
        return None
    return Failure(
        SourceReason.TOO_MANY_DEFAULTED,
        f"revision {desired.revision[:12]} would move {len(moved)} node(s) to default "
        f"{desired.spec.nodes.default!r} because no assignment matches them any more "
        f"{listed(moved, 5)}); rollout.maxDefaulted is {limit}: fix the selectors, list the nodes, or "
        f"raise the limit; {r.kept()}",
        True,
        Outcome.INVALID,
        desired.revision,
    )


def history(r: Reconciler, run: Run) -> Failure | None:
    """Is the revision in force still in the followed branch's history? (A force-push can take it
    out; it is enforced from the cluster's record then, and the condition says so.)"""
    desired = r.desired
    assert desired is not None and run.spec is not None
    where = f"{run.spec.url} {run.spec.ref or 'HEAD'}"
    record = f"ConfigMap {r.namespace}/{record_name(r.name)}"
    if run.fetched is not None and run.source is not None:
        if run.source.contains(run.fetched.revision, desired.revision):
            r.revision_condition = (
                "True",
                Reason.REVISION_AVAILABLE,
                f"revision {desired.revision[:12]} is in the history of {where}",
            )
        else:
            r.revision_condition = (
                "False",
                Reason.REVISION_VANISHED,
                f"revision {desired.revision[:12]}, in force, is "
                f"no longer in the history of {where} (rewritten: a force-push?); it is enforced "
                f"from the cluster's record ({record}) until a new revision can be applied",
            )
            run.note(
                Reason.REVISION_VANISHED,
                r.revision_condition[2],
                "Warning",
                key=("vanished", desired.revision, run.fetched.revision),
            )
    elif run.from_record and run.failure is not None:
        r.revision_condition = (
            "Unknown",
            run.failure.reason,
            f"revision {desired.revision[:12]} is enforced from the "
            f"cluster's record ({record}): the remote cannot be read",
        )
    return None


def record(r: Reconciler, run: Run) -> Failure | None:
    """Keep the revision in force in the cluster, before any write of it."""
    desired = r.desired
    assert desired is not None
    if r.dry_run or r.recorded == desired.revision:
        return None
    proof = None if run.from_record else _proof(run, desired)
    kept = r.record
    if kept is not None and _same(kept, desired) and (kept.proof is not None or proof is None):
        r.recorded = desired.revision  # (a record without its proof gets one once git has the commit)
        return None
    uid = ((r.migsync_object() or {}).get("metadata") or {}).get("uid")
    new = applied_record.of(desired, r.started_revision_at.get(desired.revision) or time.time(), proof)
    try:
        r.writer.record(applied_record.to_configmap(new, r.namespace, r.name, uid))
    except WriteError as err:
        log.warning("the applied record was not written (tried again at the next sync): %s", err)
        return None
    r.record, r.recorded, r.record_refused = new, desired.revision, None
    r.record_trust = run.spec.trust if run.spec is not None else None
    return None


def _same(kept: applied_record.AppliedRecord, desired: DesiredState) -> bool:
    spec = desired.spec
    return (kept.revision, kept.path, kept.config_text, kept.nodes_text) == (
        desired.revision,
        spec.path,
        spec.config_text,
        spec.nodes_text,
    )


def _proof(run: Run, desired: DesiredState) -> CommitProof | None:
    """The commit object and trees that make the record re-verifiable; None when git lacks them."""
    if run.source is None:
        return None
    try:
        revision, path = desired.revision, desired.spec.path
        return CommitProof(run.source.commit_object(revision), run.source.path_trees(revision, path))
    except SourceError as exc:
        log.warning("the applied record keeps no commit object: %s", exc, extra={"revision": desired.revision})
        return None


def warn(r: Reconciler, run: Run) -> Failure | None:
    """Assignments that match no node: an Event each (the summary shows them as a condition too)."""
    desired = r.desired
    assert desired is not None
    for text in matching.warnings(desired, ()):  # (the move to default has its own Event, at adoption)
        run.note(Reason.MATCHES_NO_NODE, text, "Warning", key=("unmatched", desired.revision, text))
    return None


def plan(r: Reconciler, run: Run) -> Failure | None:
    desired = r.desired
    assert desired is not None
    run.nodes = r.overlay.nodes(r.nodes.items())
    run.configmap_text = r.overlay.configmap_text(r.configmap_seen(desired.namespace, desired.configmap))
    mem = r.memory
    run.skip = frozenset(n for (n, c) in mem.refused if desired.targets.get(n) and desired.targets[n].config == c)
    run.plan = plan_wave(
        desired,
        run.nodes,
        run.configmap_text,
        acknowledged=frozenset(mem.acknowledged),
        awaiting=frozenset(mem.awaiting),
        reached=mem.reached,
        skip=run.skip,
        owner=r.owner,
    )
    return None


def deadline(r: Reconciler, run: Run) -> Failure | None:
    """rollout.progressDeadlineSeconds per node: a node reconfiguring longer than that is overdue (a dead
    agent leaves it pending forever). Its start is when we wrote its label (our managedFields time: the
    cluster's, so a restart does not reset it), else when we first saw it reconfiguring."""
    p, desired = run.plan, r.desired
    assert p is not None and desired is not None
    limit, now = desired.spec.nodes.progress_deadline, time.time()
    since, seen, shown = r.memory.since, set(), []
    for s in p.nodes:
        if s.phase not in (PROGRESSING, DRIFTED):
            shown.append(s)
            continue
        seen.add(s.name)
        began = since.setdefault(s.name, label_written_at(run.nodes.get(s.name) or {}) or now)
        if now - began <= limit:
            shown.append(s)
            continue
        why = f"no progress for {now - began:.0f}s (progressDeadlineSeconds {limit:g}): {s.message or s.state}"
        run.overdue.append((s.name, why))
        shown.append(replace(s, message=why))
        run.note(
            Reason.PROGRESS_DEADLINE,
            f"node {s.name}: {why}",
            "Warning",
            key=("deadline", s.name, began),
            involved={"apiVersion": "v1", "kind": "Node", "metadata": {"name": s.name}},
        )
    for name in [n for n in since if n not in seen]:
        del since[name]
    if run.overdue:
        run.plan = replace(p, nodes=tuple(shown))
    return None


def apply_configmap(r: Reconciler, run: Run) -> Failure | None:
    """The MIG ConfigMap first: a label must never name a config the ConfigMap lacks."""
    desired, p, seen = r.desired, run.plan, run.configmap_text
    assert desired is not None and p is not None
    if not p.configmap_changed:
        if seen is not None:
            r.memory.applied_cm_text = seen
        return None
    text = desired.spec.config_text
    try:
        r.writer.configmap(desired.namespace, desired.configmap, text)
    except WriteError as err:
        run.errors.append(err)
        return None
    run.writes += 1
    if not r.dry_run:
        r.overlay.wrote_configmap(text)
    where = f"ConfigMap {desired.namespace}/{desired.configmap}"
    if seen is not None and r.memory.applied_cm_text == text:
        run.note(
            Reason.DRIFT_REVERTED,
            f"data.{CONFIGMAP_KEY} of {where} was changed by hand; put back to revision {desired.revision[:12]}",
            "Warning",
            involved={
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": desired.configmap, "namespace": desired.namespace},
            },
        )
    else:
        run.note(
            Reason.CONFIGMAP_APPLIED, f"{where} data.{CONFIGMAP_KEY} applied from revision {desired.revision[:12]}"
        )
    r.memory.applied_cm_text = text
    return None


def apply_wave(r: Reconciler, run: Run) -> Failure | None:
    """This wave's labels (and prunes), in parallel; nothing while an earlier write failed."""
    p, desired, mem = run.plan, r.desired, r.memory
    assert p is not None and desired is not None
    if not run.errors:
        items: list[tuple[str, str | None]] = [*p.writes, *((n, None) for n in p.prunes)]
        # Marked before the write: mig-manager may answer (pending) before the write call returns.
        fresh = {
            n
            for n, c in items
            if c is not None and not r.dry_run and not config_state(run.nodes[n]).agent and n not in mem.awaiting
        }
        mem.awaiting |= fresh
        done, errors = r.writer.labels([*items, *p.annotate], desired.revision)
        mem.awaiting -= fresh - set(done)
        released, release_errors = r.writer.releases(n for n in p.releases if (n, None) not in mem.refused)
        errors += release_errors
        run.errors += errors
        run.writes += len(done) + len(released)
        wrote = dict([*p.annotate, *items])
        for name in done if not r.dry_run else ():
            r.overlay.wrote_label(name, wrote[name], desired.revision)
        for name in released if not r.dry_run else ():
            r.overlay.released(name)
        if released:
            run.note(
                Reason.RELEASED,
                f"{len(released)} node(s) left management (migops.io/unmanaged=true, or outside "
                f"every assignment): {listed(released, 10)}; their nvidia.com/mig.config is no longer enforced",
            )
        for err in errors:
            node = err.target.split("/", 1)[1]
            if err.kind == "terminal":
                mem.refused[(node, wrote.get(node))] = str(err)
        annotated = {n for n, _ in p.annotate}
        _notes_for_writes(run, p, [n for n in done if n not in annotated], wrote, desired.revision)
    for s in p.nodes:
        if s.phase == IN_SYNC:
            mem.reached[s.name] = s.config
    return None


def _notes_for_writes(run: Run, p: Plan, done: list[str], wrote: dict[str, str | None], revision: str) -> None:
    for name in (n for n in done if n in p.drift):
        run.note(
            Reason.DRIFT_REVERTED,
            f"nvidia.com/mig.config was changed by hand; put back to {wrote[name]!r} (revision {revision[:12]})",
            "Warning",
            involved={"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}},
        )
    assigned = [n for n in done if wrote[n] is not None and n not in p.drift]
    pruned = [n for n in done if wrote[n] is None]
    if assigned:
        shown = listed((f"{n}={wrote[n]}" for n in assigned), 10)
        run.note(
            Reason.ASSIGNED,
            f"revision {revision[:12]}: new config for {len(assigned)} "
            f"node{'s' if len(assigned) > 1 else ''} ({shown}); maxUnavailable {p.max_unavailable}",
        )
    if pruned:
        run.note(
            Reason.PRUNED,
            f"removed nvidia.com/mig.config from {len(pruned)} node(s) that "
            f"left every assignment: {listed(pruned, 10)}",
        )


SYNC: tuple[Step, ...] = (
    load_spec,
    check_record,
    resume,
    fetch,
    verify,
    load,
    fall_back,
    resolve,
    history,
    record,
    warn,
    plan,
    deadline,
    apply_configmap,
    apply_wave,
)

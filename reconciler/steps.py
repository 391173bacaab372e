"""One sync as a list of steps, after Flux's source-controller: load spec → check the record → resume →
fetch → verify → load → fall back → resolve the candidate → history → write the record → warn → plan the
wave → deadline → apply the ConfigMap → apply the wave (`SYNC`, at the end).

Every step has one signature, `step(state, run, ports) -> (state, SyncFailure | None)`: it reads the state
in force (`state.SyncState`, a value) and what earlier steps left in `run`, adds its own result to
`run`, reads and writes the cluster through `ports` only, and returns the state it leaves (a new value
when it changes one) and a SyncFailure only when the sync must stop (nothing to apply). A failure that
leaves the last good state in force (an unreachable remote, a refused commit) is kept in
`run.failure` and the steps go on with the last good desired state. Events go to `run.notes`; only
the summary (`summary.finish`) records them, says the messages in full and writes status and metrics.
`migops diff` runs the same list with a writer that writes nothing (`diff.preview`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from migops import logs
from migops.api import objects
from migops.api.migsync import Condition, ConditionStatus, record_name
from migops.api.names import (
    CONFIGMAP_KEY,
    MIG_CONFIG_STATE_LABEL,
    RESUME_ANNOTATION,
    STATE_FAILED,
    UNMANAGED_LABEL,
)
from migops.api.objects import is_unmanaged
from migops.gitops.desired import DesiredState, resolve
from migops.gitops.reasons import UNREADABLE, SourceReason
from migops.gitops.repo import RepoError, RepoSpec
from migops.gitops.source import SourceError, normalise_path
from migops.gitops.verify import CommitProof, VerificationError
from migops.mig.text import listed
from migops.reconciler import matching
from migops.reconciler.apply import WriteError
from migops.reconciler.plan import DRIFTED, IN_SYNC, PROGRESSING, Plan, config_state, label_written_at, plan
from migops.reconciler.ports import Ports
from migops.reconciler.reasons import AnyReason, Reason, SyncFailure, SyncOutcome
from migops.reconciler.record import AppliedRecord, record_of, to_configmap, verify_record
from migops.reconciler.state import RecordState, Run, SyncState

log = logging.getLogger(__name__)

Done = tuple[SyncState, SyncFailure | None]
Step = Callable[[SyncState, Run, Ports], Done]
REVISION_CONDITION = "AppliedRevisionAvailable"


def run_steps(state: SyncState, run: Run, ports: Ports, steps: tuple[Step, ...]) -> Done:
    """`steps` in order, each on the state the one before left; stops at the first SyncFailure returned."""
    for step in steps:
        with logs.bound(**about(run, state)):
            state, stopped = step(state, run, ports)
        if stopped is not None:
            return state, stopped
    return state, None


def about(run: Run, state: SyncState) -> dict[str, str]:
    """What a log line of this sync names: the revision it is about now."""
    revision = run.revision(state)
    return {"revision": revision} if revision else {}


def acknowledge(state: SyncState, run: Run, why: str) -> SyncState:
    """The nodes failed now are acknowledged: a rollout halted on them goes on (until a node event
    after this sync's snapshot shows one no longer failed)."""
    failed = {n for n, obj in run.seen.nodes.items() if objects.labels(obj).get(MIG_CONFIG_STATE_LABEL) == STATE_FAILED}
    if not failed:
        return state
    log.info("%s acknowledges the failure of %s", why, ", ".join(sorted(failed)))
    acknowledged = {**state.nodes.acknowledged, **dict.fromkeys(failed, run.seen.count)}
    return replace(state, nodes=replace(state.nodes, acknowledged=acknowledged))


def load_spec(state: SyncState, run: Run, ports: Ports) -> Done:
    # One read: the status says which generation this sync acted on (Argo CD and Flux judge health by
    # it), never that of a spec written while the sync ran.
    obj = ports.cluster.migsync_object()
    generation = objects.meta(obj).get("generation") if obj is not None else None
    state = replace(state, reported=replace(state.reported, generation=generation))
    try:
        spec = ports.cluster.spec_of(obj)
        run.path = normalise_path(spec.path)
    except ValueError as exc:
        return state, SyncFailure(Reason.INVALID_SPEC, str(exc), True, SyncOutcome.INVALID)
    if spec.suspend:
        return state, SyncFailure(
            Reason.SUSPENDED, "spec.suspend is true: nothing is fetched or written", False, SyncOutcome.SUSPENDED
        )
    run.spec = spec
    run.source = ports.revisions.source(spec.url, spec.ref)
    run.settings = ports.cluster.settings()
    return state, None


def check_record(state: SyncState, run: Run, ports: Ports) -> Done:
    """The cluster's applied record counts only if it verifies under the trust policy in force (checked
    once per record and policy, so at start): with signatures required, a record whose commit is not
    signed by a trusted key, or whose files are not that commit's, is refused -- the condition
    AppliedRevisionAvailable and an Event say why -- and nothing of it is enforced or compared with.
    So is a ConfigMap of that name that holds no record at all (whatever the policy)."""
    kept, unreadable = state.record.record, state.record.unreadable
    if kept is None and unreadable is not None:
        state = _refuse_record(state, run, ports, "", unreadable)
    if kept is None or run.spec is None or state.record.trust == run.spec.trust:
        return state, None
    try:
        verify_record(kept, run.spec.trust)
    except VerificationError as exc:
        return _refuse_record(state, run, ports, kept.revision, str(exc)), None
    return replace(state, record=replace(state.record, trust=run.spec.trust)), None


def _refuse_record(state: SyncState, run: Run, ports: Ports, revision: str, why: str) -> SyncState:
    of = f" of revision {revision[:12]}" if revision else ""
    where = f"ConfigMap {ports.options.namespace}/{record_name(ports.options.name)}"
    message = f"the cluster's applied record ({where}){of} is refused: {why}; nothing of it is applied"
    log.warning("%s", message, extra={"revision": revision} if revision else {})
    run.note(Reason.RECORD_REFUSED, message, "Warning", key=("record-refused", revision, why))
    return replace(
        state,
        record=replace(state.record, record=None, written=None, refused=message, unreadable=None),
        revision_condition=Condition(REVISION_CONDITION, ConditionStatus.FALSE, Reason.RECORD_REFUSED, message),
    )


def resume(state: SyncState, run: Run, ports: Ports) -> Done:
    """A new value of the resume annotation acknowledges the failures seen so far."""
    obj = ports.cluster.migsync_object()
    token = objects.annotations_of(obj).get(RESUME_ANNOTATION)
    if not token or token == state.handled_resume:
        return state, None
    state = acknowledge(state, run, f"resume {token!r}")
    run.note(Reason.RESUMED, f"resumed ({RESUME_ANNOTATION}={token})", key=("resume", token))
    return replace(state, handled_resume=token), None


def fetch(state: SyncState, run: Run, ports: Ports) -> Done:
    if not run.fetch and state.desired is not None:
        # Following the cluster: the last fetch's verdicts stand (a refused newest revision stays
        # refused) and the newest good revision is tried again (a node that did not fit may have gone).
        if state.fetched.failure is not None:
            run.keep(state.fetched.failure)
        run.got.candidate = state.fetched.latest or state.desired.spec
        return state, None
    assert run.source is not None
    # A refused write is tried again once per fetch, never in a hot loop.
    state = replace(state, nodes=replace(state.nodes, refused={}))
    began = time.monotonic()
    try:
        fetched = run.got.fetched = run.source.fetch()
    except SourceError as exc:
        run.keep(SyncFailure(exc.reason, str(exc), False, SyncOutcome.UNREACHABLE, kept=True))
        return replace(state, fetched=replace(state.fetched, latest=None, failure=run.failure)), None
    run.got.seconds = time.monotonic() - began
    return replace(state, last_attempted=fetched.revision), None


def _source_failure(run: Run, exc: SourceError) -> None:
    assert run.got.fetched is not None
    run.keep(SyncFailure(exc.reason, str(exc), False, SyncOutcome.UNREACHABLE, run.got.fetched.revision, kept=True))


def verify(state: SyncState, run: Run, ports: Ports) -> Done:
    if run.got.fetched is None or run.spec is None or run.source is None:
        return state, None
    revision = run.got.fetched.revision
    known = state.fetched.unverified.get(revision)
    if known is not None:  # a commit's signature does not change: not verified again
        run.keep(known)
        return state, None
    try:
        ports.revisions.verify(run.source, revision, run.path, run.spec.trust)
    except VerificationError as exc:
        bad = SyncFailure(exc.reason, str(exc), True, SyncOutcome.UNVERIFIED, revision, kept=True)
        run.keep(bad)
        run.note_failure(bad, key=("unverified", revision))
        unverified = {**state.fetched.unverified, revision: bad}
        return replace(state, fetched=replace(state.fetched, unverified=unverified)), None
    except SourceError as exc:
        _source_failure(run, exc)
    else:
        run.got.verified = True
    return state, None


def load(state: SyncState, run: Run, ports: Ports) -> Done:
    fetched = run.got.fetched
    if fetched is None or run.source is None:
        return state, None
    if run.got.verified:
        try:
            run.got.candidate = ports.revisions.load(run.source, fetched.revision, run.path)
        except RepoError as exc:
            bad = SyncFailure(
                exc.reason,
                f"revision {fetched.short} is invalid: {exc}",
                True,
                SyncOutcome.INVALID,
                fetched.revision,
                tuple(str(p) for p in exc.problems),
                kept=True,
            )
            run.keep(bad)
            run.note_failure(bad, key=("invalid", fetched.revision))
        except SourceError as exc:
            _source_failure(run, exc)
    # Both last until the next fetch (see `fetch`).
    return replace(state, fetched=replace(state.fetched, latest=run.got.candidate, failure=run.failure)), None


def fall_back(state: SyncState, run: Run, ports: Ports) -> Done:
    """Restarted on a bad or unreachable HEAD: keep enforcing what was in force before, from git if
    the mirror still has it, else from the cluster's applied record (a fresh cache, a rewritten branch)."""
    if state.desired is not None or run.got.candidate is not None or not ports.options.enforce_last_good:
        return state, None
    _fall_back(state, run, ports)
    if run.got.candidate is None and state.record.refused and run.failure is not None:
        run.unkept_record = state.record.refused  # nothing kept: the summary says the record was there, and why not
    return state, None


def _fall_back(state: SyncState, run: Run, ports: Ports) -> None:
    assert run.source is not None and run.spec is not None
    kept = state.record.record
    record = kept if kept is not None and kept.path == run.path else None
    revision = record.revision if record is not None else state.last_applied
    if revision is None:
        return
    try:
        run.got.candidate = ports.revisions.verified_load(run.source, revision, run.path, run.spec.trust)
        return
    except (SourceError, VerificationError, RepoError) as exc:
        log.warning("cannot reload revision %s from git: %s", revision, exc, extra={"revision": revision})
    if record is not None:
        extra = {"revision": record.revision}
        try:
            run.got.candidate = record.spec()
            run.got.from_record = True
            log.warning("enforcing revision %s from the cluster's applied record", record.revision, extra=extra)
        except RepoError as exc:
            log.warning("the applied record of %s does not parse: %s", record.revision, exc, extra=extra)


def managed_nodes(nodes: Mapping[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Nodes without migops.io/unmanaged=true: the only ones assignments can give a config."""
    return {name: obj for name, obj in nodes.items() if not is_unmanaged(obj)}


def resolve_candidate(state: SyncState, run: Run, ports: Ports) -> Done:
    """The candidate on today's nodes; if it cannot be applied, the desired state in force stays."""
    assert run.settings is not None
    tries = [c for c in (run.got.candidate, state.desired.spec if state.desired else None) if c is not None]
    for i, attempt in enumerate(tries):
        if i and attempt.revision == tries[0].revision:
            break
        found, state = _resolved(state, run, ports, attempt)
        if isinstance(found, SyncFailure):
            run.keep(found)
            run.note_failure(found, key=("invalid", attempt.revision, found.message))
        else:
            state = adopt(state, found, run, ports)
            break
    run.resolved = True
    if run.failure is not None and run.failure.reason in UNREADABLE:
        in_force = state.desired.revision if state.desired else None
        run.note_failure(run.failure, key=("unreachable", run.failure.message, in_force))
    if state.desired is None:
        return state, run.failure or SyncFailure(
            SourceReason.VALIDATION_FAILED, "nothing to apply", True, SyncOutcome.INVALID
        )
    if run.failure is not None and not ports.options.enforce_last_good:
        return state, run.failure  # --once: a refused commit means no writes at all
    return state, None


def adopt(state: SyncState, desired: DesiredState, run: Run, ports: Ports) -> SyncState:
    """`desired` in force; a new revision says which nodes it moves to default, and acknowledges failures."""
    if state.desired is not None and desired.revision == state.desired.revision:
        return replace(state, desired=desired)
    moved = matching.moved_to_default(desired, state.desired, state.record.record)
    if moved:
        text = matching.moved_text(desired, moved)
        run.note(Reason.MOVED_TO_DEFAULT, text, "Warning", key=("defaulted", desired.revision))
    if state.desired is not None:
        state = acknowledge(state, run, "a new revision")
    started = dict(state.started_at)
    started.setdefault(desired.revision, time.time())
    return replace(state, desired=desired, moved=moved, started_at=started)


def _resolved(
    state: SyncState, run: Run, ports: Ports, attempt: RepoSpec
) -> tuple[DesiredState | SyncFailure, SyncState]:
    """`attempt` on today's nodes (or why not), remembered until a node changes in a way resolving
    reads (labels other than the config and state, GPUs, a node added or gone) or the settings do:
    a watch event of a node's state costs no resolve of every node."""
    assert run.settings is not None
    memo = state.cache.resolved
    key = memo.key(attempt.revision, attempt.path, run.settings)
    known = memo.get(key)
    if known is not None:
        return known, state
    found: DesiredState | SyncFailure
    try:
        desired = resolve(attempt, managed_nodes(run.seen.nodes), run.settings, ports.fit_cache)
    except RepoError as exc:
        found = SyncFailure(
            exc.reason,
            f"revision {attempt.revision[:12]} cannot be applied: {exc}",
            True,
            SyncOutcome.INVALID,
            attempt.revision,
            tuple(str(p) for p in exc.problems),
            kept=True,
        )
    else:
        found = _guard_defaulted(state, desired) or desired
    return found, replace(state, cache=replace(state.cache, resolved=memo.put(key, found)))


def _guard_defaulted(state: SyncState, desired: DesiredState) -> SyncFailure | None:
    """rollout.maxDefaulted: refuse a new revision moving more nodes than that to `default` because
    their assignment stopped matching (a typo in a selector must not turn MIG off on a pool)."""
    if state.desired is not None and state.desired.revision == desired.revision:
        return None
    moved = matching.moved_to_default(desired, state.desired, state.record.record)
    limit = desired.spec.nodes.max_defaulted
    if limit is None or len(moved) <= limit:
        return None
    return SyncFailure(
        SourceReason.TOO_MANY_DEFAULTED,
        f"revision {desired.revision[:12]} would move {len(moved)} node(s) to default "
        f"{desired.spec.nodes.default!r} because no assignment matches them any more "
        f"{listed(moved, 5)}); rollout.maxDefaulted is {limit}: fix the selectors, list the nodes, or "
        f"raise the limit",
        True,
        SyncOutcome.INVALID,
        desired.revision,
        kept=True,
    )


def history(state: SyncState, run: Run, ports: Ports) -> Done:
    """Is the revision in force still in the followed branch's history? (A force-push can take it
    out; it is enforced from the cluster's record then, and the condition says so.)"""
    desired = state.desired
    assert desired is not None and run.spec is not None
    where = f"{run.spec.url} {run.spec.ref or 'HEAD'}"
    record = f"ConfigMap {ports.options.namespace}/{record_name(ports.options.name)}"
    short = desired.revision[:12]
    fetched = run.got.fetched
    found: tuple[AnyReason, str, str]
    if fetched is not None and run.source is not None:
        if run.source.contains(fetched.revision, desired.revision):
            found = (Reason.REVISION_AVAILABLE, ConditionStatus.TRUE, f"revision {short} is in the history of {where}")
        else:
            found = (
                Reason.REVISION_VANISHED,
                ConditionStatus.FALSE,
                f"revision {short}, in force, is no longer in the history of {where} (rewritten: a "
                f"force-push?); it is enforced from the cluster's record ({record}) until a new revision can be applied",
            )
            key = ("vanished", desired.revision, fetched.revision)
            run.note(Reason.REVISION_VANISHED, found[2], "Warning", key=key)
    elif run.got.from_record and run.failure is not None:
        why = f"revision {short} is enforced from the cluster's record ({record}): the remote cannot be read"
        found = (run.failure.reason, ConditionStatus.UNKNOWN, why)
    else:
        return state, None
    reason, status, message = found
    return replace(state, revision_condition=Condition(REVISION_CONDITION, status, reason, message)), None


def write_record(state: SyncState, run: Run, ports: Ports) -> Done:
    """Keep the revision in force in the cluster, before any write of it."""
    desired, kept = state.desired, state.record
    assert desired is not None
    if ports.options.dry_run or kept.written == desired.revision:
        return state, None
    proof = None if run.got.from_record else _proof(run, desired)
    if kept.record is not None and _same(kept.record, desired) and (kept.record.proof is not None or proof is None):
        # (a record without its proof gets one once git has the commit)
        return replace(state, record=replace(kept, written=desired.revision)), None
    options = ports.options
    uid = objects.meta(ports.cluster.migsync_object()).get("uid")
    new = record_of(desired, state.started_at.get(desired.revision) or time.time(), proof)
    try:
        ports.writer.record(to_configmap(new, options.namespace, options.name, uid))
    except WriteError as err:
        log.warning("the applied record was not written (tried again at the next sync): %s", err)
        return state, None
    trust = run.spec.trust if run.spec is not None else None
    return replace(state, record=RecordState(new, desired.revision, trust, None, kept.unreadable)), None


def _same(kept: AppliedRecord, desired: DesiredState) -> bool:
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


def warn(state: SyncState, run: Run, ports: Ports) -> Done:
    """Assignments that match no node: one Event for them all, however many (their count and the first
    few), recorded again only when they change; the summary shows them as a condition too. (The move to
    default has its own Event, at adoption.)"""
    desired = state.desired
    assert desired is not None
    found = matching.unmatched(desired)
    if found:
        key = ("unmatched", desired.revision, found)
        run.note(Reason.MATCHES_NO_NODE, matching.unmatched_text(found), "Warning", key=key)
    return state, None


def plan_wave(state: SyncState, run: Run, ports: Ports) -> Done:
    """This wave, planned on the nodes with our writes the informer does not show yet laid over them."""
    desired, wave, known, now = state.desired, run.wave, state.nodes, time.monotonic()
    assert desired is not None
    ours = ports.options.owner
    wave.nodes, written = state.cache.written.nodes(dict(run.seen.nodes), ours, now)
    shown = ports.cluster.configmap_seen(desired.namespace, desired.configmap)
    wave.configmap_text, written = written.configmap_text(objects.config_text(shown), now)
    wave.configmap_unmanaged = is_unmanaged(shown)
    wave.skip = frozenset(n for (n, c) in known.refused if desired.targets.get(n) and desired.targets[n].config == c)
    wave.plan = plan(
        desired,
        wave.nodes,
        wave.configmap_text,
        acknowledged=frozenset(known.acknowledged),
        awaiting=frozenset(known.awaiting),
        reached=known.reached,
        skip=wave.skip,
        owner=ours,
    )
    return replace(state, cache=replace(state.cache, written=written)), None


def deadline(state: SyncState, run: Run, ports: Ports) -> Done:
    """rollout.progressDeadlineSeconds per node: a node reconfiguring longer than that is overdue (a dead
    agent leaves it pending forever). Its start is when we wrote its label (our managedFields time: the
    cluster's, so a restart does not reset it), else when we first saw it reconfiguring."""
    p, desired, wave = run.wave.plan, state.desired, run.wave
    assert p is not None and desired is not None
    limit, now = desired.spec.nodes.progress_deadline, time.time()
    since, seen, shown = dict(state.nodes.since), set(), []
    for s in p.nodes:
        if s.phase not in (PROGRESSING, DRIFTED):
            shown.append(s)
            continue
        seen.add(s.name)
        began = since.setdefault(s.name, label_written_at(wave.nodes.get(s.name) or {}) or now)
        if now - began <= limit:
            shown.append(s)
            continue
        why = f"no progress for {now - began:.0f}s (progressDeadlineSeconds {limit:g}): {s.message or s.state}"
        wave.overdue.append((s.name, why))
        shown.append(replace(s, message=why))
        run.note(
            Reason.PROGRESS_DEADLINE,
            f"node {s.name}: {why}",
            "Warning",
            key=("deadline", s.name, began),
            involved={"apiVersion": "v1", "kind": "Node", "metadata": {"name": s.name}},
        )
    if wave.overdue:
        wave.plan = replace(p, nodes=tuple(shown))
    since = {n: t for n, t in since.items() if n in seen}
    return replace(state, nodes=replace(state.nodes, since=since)), None


def apply_configmap(state: SyncState, run: Run, ports: Ports) -> Done:
    """The MIG ConfigMap first: a label must never name a config the ConfigMap lacks."""
    desired, p, seen, last = state.desired, run.wave.plan, run.wave.configmap_text, state.nodes.configmap_text
    assert desired is not None and p is not None
    if run.wave.configmap_unmanaged:
        return _leave_unmanaged(state, run, p)
    if not p.configmap_changed:
        if seen is not None:
            state = replace(state, nodes=replace(state.nodes, configmap_text=seen))
        return state, None
    text = desired.spec.config_text
    try:
        ports.writer.configmap(desired.namespace, desired.configmap, text)
    except WriteError as err:
        run.wave.errors.append(err)
        return state, None
    run.wave.writes += 1
    if not ports.options.dry_run:
        state = replace(
            state, cache=replace(state.cache, written=state.cache.written.wrote_configmap(text, time.monotonic()))
        )
    where = f"ConfigMap {desired.namespace}/{desired.configmap}"
    if seen is not None and last == text:
        run.note(
            Reason.DRIFT_REVERTED,
            f"data.{CONFIGMAP_KEY} of {where} was changed by hand; put back to revision {desired.revision[:12]}",
            "Warning",
            involved=_configmap_ref(desired),
        )
    else:
        run.note(
            Reason.CONFIGMAP_APPLIED, f"{where} data.{CONFIGMAP_KEY} applied from revision {desired.revision[:12]}"
        )
    return replace(state, nodes=replace(state.nodes, configmap_text=text)), None


def _leave_unmanaged(state: SyncState, run: Run, p: Plan) -> Done:
    """The ConfigMap labelled migops.io/unmanaged=true: never written. While it holds the revision's
    config.yaml the wave goes on; while it does not, no node gets a new label (the label could name a
    config it lacks or defines otherwise) and Ready says which revision it waits for."""
    desired = state.desired
    assert desired is not None
    where = f"ConfigMap {desired.namespace}/{desired.configmap}"
    hatch = f"{UNMANAGED_LABEL}=true"
    if not p.configmap_changed:
        state = replace(state, nodes=replace(state.nodes, configmap_text=run.wave.configmap_text))
        run.note(
            Reason.CONFIGMAP_UNMANAGED,
            f"{where} is labelled {hatch}: migops leaves it to whoever writes it (it holds the config.yaml of "
            f"revision {desired.revision[:12]})",
            key=("configmap-unmanaged", desired.configmap, desired.revision),
            involved=_configmap_ref(desired),
        )
        return state, None
    message = (
        f"{where} is labelled {hatch} and its data.{CONFIGMAP_KEY} is not revision {desired.revision[:12]}'s: "
        f"migops does not write it, and gives no node a new label until it holds the revision's config.yaml "
        f"(or the label is removed: the revision's content is then written)"
    )
    run.note(
        Reason.CONFIGMAP_UNMANAGED,
        message,
        "Warning",
        key=("configmap-unmanaged-held", desired.configmap, desired.revision, run.wave.configmap_text),
        involved=_configmap_ref(desired),
    )
    run.wave.plan = replace(p, writes=(), drift=frozenset())
    run.keep(SyncFailure(Reason.CONFIGMAP_UNMANAGED, message, False, SyncOutcome.HALTED))
    return state, None


def _configmap_ref(desired: DesiredState) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": desired.configmap, "namespace": desired.namespace},
    }


def apply_wave(state: SyncState, run: Run, ports: Ports) -> Done:
    """This wave's labels (and prunes), in parallel; nothing while an earlier write failed."""
    p, desired = run.wave.plan, state.desired
    assert p is not None and desired is not None
    if not run.wave.errors:
        state = _write_wave(state, run, ports, p, desired.revision)
    reached = {**state.nodes.reached, **{s.name: s.config for s in p.nodes if s.phase == IN_SYNC}}
    return replace(state, nodes=replace(state.nodes, reached=reached)), None


def _write_wave(state: SyncState, run: Run, ports: Ports, p: Plan, revision: str) -> SyncState:
    """The wave's writes; the state remembers them (awaited, laid over the informer) and the ones
    refused for good (terminal errors), by (node, config)."""
    wave, writer, refused = run.wave, ports.writer, state.nodes.refused
    items: list[tuple[str, str | None]] = [*p.writes, *((n, None) for n in p.prunes)]
    # Read before the writes: a node event numbered above it may be the answer to one of them.
    began = ports.cluster.node_changes.count()
    done, errors = writer.labels([*items, *p.annotate], revision)
    released, release_errors = writer.releases(n for n in p.releases if (n, None) not in refused)
    errors += release_errors
    wave.errors += errors
    wave.writes += len(done) + len(released)
    wrote = dict([*p.annotate, *items])
    if released:
        run.note(
            Reason.RELEASED,
            f"{len(released)} node(s) left management (migops.io/unmanaged=true, or outside "
            f"every assignment): {listed(released, 10)}; their nvidia.com/mig.config is no longer enforced",
        )
    annotated = {n for n, _ in p.annotate}
    _notes_for_writes(run, p, [n for n in done if n not in annotated], wrote, revision)
    terminal = ((err.target.split("/", 1)[1], err) for err in errors if err.kind == "terminal")
    refused = {**refused, **{(node, wrote.get(node)): str(err) for node, err in terminal}}
    state = replace(state, nodes=replace(state.nodes, refused=refused))
    if ports.options.dry_run:
        return state
    relabelled = [n for n in done if n not in annotated and wrote[n] is not None]
    return remember_writes(state, wave.nodes, [(n, wrote[n]) for n in done], relabelled, released, revision, began)


def remember_writes(
    state: SyncState,
    nodes: Mapping[str, Mapping[str, Any]],
    done: list[tuple[str, str | None]],
    relabelled: list[str],
    released: list[str],
    revision: str,
    began: int,
) -> SyncState:
    """Our writes laid over the informer until it shows them; the nodes without the agent that we gave
    a new label (`relabelled`) awaited until mig-manager answers (its state leaves `success`)."""
    now = time.monotonic()
    written = state.cache.written.wrote(done, revision, now, began).released(released, now, began)
    # Marked at `began` even when already awaited: an event recorded before the write that the state
    # does not hold yet must not count as the answer to it.
    fresh = {n: began for n in relabelled if not config_state(nodes[n]).agent}
    memory = replace(state.nodes, awaiting={**state.nodes.awaiting, **fresh}) if fresh else state.nodes
    return replace(state, nodes=memory, cache=replace(state.cache, written=written))


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
    resolve_candidate,
    history,
    write_record,
    warn,
    plan_wave,
    deadline,
    apply_configmap,
    apply_wave,
)

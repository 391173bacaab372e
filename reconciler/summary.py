"""The end of a sync: conditions, the MigSync's status, Events and metrics, all from what the steps
returned. Nothing else in the reconciler writes any of them (as Flux's summarizeAndPatch), and the
messages are said in full here only: a failure's "what the cluster keeps" once the sync knows it."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, TypeVar

from migops.api.migsync import Condition, ConditionStatus, MigSyncStatus
from migops.api.names import RESUME_ANNOTATION
from migops.api.schema import dump
from migops.gitops.desired import DesiredState
from migops.mig.text import listed
from migops.reconciler import matching
from migops.reconciler import status as st
from migops.reconciler.plan import DRIFTED, IN_SYNC, Plan
from migops.reconciler.ports import Ports
from migops.reconciler.reasons import Reason, SyncFailure, SyncNote, SyncOutcome, SyncResult
from migops.reconciler.recorder import event_target
from migops.reconciler.state import Run, SyncState

log = logging.getLogger(__name__)

NOTHING_KEPT = "nothing has been applied"
T = TypeVar("T", SyncFailure, SyncNote)


def progress(p: Plan, revision: str, migsync: str) -> str:
    """One line: where the rollout of `revision` stands."""
    inside = p.counts.get(IN_SYNC, 0)
    if p.halted:
        h = p.halted[0]
        more = f" (and {len(p.halted) - 1} more)" if len(p.halted) > 1 else ""
        return (
            f"rollout of {revision[:12]} halted: node {h.name} failed to apply {h.config!r}: {h.message}{more}; "
            f"push a new commit or resume (kubectl annotate migsync {migsync} {RESUME_ANNOTATION}=<new value> --overwrite)"
        )
    if p.converged:
        return f"revision {revision[:12]} applied: {inside}/{len(p.nodes)} nodes in sync"
    drifted = p.counts.get(DRIFTED, 0)
    shown = f" ({drifted} of them drifted: GPUs differ from the applied config)" if drifted else ""
    return (
        f"rolling out {revision[:12]}: {inside}/{len(p.nodes)} nodes in sync, {p.unavailable} reconfiguring{shown} "
        f"(maxUnavailable {p.max_unavailable})"
    )


def _three(
    ready: tuple[ConditionStatus, str, str],
    reconciling: tuple[ConditionStatus, str, str],
    stalled: tuple[ConditionStatus, str, str],
) -> list[Condition]:
    return [Condition("Ready", *ready), Condition("Reconciling", *reconciling), Condition("Stalled", *stalled)]


def conditions(failure: SyncFailure | None, p: Plan | None, revision: str | None, migsync: str) -> list[Condition]:
    """Ready, Reconciling, Stalled (kstatus, as Flux uses them)."""
    if failure is not None:
        moving = p is not None and not p.converged and not p.halted
        why = progress(p, revision, migsync) if p is not None and moving and revision else failure.message
        return _three(
            (ConditionStatus.FALSE, failure.reason, failure.message),
            (
                ConditionStatus.TRUE if moving else ConditionStatus.FALSE,
                Reason.PROGRESSING if moving else failure.reason,
                why,
            ),
            (ConditionStatus.TRUE, failure.reason, failure.message)
            if failure.stalled
            else (ConditionStatus.FALSE, Reason.RETRYING, ""),
        )
    if p is None or revision is None:
        return _three(
            (ConditionStatus.UNKNOWN, Reason.PROGRESSING, "starting"),
            (ConditionStatus.TRUE, Reason.PROGRESSING, "starting"),
            (ConditionStatus.FALSE, Reason.PROGRESSING, ""),
        )
    msg = progress(p, revision, migsync)
    if p.halted:
        return _three(
            (ConditionStatus.FALSE, Reason.ROLLOUT_HALTED, msg),
            (ConditionStatus.FALSE, Reason.ROLLOUT_HALTED, msg),
            (ConditionStatus.TRUE, Reason.ROLLOUT_HALTED, msg),
        )
    if p.converged:
        return _three(
            (ConditionStatus.TRUE, Reason.SUCCEEDED, msg),
            (ConditionStatus.FALSE, Reason.SUCCEEDED, msg),
            (ConditionStatus.FALSE, Reason.SUCCEEDED, ""),
        )
    return _three(
        (ConditionStatus.UNKNOWN, Reason.PROGRESSING, msg),
        (ConditionStatus.TRUE, Reason.PROGRESSING, msg),
        (ConditionStatus.FALSE, Reason.PROGRESSING, ""),
    )


def status_body(
    obj: Mapping[str, Any] | None,
    new: list[Condition],
    fields: MigSyncStatus,
    p: Plan | None,
    failure: SyncFailure | None,
    generation: int | None,
) -> dict[str, Any]:
    """The MigSync's status: conditions merged with the object's (transition times kept), `fields`
    (revisions, configMap, warnings) where set, the plan's summary and nodes, the failure's problems;
    `generation`: the one whose spec the sync read (the object may be newer by now)."""
    obj = obj or {}
    old = (obj.get("status") or {}).get("conditions") or []
    body = replace(
        fields,
        observed_generation=generation,
        conditions=st.merge_conditions(old, new, generation),
        summary=st.summary(p) if p is not None else None,
        nodes=st.node_entries(p) if p is not None else None,
        problems=tuple(failure.problems[:50]) if failure is not None and failure.problems else None,
    )
    return dump(body)


def kept(desired: DesiredState | None, unkept_record: str | None = None) -> str:
    """What the cluster keeps while a newer revision is refused."""
    if desired is not None:
        return f"the cluster keeps revision {desired.revision[:12]}"
    return f"{NOTHING_KEPT} ({unkept_record})" if unkept_record else NOTHING_KEPT


def said(what: T, state: SyncState, run: Run) -> T:
    """A SyncFailure (or its Event) as status, Events and the result say it: with what the cluster keeps
    in the state the sync ends in, when it says so (`kept`)."""
    if not what.kept:
        return what
    return replace(what, message=f"{what.message}; {kept(state.desired, run.unkept_record)}", kept=False)


def finish(
    state: SyncState, run: Run, stopped: SyncFailure | None, ports: Ports, began: float
) -> tuple[SyncState, SyncResult]:
    """The one place that writes conditions, status, Events and metrics; the state the sync leaves."""
    p = None if stopped is not None else run.wave.plan
    raw = stopped or _write_failure(state, run)
    failure = said(raw, state, run) if raw is not None else None
    outcome = failure.outcome if failure is not None else _outcome(run)
    desired = state.desired
    if (
        p is not None
        and desired is not None
        and (outcome == SyncOutcome.IN_SYNC or (outcome == SyncOutcome.APPLIED and p.converged))
    ):
        state = _converged(state, run, ports, desired.revision)
    state = replace(state, reported=replace(state.reported, failure=failure))
    target = event_target(ports.cluster.migsync_object(), state.desired)  # (the state this sync leaves)
    for note in run.notes:
        ports.events.record(said(note, state, run), target)
    state = publish(state, ports, p)
    metrics = ports.metrics
    if run.got.seconds is not None:
        metrics.fetch_duration.observe(run.got.seconds)
    if p is not None:
        metrics.past_deadline.set(len(run.wave.overdue))
    metrics.reconciles.labels(outcome).inc()
    metrics.duration.observe(time.monotonic() - began)
    if failure is not None and stopped is not None:
        revision = state.last_attempted if run.spec else None
        return state, SyncResult(failure.outcome, revision, 0, failure.message, failure.problems)
    assert p is not None and desired is not None
    message = failure.message if failure else progress(p, desired.revision, ports.options.name)
    problems = failure.problems if failure else ()
    return state, SyncResult(outcome, desired.revision, run.wave.writes, message, problems, p)


def publish(state: SyncState, ports: Ports, p: Plan | None, force: bool = False) -> SyncState:
    """Status (when it differs) and the phase gauges; the plan becomes what a later flush re-sends."""
    if p is not None:
        state = replace(state, reported=replace(state.reported, plan=p))
    for phase, count in (p.counts if p else {}).items():
        ports.metrics.nodes.labels(phase).set(count)
    obj = ports.cluster.migsync_object()
    if ports.options.write_status and obj is not None:
        ports.status.publish(status_of(state, obj, ports.options.name, p), force)
    return state


def status_of(state: SyncState, obj: Mapping[str, Any], name: str, p: Plan | None) -> dict[str, Any]:
    """The MigSync's status for `state` (and the plan synced to, when the sync got that far)."""
    desired = state.desired
    fields = MigSyncStatus(
        last_applied_revision=state.last_applied or None,
        last_attempted_revision=state.last_attempted or None,
        last_handled_resume=state.handled_resume or None,
        config_map=f"{desired.namespace}/{desired.configmap}" if desired else None,
        warnings=tuple(str(w) for w in desired.warnings[:50]) if desired is not None and desired.warnings else None,
    )
    extra = matching.condition(desired, state.moved)
    if state.revision_condition is not None:
        extra.append(state.revision_condition)
    revision = desired.revision if desired else None
    failure = state.reported.failure
    new = conditions(failure, p, revision, name) + extra
    return status_body(obj, new, fields, p, failure, state.reported.generation)


def _write_failure(state: SyncState, run: Run) -> SyncFailure | None:
    """The kept failure, else one the writes make (refused or failed); its Event goes to run.notes."""
    wave = run.wave
    if wave.errors:
        errors = wave.errors
        terminal = [e for e in errors if e.kind == "terminal"]
        msg = f"{len(errors)} write{'s' if len(errors) > 1 else ''} failed: " + listed(errors, 3, sep="; ")
        run.note(Reason.APPLY_FAILED, msg, "Warning", key=("apply-failed", msg))
        return run.failure or SyncFailure(
            Reason.APPLY_FAILED, msg, bool(terminal) and len(terminal) == len(errors), SyncOutcome.APPLY_FAILED
        )
    if wave.skip and run.failure is None:
        # Writes refused earlier and not retried until the next fetch: still the state of things.
        refused = [msg for (n, c), msg in state.nodes.refused.items() if n in wave.skip]
        return SyncFailure(
            Reason.APPLY_FAILED,
            f"{len(refused)} write{'s' if len(refused) > 1 else ''} refused "
            f"(tried again at the next fetch): " + listed(refused, 3, sep="; "),
            True,
            SyncOutcome.APPLY_FAILED,
        )
    if wave.overdue and run.failure is None:
        name, why = wave.overdue[0]
        more = f" (and {len(wave.overdue) - 1} more node(s))" if len(wave.overdue) > 1 else ""
        return SyncFailure(
            Reason.PROGRESS_DEADLINE,
            f"node {name}: {why}{more}; is its agent (or mig-manager) running?",
            True,
            _outcome(run),
        )
    return run.failure


def _outcome(run: Run) -> SyncOutcome:
    p = run.wave.plan
    assert p is not None
    if p.halted:
        return SyncOutcome.HALTED
    if run.wave.writes:
        return SyncOutcome.APPLIED
    return SyncOutcome.IN_SYNC if p.converged else SyncOutcome.PROGRESSING


def _converged(state: SyncState, run: Run, ports: Ports, revision: str) -> SyncState:
    started = dict(state.started_at)
    if state.last_applied != revision:
        began = started.pop(revision, None)
        took = f" in {time.time() - began:.1f}s" if began else ""
        run.note(
            Reason.SUCCEEDED, f"revision {revision[:12]} applied: every node in sync{took}", key=("converged", revision)
        )
    ports.metrics.set_revision(revision)
    return replace(state, last_applied=revision, started_at=started)

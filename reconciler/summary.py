"""The end of a sync: conditions, the MigSync's status, Events and metrics, all from what the steps
returned. Nothing else in the reconciler writes any of them (as Flux's summarizeAndPatch)."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from migops.api.names import RESUME_ANNOTATION
from migops.mig.text import listed
from migops.reconciler import status as st
from migops.reconciler.apply import WriteError, Writer
from migops.reconciler.plan import DRIFTED, IN_SYNC, Plan
from migops.reconciler.reasons import Failure, Outcome, Reason, SyncResult

if TYPE_CHECKING:
    from migops.reconciler.controller import Reconciler
    from migops.reconciler.steps import Run

log = logging.getLogger(__name__)

STATUS_MIN_INTERVAL = 1.0  # at most one status write per second while a rollout moves


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
    ready: tuple[str, str, str], reconciling: tuple[str, str, str], stalled: tuple[str, str, str]
) -> list[st.Condition]:
    return [st.Condition("Ready", *ready), st.Condition("Reconciling", *reconciling), st.Condition("Stalled", *stalled)]


def conditions(failure: Failure | None, p: Plan | None, revision: str | None, migsync: str) -> list[st.Condition]:
    """Ready, Reconciling, Stalled (kstatus, as Flux uses them)."""
    if failure is not None:
        moving = p is not None and not p.converged and not p.halted
        why = progress(p, revision, migsync) if p is not None and moving and revision else failure.message
        return _three(
            ("False", failure.reason, failure.message),
            ("True" if moving else "False", Reason.PROGRESSING if moving else failure.reason, why),
            ("True", failure.reason, failure.message) if failure.stalled else ("False", Reason.RETRYING, ""),
        )
    if p is None or revision is None:
        return _three(
            ("Unknown", Reason.PROGRESSING, "starting"),
            ("True", Reason.PROGRESSING, "starting"),
            ("False", Reason.PROGRESSING, ""),
        )
    msg = progress(p, revision, migsync)
    if p.halted:
        return _three(
            ("False", Reason.ROLLOUT_HALTED, msg),
            ("False", Reason.ROLLOUT_HALTED, msg),
            ("True", Reason.ROLLOUT_HALTED, msg),
        )
    if p.converged:
        return _three(
            ("True", Reason.SUCCEEDED, msg), ("False", Reason.SUCCEEDED, msg), ("False", Reason.SUCCEEDED, "")
        )
    return _three(
        ("Unknown", Reason.PROGRESSING, msg), ("True", Reason.PROGRESSING, msg), ("False", Reason.PROGRESSING, "")
    )


def status_body(
    obj: Mapping[str, Any] | None,
    new: list[st.Condition],
    fields: Mapping[str, Any],
    p: Plan | None,
    failure: Failure | None,
) -> dict[str, Any]:
    """The MigSync's status: conditions merged with the object's (transition times kept), `fields`
    (revisions, configMap) where set, the plan's summary and nodes, the failure's problems."""
    obj = obj or {}
    generation = (obj.get("metadata") or {}).get("generation")
    old = (obj.get("status") or {}).get("conditions") or []
    body: dict[str, Any] = {"conditions": st.merge_conditions(old, new, generation)}
    if generation is not None:
        body["observedGeneration"] = generation
    body.update({k: v for k, v in fields.items() if v})
    if p is not None:
        body["summary"] = st.summary(p)
        body["nodes"] = st.node_entries(p)
    if failure is not None and failure.problems:
        body["problems"] = list(failure.problems[:50])
    return body


class StatusWriter:
    """Sends the MigSync's status when it differs from what was last sent (transition times aside),
    at most once per STATUS_MIN_INTERVAL unless forced; `pending` says one is owed."""

    def __init__(self, writer: Writer, name: str, namespace: str) -> None:
        self._writer = writer
        self._name, self._namespace = name, namespace
        self._sent: dict[str, Any] | None = None
        self._at = 0.0
        self.pending = False

    def forget(self) -> None:
        self._sent = None

    def publish(self, body: dict[str, Any], force: bool = False) -> None:
        comparable = {
            **body,
            "conditions": [{k: v for k, v in c.items() if k != "lastTransitionTime"} for c in body["conditions"]],
        }
        if comparable == self._sent:
            self.pending = False
            return
        if not force and time.monotonic() - self._at < STATUS_MIN_INTERVAL:
            self.pending = True  # the loop writes it once the interval has passed
            return
        try:
            self._writer.status(
                {
                    "apiVersion": st.API_VERSION,
                    "kind": st.KIND,
                    "metadata": {"name": self._name, "namespace": self._namespace},
                    "status": body,
                }
            )
            self._sent = comparable
            self._at = time.monotonic()
            self.pending = False
        except WriteError as err:
            log.warning("status not written: %s", err)


def finish(r: Reconciler, run: Run, stopped: Failure | None, began: float) -> SyncResult:
    """The one place that writes conditions, status, Events and metrics."""
    p = None if stopped is not None else run.plan
    failure = stopped or _write_failure(r, run)
    outcome = failure.outcome if failure is not None else _outcome(run)
    if (
        p is not None
        and r.desired is not None
        and (outcome == Outcome.IN_SYNC or (outcome == Outcome.APPLIED and p.converged))
    ):
        _converged(r, run, r.desired.revision)
    r.failure = failure
    for note in run.notes:
        r.events.record(note)
    r.publish(p)
    if run.fetch_seconds is not None:
        r.metrics.fetch_duration.observe(run.fetch_seconds)
    if p is not None:
        r.metrics.past_deadline.set(len(run.overdue))
    r.metrics.reconciles.labels(outcome).inc()
    r.metrics.duration.observe(time.monotonic() - began)
    if stopped is not None:
        return SyncResult(stopped.outcome, r.last_attempted if run.spec else None, 0, stopped.message, stopped.problems)
    assert p is not None and r.desired is not None
    message = failure.message if failure else progress(p, r.desired.revision, r.name)
    return SyncResult(outcome, r.desired.revision, run.writes, message, failure.problems if failure else (), p)


def _write_failure(r: Reconciler, run: Run) -> Failure | None:
    """The kept failure, else one the writes make (refused or failed); its Event goes to run.notes."""
    if run.errors:
        errors = run.errors
        terminal = [e for e in errors if e.kind == "terminal"]
        msg = f"{len(errors)} write{'s' if len(errors) > 1 else ''} failed: " + listed(errors, 3, sep="; ")
        run.note(Reason.APPLY_FAILED, msg, "Warning", key=("apply-failed", msg))
        return run.failure or Failure(
            Reason.APPLY_FAILED, msg, bool(terminal) and len(terminal) == len(errors), Outcome.APPLY_FAILED
        )
    if run.skip and run.failure is None:
        # Writes refused earlier and not retried until the next fetch: still the state of things.
        refused = [msg for (n, c), msg in r.memory.refused.items() if n in run.skip]
        return Failure(
            Reason.APPLY_FAILED,
            f"{len(refused)} write{'s' if len(refused) > 1 else ''} refused "
            f"(tried again at the next fetch): " + listed(refused, 3, sep="; "),
            True,
            Outcome.APPLY_FAILED,
        )
    if run.overdue and run.failure is None:
        name, why = run.overdue[0]
        more = f" (and {len(run.overdue) - 1} more node(s))" if len(run.overdue) > 1 else ""
        return Failure(
            Reason.PROGRESS_DEADLINE,
            f"node {name}: {why}{more}; is its agent (or mig-manager) running?",
            True,
            _outcome(run),
        )
    return run.failure


def _outcome(run: Run) -> Outcome:
    p = run.plan
    assert p is not None
    if p.halted:
        return Outcome.HALTED
    if run.writes:
        return Outcome.APPLIED
    return Outcome.IN_SYNC if p.converged else Outcome.PROGRESSING


def _converged(r: Reconciler, run: Run, revision: str) -> None:
    if r.last_applied != revision:
        began = r.started_revision_at.pop(revision, None)
        took = f" in {time.time() - began:.1f}s" if began else ""
        run.note(
            Reason.SUCCEEDED, f"revision {revision[:12]} applied: every node in sync{took}", key=("converged", revision)
        )
    r.last_applied = revision
    r.metrics.set_revision(revision)

"""One look at the node, and what follows from it: run the flow for a new config, retry a failure with
exponential backoff, or check the GPUs for drift when the interval is up and report, repair or hold.

`tick(state, look, ports, policy) -> (state, outcome)` reads the agent's state (`state.AgentState`) and
returns the one it leaves, never editing it; the drift phases change as docs/agent.md's diagram (and
`state.DriftPhase`) say. Whatever the node is told goes through `report.tell`.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass, replace
from typing import Any

from migops.agent import drift
from migops.agent.backend import GpuError
from migops.agent.desired import FlowFailure, desired_on_node, node_models
from migops.agent.finish import API_ERRORS, clip, describe
from migops.agent.kube import layout_json
from migops.agent.plan import layout_annotation
from migops.agent.ports import AgentPorts
from migops.agent.reasons import AgentEvent
from migops.agent.report import publish, tell
from migops.agent.state import (
    AgentState,
    ConfigRequest,
    DriftPhase,
    FlowRun,
    NodeEvent,
    NodeReport,
    RunOutcome,
)
from migops.agent.steps import run_flow
from migops.api.names import (
    DRIFT_ANNOTATION,
    LAYOUT_ANNOTATION,
    REASON_ANNOTATION,
    STATE_FAILED,
    STATE_REBOOTING,
    STATE_SUCCESS,
)
from migops.api.objects import NodeFacts

log = logging.getLogger(__name__)
Done = tuple[AgentState, RunOutcome | None]


@dataclass(frozen=True)
class Retry:
    base: float = 10.0
    cap: float = 600.0
    jitter: float = 0.1

    def delay(self, failures: int) -> float:
        value = min(self.cap, self.base * 2 ** max(failures - 1, 0))
        return value * (1 + random.uniform(-self.jitter, self.jitter))


@dataclass(frozen=True)
class LoopPolicy:
    retry: Retry = Retry()
    drift: drift.DriftOptions = drift.DriftOptions()


@dataclass(frozen=True)
class Look:
    """The node as the watch has it, what it asks for, and whether a (simulated) reboot just happened."""

    node: dict[str, Any]
    request: ConfigRequest
    rebooted: bool = False

    @property
    def prior(self) -> str | None:
        """The state label a run starts from (the reboot-loop guard reads it)."""
        return STATE_REBOOTING if self.rebooted else NodeFacts.from_obj(self.node, offers=False).state


def tick(state: AgentState, look: Look, ports: AgentPorts, policy: LoopPolicy) -> Done:
    """Look once: the flow, a retry or a drift check when one is due; (state, None) when nothing was."""
    if look.request.waiting is not None and look.request.key != state.key:
        return wait_for_verdict(state, look, ports, policy)
    if state.waiting is not None:
        log.info("the MIG ConfigMap's content is the revision in force again, or a new one: acting on it")
        state = replace(state, waiting=None)
    if look.request.key != state.key or state.outcome is None:
        return begin(state, look, ports, policy)
    if look.rebooted:
        return flow(state, look, ports, policy)
    now = ports.clock()
    if state.retrying:
        if now < state.next_retry:
            return state, None
        if state.drift.phase is DriftPhase.REPAIRING:  # a repair is retried from a fresh look at the GPUs
            return check_drift(state, look, ports, policy, retry=True)
        return flow(state, look, ports, policy)
    if policy.drift.enabled and now >= state.drift.next_check:
        return check_drift(state, look, ports, policy)
    return state, None


def wait_for_verdict(state: AgentState, look: Look, ports: AgentPorts, policy: LoopPolicy) -> Done:
    """New content the reconciler is about to put back (agent/watch.py): nothing is applied, and drift is
    neither checked nor repaired meanwhile (a repair would apply that content). Said once in the log."""
    if state.waiting != look.request.waiting:
        log.warning("MIG config %r not applied: %s", look.request.name, look.request.waiting)
    d = replace(state.drift, next_check=ports.clock() + policy.drift.interval)
    return replace(state, waiting=look.request.waiting, drift=d), None


def begin(state: AgentState, look: Look, ports: AgentPorts, policy: LoopPolicy) -> Done:
    """A new config (name, content or strategy), or the agent's first look: the flow runs (at start, after
    a check for what changed while the agent was away). Failures and repairs are counted anew."""
    first = state.outcome is None
    state = AgentState(key=look.request.key)
    if first and policy.drift.enabled and look.prior != STATE_REBOOTING and _applied_before(look):
        state, outcome = check_drift(state, look, ports, policy, at_start=True)
        if outcome is not None:
            return state, outcome  # else the flow runs: it also restores what a killed agent paused
    elif DRIFT_ANNOTATION in ports.node.annotations:  # drift from a config being replaced
        tell(ports, look.node, NodeReport(annotations={DRIFT_ANNOTATION: None}))
    return flow(state, look, ports, policy)


def flow(state: AgentState, look: Look, ports: AgentPorts, policy: LoopPolicy) -> Done:
    """Run the flow; schedule the retry of a failure; a success ends a repair and starts the checks."""
    repairing = state.drift.phase is DriftPhase.REPAIRING
    outcome = run_flow(state, FlowRun(look.request, look.node, prior=look.prior), ports)
    now = ports.clock()
    failures, next_retry = 0, state.next_retry
    if outcome.state == STATE_FAILED:
        failures = state.failures + 1
        delay = policy.retry.delay(failures)
        next_retry = now + delay
        name = look.request.name
        log.warning("MIG config %r failed (attempt %d); retrying in %.1fs: %s", name, failures, delay, outcome.reason)
    else:
        log.info("MIG config %r: %s", look.request.name, outcome.state)
    if repairing:
        ports.metrics.repairs.labels(outcome.state).inc()
    d = replace(state.drift, phase=DriftPhase.REPAIRING if repairing else DriftPhase.IN_SYNC)
    if outcome.state == STATE_SUCCESS:
        d = replace(d, phase=DriftPhase.IN_SYNC, reported="", next_check=now + policy.drift.interval)
        ports.metrics.drifted.set(0)
    return replace(state, outcome=outcome, failures=failures, next_retry=next_retry, drift=d), outcome


def check_drift(
    state: AgentState, look: Look, ports: AgentPorts, policy: LoopPolicy, *, at_start: bool = False, retry: bool = False
) -> Done:
    """Read the GPUs and compare them with the applied config; report, repair or hold. (state, None):
    nothing to do (no drift, or the same drift still held or reported; at start, no drift)."""
    d = replace(state.drift, next_check=ports.clock() + policy.drift.interval)
    try:
        desired = d.desired or tuple(desired_on_node(look.request, node_models(ports.backend.devices())))
        d = replace(d, desired=desired)
        found = drift.check(ports.backend, desired)
    except (GpuError, FlowFailure) as exc:  # a config that no longer validates here is left to the flow
        log.warning("drift check: %s", exc)
        return replace(state, drift=d), None
    ports.metrics.checks.inc()
    ports.metrics.check_seconds.observe(found.seconds)
    ports.metrics.drifted.set(len(found.drifts))
    state = replace(state, drift=d)
    try:
        layout = _layout(found, look, ports)
        if not found.drifts:
            return (state, None) if at_start else _in_sync(state, look, ports, layout)
        return _drifted(state, look, ports, policy, found, layout, retry)
    except API_ERRORS as exc:
        # Told next time: the drift counts as untold and the layout as unpublished.
        log.warning("drift check: could not write the Node: %s", describe(exc))
        ports.node.annotations.pop(LAYOUT_ANNOTATION, None)
        return replace(state, drift=replace(d, reported="")), None


def _layout(found: drift.Check, look: Look, ports: AgentPorts) -> dict[str, str | None]:
    """Labels and allocatable follow the instances that exist, from the moment a difference is seen;
    the layout annotations to tell, or {} when the node has them already."""
    text = layout_json(layout_annotation(found.models, found.states))
    if text == ports.node.annotations.get(LAYOUT_ANNOTATION):
        return {}
    return publish(ports, look.node, look.request.strategy, found.models, found.states)


def _in_sync(state: AgentState, look: Look, ports: AgentPorts, layout: dict[str, str | None]) -> Done:
    d, name = state.drift, look.request.name
    if d.reported or d.phase is not DriftPhase.IN_SYNC or DRIFT_ANNOTATION in ports.node.annotations:
        log.info("the GPUs match MIG config %r again", name)
        message = f"the GPUs match MIG config {name!r} again (changed back out of band)"
        notes = {**layout, DRIFT_ANNOTATION: None, REASON_ANNOTATION: None}
        tell(ports, look.node, NodeReport(STATE_SUCCESS, notes, (NodeEvent(AgentEvent.DRIFT_RESOLVED, message),)))
        outcome = RunOutcome(STATE_SUCCESS)
        d = replace(d, phase=DriftPhase.IN_SYNC, reported="")
        return replace(state, outcome=outcome, failures=0, drift=d), outcome
    if layout:
        tell(ports, look.node, NodeReport(annotations=layout))
    return state, None


def _drifted(
    state: AgentState,
    look: Look,
    ports: AgentPorts,
    policy: LoopPolicy,
    found: drift.Check,
    layout: dict[str, str | None],
    retry: bool,
) -> Done:
    d, text, now = state.drift, found.text, ports.clock()
    events: tuple[NodeEvent, ...] = ()
    if text != d.reported:
        d = replace(d, reported=text)
        for g in found.drifts:
            ports.metrics.detected.labels(str(g.index)).inc()
        log.warning("drift: the GPUs differ from MIG config %r: %s", look.request.name, text)
        doing = "repairing" if policy.drift.policy == "repair" else "not repaired (--drift=report)"
        message = f"the GPUs differ from MIG config {look.request.name!r} (changed out of band): {text}; {doing}"
        events = (NodeEvent(AgentEvent.DRIFT_DETECTED, message, warning=True),)
    state = replace(state, drift=d)
    told = NodeReport(annotations={**layout, DRIFT_ANNOTATION: clip(text)}, events=events)
    if policy.drift.policy == "report":
        return _report_only(state, look, ports, told, changed=bool(events or layout))
    if d.phase is DriftPhase.HELD and now < d.held_until:
        if events or layout:
            tell(ports, look.node, told)
        return state, None
    if not retry:
        recent = drift.repairs_in_window(d, policy.drift, now)
        if len(recent) >= policy.drift.max_repairs:
            return _hold(replace(state, drift=replace(d, repairs=recent)), look, ports, policy, told)
        d = replace(d, repairs=(*recent, now))
    tell(ports, look.node, told)
    return flow(replace(state, drift=replace(d, phase=DriftPhase.REPAIRING)), look, ports, policy)


def _report_only(state: AgentState, look: Look, ports: AgentPorts, told: NodeReport, changed: bool) -> Done:
    """--drift=report: state failed with the drift as the reason, told again only when it changes."""
    d = state.drift
    if not changed and d.phase is DriftPhase.REPORTED:
        return state, None
    reason = (
        f"MIG config {look.request.name!r}: the GPUs differ from the applied config ({d.reported}); "
        "not repaired (--drift=report)"
    )
    tell(
        ports,
        look.node,
        replace(told, state=STATE_FAILED, annotations={**told.annotations, REASON_ANNOTATION: clip(reason)}),
    )
    if told.events:
        ports.metrics.repairs.labels("report").inc()
    outcome = RunOutcome(STATE_FAILED, reason)
    return replace(state, outcome=outcome, drift=replace(d, phase=DriftPhase.REPORTED)), outcome


def _hold(state: AgentState, look: Look, ports: AgentPorts, policy: LoopPolicy, told: NodeReport) -> Done:
    """Drift again after `max_repairs` repairs in the window: no repair until the oldest ages out."""
    d, now, options = state.drift, ports.clock(), policy.drift
    held_until = d.repairs[0] + options.window if d.repairs else now
    reason = (
        f"MIG config {look.request.name!r}: the GPUs were changed out of band again after "
        f"{options.max_repairs} repairs in the last {options.window:g}s ({d.reported}); not repairing "
        f"for {max(held_until - now, 0.0):.0f}s (drift backoff)"
    )
    log.warning("%s", reason)
    notes = {**told.annotations, REASON_ANNOTATION: clip(reason)}
    events = (*told.events, NodeEvent(AgentEvent.DRIFT_REPAIR_HELD, reason, warning=True))
    tell(ports, look.node, NodeReport(STATE_FAILED, notes, events))
    ports.metrics.repairs.labels("held").inc()
    outcome = RunOutcome(STATE_FAILED, reason)
    return replace(state, outcome=outcome, drift=replace(d, phase=DriftPhase.HELD, held_until=held_until)), outcome


def idle_timeout(state: AgentState, ports: AgentPorts, policy: LoopPolicy) -> float:
    """Until the next retry or drift check (60 s at most: a missed wake-up costs no more)."""
    if state.outcome is None:
        return 60.0
    now = ports.clock()
    if state.retrying:
        return min(max(state.next_retry - now, 0.0), 60.0)
    if policy.drift.enabled:
        return min(max(state.drift.next_check - now, 0.0), 60.0)
    return 60.0


def _applied_before(look: Look) -> bool:
    """The Node says this very config (name and content) was applied: the GPUs should hold it."""
    facts = NodeFacts.from_obj(look.node, offers=False)
    digest = look.request.digest
    return digest is not None and facts.applied == look.request.name and facts.digest == digest

"""How a run of the flow ends, whatever ended it: the host services started again, the GPU clients'
deploy labels restored, what the GPUs hold published, and the node told (`report.tell`): `success`
with the applied config and its digest, or `failed` with the reason; `rebooting` is left as the flow
told it (the node goes down with its clients paused; the flow after the reboot restores them).

The Node's API answers every request in the end (agent/kube.py sends each until it does), so an API
server outage at any point of the flow delays this ending; it never skips it.
"""

from __future__ import annotations

import logging

from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError as Urllib3Error

from migops.agent.backend import GpuError
from migops.agent.desired import FlowFailure, node_models
from migops.agent.host import HostError
from migops.agent.kube import OPERATOR_VALIDATOR_APP, deploy_values_restored
from migops.agent.ports import AgentPorts
from migops.agent.reasons import AgentEvent
from migops.agent.report import publish, tell
from migops.agent.state import AgentState, DriftPhase, FlowEnding, FlowRun, NodeEvent, NodeReport, RunOutcome
from migops.api import objects
from migops.api.names import (
    APPLIED_ANNOTATION,
    DIGEST_ANNOTATION,
    DRIFT_ANNOTATION,
    REASON_ANNOTATION,
    STATE_FAILED,
    STATE_PENDING,
    STATE_REBOOTING,
    STATE_SUCCESS,
)

log = logging.getLogger(__name__)
MAX_REASON = 1000  # annotation values may be long; keep the reason readable
API_ERRORS = (ApiException, Urllib3Error, OSError)


def finish(state: AgentState, run: FlowRun, ports: AgentPorts, ending: FlowEnding) -> RunOutcome:
    """Restore, publish and tell; the outcome the node was told."""
    if ending.state == STATE_REBOOTING:
        return run.outcome(STATE_REBOOTING, ending.reason)
    if ending.state == STATE_SUCCESS:
        try:
            return _succeed(state, run, ports)
        except Exception as exc:
            if not is_api_error(exc) and not isinstance(exc, GpuError):
                log.exception("unexpected error")
            ending = FlowEnding(STATE_FAILED, describe(exc))
    return _fail(run, ports, ending.reason)


def _restore(run: FlowRun, ports: AgentPorts) -> list[str]:
    """Start stopped host services and unpause the clients; what went wrong, as text."""
    problems = []
    if ports.systemd is not None and ports.systemd.pending():
        try:
            ports.systemd.start()
        except HostError as exc:
            problems.append(f"restarting host services: {exc}")
    restore = deploy_values_restored({**objects.labels(run.node), **ports.node.labels})
    if restore:
        try:
            ports.node.apply(restore)
        except API_ERRORS as exc:
            problems.append(f"restoring the deploy labels: {describe(exc)}")
    return problems


def _succeed(state: AgentState, run: FlowRun, ports: AgentPorts) -> RunOutcome:
    problems = _restore(run, ports)
    if run.paused:
        try:
            ports.node.delete_pods(run.request.clients_namespace, (OPERATOR_VALIDATOR_APP,))
        except API_ERRORS as exc:  # best effort: mig-manager's early return here wedged nodes
            log.warning("could not restart the operator validator: %s", describe(exc))
    if problems:
        return _fail(run, ports, "applied, but " + "; ".join(problems))
    if ports.dra is not None:
        # The kubelet plugin is restarted only when the GPUs changed; otherwise its slices are checked.
        mismatch = ports.dra.after_apply(run.devices, run.models, run.states, changed=bool(run.touched))
        if mismatch:
            return _fail(run, ports, "applied, but " + mismatch)
    annotations: dict[str, str | None] = {
        **publish(ports, run.node, run.request.strategy, run.models, run.states),
        APPLIED_ANNOTATION: run.request.name,
        DIGEST_ANNOTATION: run.request.digest or "",
        REASON_ANNOTATION: None,
        DRIFT_ANNOTATION: None,
    }
    touched = ", ".join(map(str, sorted(run.touched))) or "-"
    events: list[NodeEvent] = []
    if run.steps or run.paused:
        message = f"MIG config {run.request.name!r} applied ({run.steps} driver calls on GPU {touched})"
        events.append(NodeEvent(AgentEvent.CONFIG_APPLIED, message))
    if state.drift.phase is DriftPhase.REPAIRING:
        message = f"the GPUs match MIG config {run.request.name!r} again: {run.steps} driver calls on GPU {touched}"
        events.append(NodeEvent(AgentEvent.DRIFT_REPAIRED, message))
    try:
        tell(ports, run.node, NodeReport(STATE_SUCCESS, annotations, tuple(events)))
    except ApiException as exc:
        label = ports.node.config_label() if exc.status in (403, 422) else run.request.name
        if label == run.request.name:
            raise
        # The node was given another config while this one was applied: the own-node policy refuses
        # an applied config and digest the node's label no longer names. The new one is pending; the
        # next step runs it at once (the label change woke the loop).
        log.info("MIG config %r applied, but the node is now labelled %r: pending", run.request.name, label)
        kept = {k: v for k, v in annotations.items() if k not in (APPLIED_ANNOTATION, DIGEST_ANNOTATION)}
        tell(ports, run.node, NodeReport(STATE_PENDING, kept))
        return run.outcome(STATE_PENDING, f"the node's config changed to {label!r}")
    return run.outcome(STATE_SUCCESS)


def _fail(run: FlowRun, ports: AgentPorts, reason: str) -> RunOutcome:
    log.error("MIG config %r failed: %s", run.request.name, reason)
    problems = _restore(run, ports)
    if problems:
        reason += " (and " + "; ".join(problems) + ")"
    annotations: dict[str, str | None] = {REASON_ANNOTATION: clip(reason)}
    try:
        devices = ports.backend.devices()
        models = node_models(devices)
        states = [ports.backend.read(d.index) for d in devices]
        annotations.update(publish(ports, run.node, run.request.strategy, models, states))
    except (FlowFailure, GpuError, *API_ERRORS) as exc:
        log.warning("could not read the GPUs after the failure: %s", describe(exc))
    event = NodeEvent(AgentEvent.CONFIG_FAILED, f"MIG config {run.request.name!r}: {reason}", warning=True)
    try:
        tell(ports, run.node, NodeReport(STATE_FAILED, annotations, (event,)))
    except API_ERRORS as exc:
        log.error("could not set state failed: %s", describe(exc))
    return run.outcome(STATE_FAILED, reason)


def clip(text: str) -> str:
    return text if len(text) <= MAX_REASON else text[: MAX_REASON - 3] + "..."


def is_api_error(exc: BaseException) -> bool:
    return isinstance(exc, API_ERRORS)


def describe(exc: BaseException) -> str:
    if isinstance(exc, ApiException):
        return f"API server: HTTP {exc.status} {exc.reason}"
    if isinstance(exc, Urllib3Error):
        return f"API server not answering: {type(exc).__name__}"
    if isinstance(exc, InterruptedError):
        return f"interrupted: {exc}"
    return str(exc)

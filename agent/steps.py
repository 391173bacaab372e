"""One reconfiguration of the node's GPUs as a list of steps: mig-manager's flow (mig-hardware.md 5.3),
without its holes.

    validate (invalid: failed, nothing paused) -> already applied? (success, nothing paused)
    -> plan -> busy instances the change would destroy? (failed, nothing paused, unless allowed)
    -> pending -> pause GPU clients, wait for their pods -> stop host services
    -> MIG mode change (reset; or rebooting + reboot, with the loop guard)
    -> apply the diff at explicit placements -> verify
    -> (agent/finish.py) restart host services, restore clients -> success

Every step has one signature, `step(state, run, ports) -> FlowEnding | None`: it reads the agent's state
(`state.AgentState`, a value it never changes) and what earlier steps left in `run`, adds its own
result to `run`, reaches the GPUs and the Node through `ports` only, and returns a `FlowEnding` when
the flow ends there. A step that fails raises (`FlowFailure`, or the driver's, the host's or the API
server's error); `run_flow` turns that into a `failed` ending, and `finish` restores the clients and
tells the node, whatever the ending. So the flow never returns with the state `pending`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import cast

from migops.agent import finish
from migops.agent.backend import GpuError, GpuState
from migops.agent.desired import FlowFailure, desired_on_node, node_models
from migops.agent.host import HostError
from migops.agent.kube import VALIDATOR_APPS, deploy_values_paused
from migops.agent.plan import Desired, GpuPlan, matches, plan_gpu
from migops.agent.ports import AgentPorts
from migops.agent.reasons import AgentEvent
from migops.agent.report import tell
from migops.agent.state import AgentState, DriftPhase, FlowEnding, FlowRun, NodeEvent, NodeReport, RunOutcome
from migops.api import objects
from migops.api.names import STATE_FAILED, STATE_PENDING, STATE_REBOOTING, STATE_SUCCESS
from migops.mig.problems import MigError

log = logging.getLogger(__name__)

Step = Callable[[AgentState, FlowRun, AgentPorts], FlowEnding | None]
DRIVER_OPS = ("destroy_ci", "destroy_gi", "create_gi", "create_ci")


# ------------------------------------------------------------------------------------------ the steps
def validate(state: AgentState, run: FlowRun, ports: AgentPorts) -> FlowEnding | None:
    """1. The config on this node's GPUs, before anything is touched."""
    if run.request.problem:
        raise FlowFailure(run.request.problem)
    run.devices = ports.backend.devices()
    run.models = node_models(run.devices)
    run.desired = desired_on_node(run.request, run.models)
    run.states = [ports.backend.read(d.index) for d in run.devices]
    return None


def skip_applied(state: AgentState, run: FlowRun, ports: AgentPorts) -> FlowEnding | None:
    """2. Every GPU holds the geometry already: success, nothing paused."""
    if all(matches(s, d) for s, d in zip(run.states, run.desired)):
        return FlowEnding(STATE_SUCCESS)
    return None


def plan(state: AgentState, run: FlowRun, ports: AgentPorts) -> FlowEnding | None:
    """The per-GPU diff; a mode change that a reboot did not make take effect is not rebooted for again."""
    run.plans = [plan_gpu(s, d) for s, d in zip(run.states, run.desired)]
    for p in run.plans:
        if p.error:
            raise FlowFailure(p.error)
    if run.mode_change and run.prior == STATE_REBOOTING:
        raise FlowFailure(
            f"MIG mode change did not take effect after rebooting (GPU "
            f"{', '.join(map(str, run.mode_change))}); not rebooting again"
        )
    return None


def refuse_busy(state: AgentState, run: FlowRun, ports: AgentPorts) -> FlowEnding | None:
    """2b. Instances the change must destroy have processes: failed, before anything is paused."""
    _check_busy(run.plans, ports, "nothing was paused")
    return None


def pend(state: AgentState, run: FlowRun, ports: AgentPorts) -> FlowEnding | None:
    """3. `pending`, and the Event that says what changes."""
    doing = "repairing drift from" if state.drift.phase is DriftPhase.REPAIRING else "applying"
    summary = "; ".join(_summary(p) for p in run.plans if p.touches)
    event = NodeEvent(AgentEvent.CONFIG_PENDING, f"{doing} MIG config {run.request.name!r}: {summary}")
    tell(ports, run.node, NodeReport(STATE_PENDING, events=(event,)))
    return None


def pause_clients(state: AgentState, run: FlowRun, ports: AgentPorts) -> FlowEnding | None:
    """4. The GPU clients' deploy labels paused; wait for their pods to go; the validators deleted."""
    run.paused = True
    ports.node.apply(deploy_values_paused({**objects.labels(run.node), **ports.node.labels}))
    ports.node.wait_clients_gone(run.request.clients_namespace, ports.options.pod_timeout, ports.stop)
    ports.node.delete_pods(run.request.clients_namespace, VALIDATOR_APPS)
    return None


def stop_host_units(state: AgentState, run: FlowRun, ports: AgentPorts) -> FlowEnding | None:
    """5. The host's GPU clients (the kubelet too, for a mode change)."""
    options = ports.options
    if not options.host_clients or ports.systemd is None:
        return None
    units = list(options.host_services) + ([options.kubelet_service] if run.mode_change else [])
    run.stopped = ports.systemd.stop(units)
    if run.mode_change and run.stopped and options.mode_change_settle:
        ports.sleep(options.mode_change_settle)
    return None


def change_modes(state: AgentState, run: FlowRun, ports: AgentPorts) -> FlowEnding | None:
    """6. MIG mode on the GPUs whose mode changes: their instances go, the mode is set, they are reset;
    a mode still pending after the reset needs a reboot (`rebooting`), when allowed."""
    if not run.mode_change:
        return None
    for p, d in zip(run.plans, run.desired):
        if not p.mode_change:
            continue
        _execute(run, ports, p, ("destroy_ci", "destroy_gi"))
        log.info("GPU %d: MIG mode -> %s", p.index, "enabled" if d.mig_enabled else "disabled")
        ports.backend.set_mig_mode(p.index, bool(d.mig_enabled))
        run.touched.add(p.index)
        run.steps += 1
    pending = [i for i in run.mode_change if ports.backend.read(i).mode_pending]
    if not pending:
        return None
    log.info("resetting GPU %s for the MIG mode change", ", ".join(map(str, pending)))
    reset_error = ""
    try:
        ports.backend.reset(pending)
        run.steps += 1
    except GpuError as exc:
        reset_error = f": {exc}"
    still = [i for i in pending if ports.backend.read(i).mode_pending]
    return _reboot(run, ports, still, reset_error) if still else None


def apply_diff(state: AgentState, run: FlowRun, ports: AgentPorts) -> FlowEnding | None:
    """7. The diff, GPU by GPU, each planned on the GPU as it is read now."""
    for d in run.desired:
        p = plan_gpu(ports.backend.read(d.index), d)
        if p.error:
            raise FlowFailure(p.error)
        _check_busy([p], ports, "clients were restored")
        _execute(run, ports, p)
    return None


def verify(state: AgentState, run: FlowRun, ports: AgentPorts) -> FlowEnding | None:
    """Every GPU read back and compared with its config."""
    run.states = [ports.backend.read(d.index) for d in run.devices]
    wrong = [
        f"GPU {s.index} is {_describe_state(s)}, expected {_describe_desired(d)}"
        for s, d in zip(run.states, run.desired)
        if not matches(s, d)
    ]
    if wrong:
        raise FlowFailure("verify: " + "; ".join(wrong))
    return FlowEnding(STATE_SUCCESS)


FLOW: tuple[Step, ...] = (
    validate,
    skip_applied,
    plan,
    refuse_busy,
    pend,
    pause_clients,
    stop_host_units,
    change_modes,
    apply_diff,
    verify,
)
FAILURES = (FlowFailure, GpuError, HostError, TimeoutError, InterruptedError, MigError)


def run_flow(state: AgentState, run: FlowRun, ports: AgentPorts, steps: Sequence[Step] = FLOW) -> RunOutcome:
    """`steps` in order until one ends the flow; what failed becomes a `failed` ending. Then `finish`
    restores the clients and tells the node how it ended (the ending it reports may differ: a success
    whose clients could not be restored is a failure)."""
    ending = None
    try:
        for step in steps:
            ending = step(state, run, ports)
            if ending is not None:
                break
    except FAILURES as exc:
        ending = FlowEnding(STATE_FAILED, finish.describe(exc))
    except Exception as exc:  # the API server's refusals and the unexpected: reported, never raised
        if not finish.is_api_error(exc):
            log.exception("unexpected error")
        ending = FlowEnding(STATE_FAILED, finish.describe(exc))
    return finish.finish(state, run, ports, ending or FlowEnding(STATE_FAILED, "the flow ended without a state"))


# ------------------------------------------------------------------------------------------ helpers
def _check_busy(plans: Sequence[GpuPlan], ports: AgentPorts, after: str) -> None:
    busy = [(p.index, i) for p in plans for i in p.busy]
    if busy and not ports.options.destroy_in_use:
        what = "; ".join(f"GPU {g}: {i.profile}@{i.start} (pids {', '.join(map(str, i.pids))})" for g, i in busy)
        raise FlowFailure(
            f"not reconfigured: instances the change must destroy have running processes ({what}); "
            f"{after}. Stop those workloads, or allow it with --destroy-in-use"
        )


def _execute(run: FlowRun, ports: AgentPorts, plan: GpuPlan, ops: tuple[str, ...] = DRIVER_OPS) -> None:
    created: dict[tuple[int, int], int] = {}
    backend = ports.backend
    for step in plan.steps:
        if step.op not in ops:
            continue
        if ports.stop.is_set():
            raise InterruptedError("the agent is stopping")
        log.info("%s", step)
        run.touched.add(step.gpu)
        run.steps += 1
        # plan_gpu sets what each op needs: gi and ci for destroy_ci, gi for destroy_gi, slices for
        # create_ci (gi there only for a GI that stays; else the one create_gi made).
        where = (step.placement.start, step.placement.size)
        if step.op == "destroy_ci":
            backend.destroy_compute_instance(step.gpu, cast(int, step.gi), cast(int, step.ci))
        elif step.op == "destroy_gi":
            backend.destroy_gpu_instance(step.gpu, cast(int, step.gi))
        elif step.op == "create_gi":
            created[where] = backend.create_gpu_instance(step.gpu, step.placement.profile, step.placement.start)
        elif step.op == "create_ci":
            gi = step.gi if step.gi is not None else created[where]
            backend.create_compute_instance(step.gpu, gi, cast(int, step.slices))


def _reboot(run: FlowRun, ports: AgentPorts, still: list[int], reset_error: str) -> FlowEnding:
    """The mode is still pending after the reset: reboot when allowed (`rebooting` told first)."""
    gpus = ", ".join(map(str, still))
    if not ports.options.with_reboot or ports.reboot is None:
        raise FlowFailure(
            f"MIG mode change on GPU {gpus} is pending and the GPU reset failed{reset_error}; "
            "reboot the node, or set WITH_REBOOT=true to let the agent do it"
        )
    event = NodeEvent(AgentEvent.REBOOTING, f"MIG mode change on GPU {gpus} needs a reboot{reset_error}", warning=True)
    try:
        tell(ports, run.node, NodeReport(STATE_REBOOTING, events=(event,)))
    except Exception as exc:
        if not finish.is_api_error(exc):
            raise
        raise FlowFailure(f"could not set state {STATE_REBOOTING} ({finish.describe(exc)}); not rebooting") from None
    log.warning("rebooting the node: MIG mode change on GPU %s is pending%s", gpus, reset_error)
    ports.reboot()
    return FlowEnding(STATE_REBOOTING, f"rebooting for the MIG mode change on GPU {gpus}")


def _summary(plan: GpuPlan) -> str:
    if plan.mode_change:
        return f"GPU {plan.index}: MIG mode change"
    creates = sum(s.op == "create_gi" for s in plan.steps)
    destroys = sum(s.op == "destroy_gi" for s in plan.steps)
    return f"GPU {plan.index}: keep {len(plan.keep)}, destroy {destroys}, create {creates} GPU instances"


def _describe_state(state: GpuState) -> str:
    if not state.mig_enabled:
        return "MIG disabled" + (" (enable pending)" if state.mig_pending else "")
    return "MIG " + (", ".join(f"{i.profile}@{i.start}" for i in state.instances) or "enabled, no instances")


def _describe_desired(desired: Desired) -> str:
    if not desired.mig_enabled:
        return "MIG disabled"
    return "MIG " + (", ".join(f"{p.profile}@{p.start}" for p, _ in desired.instances) or "enabled, no instances")

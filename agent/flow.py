"""One reconfiguration of the node's GPUs: mig-manager's flow (mig-hardware.md 5.3), without its holes.

    validate (invalid: failed, nothing paused) -> already applied? (success, nothing paused)
    -> busy instances the change would destroy? (failed, nothing paused, unless allowed)
    -> pending -> pause GPU clients, wait for their pods -> stop host services
    -> MIG mode change (reset; or rebooting + reboot, with the loop guard)
    -> apply the diff at explicit placements -> verify
    -> restart host services, restore clients -> success

Any failure after `pending`, a timeout included, restores the clients and ends in `failed` with the
reason (label state, annotation, Event); the controller retries with backoff. The flow never returns
with the state `pending`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from kubernetes.client.exceptions import ApiException

from migops.agent.backend import Backend, GpuError, GpuState
from migops.agent.host import KUBELET_SERVICE, HostError, Systemd
from migops.agent.kube import (
    OPERATOR_VALIDATOR_APP,
    VALIDATOR_APPS,
    NodeIO,
    deploy_values_paused,
    deploy_values_restored,
    layout_json,
)
from migops.agent.plan import (
    Desired,
    GpuPlan,
    desired_from_result,
    gfd_advertisement,
    layout_annotation,
    matches,
    plan_gpu,
)
from migops.agent.reasons import AgentEvent
from migops.api import objects
from migops.api.names import (
    APPLIED_ANNOTATION,
    DEVICE_ID_LABEL,
    DIGEST_ANNOTATION,
    DRIFT_ANNOTATION,
    GPUS_ANNOTATION,
    LAYOUT_ANNOTATION,
    REASON_ANNOTATION,
    STATE_FAILED,
    STATE_PENDING,
    STATE_REBOOTING,
    STATE_SUCCESS,
)
from migops.mig.catalogue import GpuModel, catalogue
from migops.mig.devices import DeviceIdSyntaxError, parse_device_id
from migops.mig.fit import NodeGpus, fit
from migops.mig.problems import MigError
from migops.mig.spec import MigPartedConfig
from migops.mig.strategy import Strategy

if TYPE_CHECKING:  # the DRA check (the CEL runtime) is imported only by agents started with --dra
    from migops.agent.dra import DraSlices

log = logging.getLogger(__name__)
MAX_REASON = 1000  # annotation values may be long; keep the reason readable


@dataclass(frozen=True)
class Options:
    pod_timeout: float = 300.0  # mig-manager's 5 minutes per selector
    with_reboot: bool = False  # WITH_REBOOT
    host_clients: bool = False  # WITH_SHUTDOWN_HOST_GPU_CLIENTS
    host_services: tuple[str, ...] = ()  # the gpu-clients file's systemd-services
    kubelet_service: str = KUBELET_SERVICE
    mode_change_settle: float = 30.0  # mig-manager sleeps 30 s after stopping host clients for a mode change
    destroy_in_use: bool = False  # go ahead when instances that must go have processes (the driver may refuse)
    publish_gfd: bool = False  # publish GFD labels and extended resources (simulated GPUs: no GFD runs)


@dataclass(frozen=True)
class Request:
    """What to apply: the label's config name, the parsed file (or why there is none)."""

    name: str
    config: MigPartedConfig | None
    problem: str | None  # the ConfigMap is missing, unreadable, or does not parse
    strategy: Strategy
    clients_namespace: str
    prior_state: str | None  # the state label before this run (the reboot-loop guard reads it)
    repair: bool = False  # a repair of drift (agent/drift.py): the same flow, told as a repair

    @property
    def digest(self) -> str | None:
        if self.config is None:
            return None
        try:
            return self.config.digest(self.name)
        except KeyError:
            return None


@dataclass(frozen=True)
class Outcome:
    state: str  # success | failed | rebooting | pending (the node was given another config meanwhile)
    reason: str = ""
    paused: bool = False  # were GPU clients paused on the way
    touched: tuple[int, ...] = ()  # GPUs that saw a driver call that changes them
    steps: int = 0  # driver calls that changed something


class Failure(Exception):
    """Ends the flow in `failed` with this reason."""


@dataclass
class _Run:
    request: Request
    node: dict[str, Any]
    paused: bool = False
    stopped: list[str] = field(default_factory=list)
    touched: set[int] = field(default_factory=set)
    steps: int = 0


def desired_on_node(request: Request, models: Sequence[GpuModel]) -> list[Desired]:
    """Step 1: the config validated on this node's GPUs, as what each GPU should become. Raises Failure."""
    if request.problem:
        raise Failure(request.problem)
    assert request.config is not None
    try:
        request.config.select(request.name)
    except MigError as exc:
        raise Failure(f"config {request.name!r}: {exc.problems[0].message}") from None
    # The same question the webhook, the reconciler and `migops validate` ask (migops.mig.fit): this
    # node's GPUs plus the errors of the text itself, so the agent never applies what they refuse.
    report = fit(request.config, request.name, NodeGpus(tuple(models), exact=True)).report
    if not report.valid:
        errors = "; ".join(str(p) for p in report.errors)
        raise Failure(f"config {request.name!r} is invalid on this node's GPUs: {errors}")
    return [desired_from_result(r) for r in report.gpus]


def node_models(devices: Sequence[Any]) -> list[GpuModel]:
    """The node's GPUs as catalogue models (index order). An NVIDIA device ID the catalogue does not list
    as MIG-capable is a GPU that cannot do MIG (a DGX Station's display GPU): configs may cover it with
    `mig-enabled: false`, and the validator refuses `mig-enabled: true` on it."""
    cat = catalogue()
    models = []
    for d in devices:
        try:
            models.append(cat.model(parse_device_id(d.device_id)))
        except DeviceIdSyntaxError:
            raise Failure(f"GPU {d.index} reports PCI device ID {d.device_id!r}, which is not one") from None
    return models


class Reconfigure:
    def __init__(
        self,
        backend: Backend,
        kube: NodeIO,
        *,
        options: Options = Options(),
        systemd: Systemd | None = None,
        reboot: Callable[[], None] | None = None,
        stop: threading.Event | None = None,
        sleep: Callable[[float], None] = time.sleep,
        dra: DraSlices | None = None,
    ) -> None:
        self.backend = backend
        self.dra = dra  # DRA (static MIG): the driver's ResourceSlices must follow the geometry
        self.kube = kube
        self.options = options
        self.systemd = systemd
        self._reboot = reboot
        self.stop = stop or threading.Event()
        self._sleep = sleep

    # ------------------------------------------------------------------------------ entry
    def publish_inventory(self) -> None:
        """The node's GPUs (`migops.io/gpus`, `migops.io/gpu.device-id`), from the driver, at start:
        the webhook and the reconciler validate configs on exactly these GPUs, before any config runs."""
        models = node_models(self.backend.devices())
        if models:
            self.kube.apply(
                {DEVICE_ID_LABEL: models[0].device_id}, {GPUS_ANNOTATION: ",".join(m.device_id for m in models)}
            )

    def run(self, request: Request, node: dict[str, Any]) -> Outcome:
        run = _Run(request, node)
        try:
            return self._run(run)
        except (Failure, GpuError, HostError, ApiException, TimeoutError, InterruptedError, MigError) as exc:
            return self._fail(run, _describe(exc))
        except Exception as exc:
            log.exception("unexpected error")
            return self._fail(run, f"internal error: {type(exc).__name__}: {exc}")

    def _run(self, run: _Run) -> Outcome:
        request = run.request
        # 1. Validate before touching anything.
        if request.problem:
            raise Failure(request.problem)
        devices = self.backend.devices()
        models = node_models(devices)
        desired = desired_on_node(request, models)
        states = [self.backend.read(d.index) for d in devices]
        # 2. Already applied: success, nothing paused.
        if all(matches(s, d) for s, d in zip(states, desired)):
            return self._succeed(run, models, states)
        plans = [plan_gpu(s, d) for s, d in zip(states, desired)]
        for p in plans:
            if p.error:
                raise Failure(p.error)
        mode_change = [p.index for p in plans if p.mode_change]
        if mode_change and request.prior_state == STATE_REBOOTING:
            raise Failure(
                f"MIG mode change did not take effect after rebooting (GPU "
                f"{', '.join(map(str, mode_change))}); not rebooting again"
            )
        self._check_busy(plans, "nothing was paused")
        # 3. pending, 4. pause the GPU clients and wait for their pods to go.
        self.kube.set_state(STATE_PENDING)
        doing = "repairing drift from" if request.repair else "applying"
        self.kube.event(
            run.node,
            AgentEvent.CONFIG_PENDING,
            f"{doing} MIG config {request.name!r}: " + "; ".join(_summary(p) for p in plans if p.touches),
        )
        labels = objects.labels(run.node)
        run.paused = True
        self.kube.apply(deploy_values_paused({**labels, **self.kube.labels}))
        self.kube.wait_clients_gone(request.clients_namespace, self.options.pod_timeout, self.stop)
        self.kube.delete_pods(request.clients_namespace, VALIDATOR_APPS)
        # 5. Host GPU clients (the kubelet too, for a mode change).
        if self.options.host_clients and self.systemd is not None:
            units = list(self.options.host_services) + ([self.options.kubelet_service] if mode_change else [])
            run.stopped = self.systemd.stop(units)
            if mode_change and run.stopped and self.options.mode_change_settle:
                self._sleep(self.options.mode_change_settle)
        # 6. MIG mode.
        if mode_change:
            outcome = self._change_modes(run, plans, desired)
            if outcome is not None:
                return outcome
        # 7. Apply the diff, GPU by GPU, then verify.
        for d in desired:
            plan = plan_gpu(self.backend.read(d.index), d)
            if plan.error:
                raise Failure(plan.error)
            self._check_busy([plan], "clients were restored")
            self._execute(run, plan)
        states = [self.backend.read(d.index) for d in devices]
        wrong = [
            f"GPU {s.index} is {_describe_state(s)}, expected {_describe_desired(d)}"
            for s, d in zip(states, desired)
            if not matches(s, d)
        ]
        if wrong:
            raise Failure("verify: " + "; ".join(wrong))
        # 8. Restart what was stopped, restore the clients, success.
        return self._succeed(run, models, states)

    # ------------------------------------------------------------------------------ steps
    def _check_busy(self, plans: Sequence[GpuPlan], after: str) -> None:
        busy = [(p.index, i) for p in plans for i in p.busy]
        if busy and not self.options.destroy_in_use:
            what = "; ".join(f"GPU {g}: {i.profile}@{i.start} (pids {', '.join(map(str, i.pids))})" for g, i in busy)
            raise Failure(
                f"not reconfigured: instances the change must destroy have running processes ({what}); "
                f"{after}. Stop those workloads, or allow it with --destroy-in-use"
            )

    def _execute(
        self, run: _Run, plan: GpuPlan, ops: tuple[str, ...] = ("destroy_ci", "destroy_gi", "create_gi", "create_ci")
    ) -> None:
        created: dict[tuple[int, int], int] = {}
        for step in plan.steps:
            if step.op not in ops:
                continue
            if self.stop.is_set():
                raise InterruptedError("the agent is stopping")
            log.info("%s", step)
            run.touched.add(step.gpu)
            run.steps += 1
            # plan_gpu sets what each op needs: gi and ci for destroy_ci, gi for destroy_gi, slices for
            # create_ci (gi there only for a GI that stays; else the one create_gi made).
            if step.op == "destroy_ci":
                self.backend.destroy_compute_instance(step.gpu, cast(int, step.gi), cast(int, step.ci))
            elif step.op == "destroy_gi":
                self.backend.destroy_gpu_instance(step.gpu, cast(int, step.gi))
            elif step.op == "create_gi":
                created[(step.placement.start, step.placement.size)] = self.backend.create_gpu_instance(
                    step.gpu, step.placement.profile, step.placement.start
                )
            elif step.op == "create_ci":
                gi = step.gi if step.gi is not None else created[(step.placement.start, step.placement.size)]
                self.backend.create_compute_instance(step.gpu, gi, cast(int, step.slices))

    def _change_modes(self, run: _Run, plans: Sequence[GpuPlan], desired: Sequence[Desired]) -> Outcome | None:
        changing = [p for p in plans if p.mode_change]
        for p in changing:
            self._execute(run, p, ("destroy_ci", "destroy_gi"))
            log.info("GPU %d: MIG mode -> %s", p.index, "enabled" if desired[p.index].mig_enabled else "disabled")
            self.backend.set_mig_mode(p.index, bool(desired[p.index].mig_enabled))
            run.touched.add(p.index)
            run.steps += 1
        pending = [p.index for p in changing if self.backend.read(p.index).mode_pending]
        if not pending:
            return None
        reset_error = ""
        log.info("resetting GPU %s for the MIG mode change", ", ".join(map(str, pending)))
        try:
            self.backend.reset(pending)
            run.steps += 1
        except GpuError as exc:
            reset_error = f": {exc}"
        still = [i for i in pending if self.backend.read(i).mode_pending]
        if not still:
            return None
        gpus = ", ".join(map(str, still))
        if not self.options.with_reboot or self._reboot is None:
            raise Failure(
                f"MIG mode change on GPU {gpus} is pending and the GPU reset failed{reset_error}; "
                "reboot the node, or set WITH_REBOOT=true to let the agent do it"
            )
        try:
            self.kube.set_state(STATE_REBOOTING)
        except ApiException as exc:
            raise Failure(f"could not set state {STATE_REBOOTING} ({_describe(exc)}); not rebooting") from None
        self.kube.event(
            run.node, AgentEvent.REBOOTING, f"MIG mode change on GPU {gpus} needs a reboot{reset_error}", warning=True
        )
        log.warning("rebooting the node: MIG mode change on GPU %s is pending%s", gpus, reset_error)
        self._reboot()
        return Outcome(
            STATE_REBOOTING,
            f"rebooting for the MIG mode change on GPU {gpus}",
            run.paused,
            tuple(sorted(run.touched)),
            run.steps,
        )

    # ------------------------------------------------------------------------------ endings
    def _restore(self, run: _Run) -> list[str]:
        """Start stopped host services and unpause the clients; what went wrong, as text."""
        problems = []
        if self.systemd is not None and self.systemd.pending():
            try:
                self.systemd.start()
            except HostError as exc:
                problems.append(f"restarting host services: {exc}")
        labels = objects.labels(run.node)
        restore = deploy_values_restored({**labels, **self.kube.labels})
        if restore:
            try:
                self.kube.apply(restore)
            except ApiException as exc:
                problems.append(f"restoring the deploy labels: {_describe(exc)}")
        return problems

    def _publish(self, run: _Run, models: Sequence[GpuModel], states: Sequence[GpuState]) -> dict[str, str]:
        return self.publish(run.node, run.request.strategy, models, states)

    def publish(
        self, node: dict[str, Any], strategy: Strategy, models: Sequence[GpuModel], states: Sequence[GpuState]
    ) -> dict[str, str]:
        """GFD labels and resources (simulated GPUs) for the instances that exist now; returns the layout
        annotations for the caller's next state write."""
        annotations = {
            LAYOUT_ANNOTATION: layout_json(layout_annotation(models, states)),
            GPUS_ANNOTATION: ",".join(m.device_id for m in models),
        }
        if self.options.publish_gfd:
            ad = gfd_advertisement(models, states, strategy)
            self.kube.publish_gfd(node, ad.labels, ad.resources)
        else:
            self.kube.apply({DEVICE_ID_LABEL: models[0].device_id} if models else {})
        return annotations

    def _succeed(self, run: _Run, models: Sequence[GpuModel], states: Sequence[GpuState]) -> Outcome:
        problems = self._restore(run)
        if run.paused:
            try:
                self.kube.delete_pods(run.request.clients_namespace, (OPERATOR_VALIDATOR_APP,))
            except ApiException as exc:  # best effort: mig-manager's early return here wedged nodes
                log.warning("could not restart the operator validator: %s", _describe(exc))
        if problems:
            return self._fail(run, "applied, but " + "; ".join(problems))
        if self.dra is not None:
            # The kubelet plugin is restarted only when the GPUs changed; otherwise its slices are checked.
            mismatch = self.dra.after_apply(self.backend.devices(), models, states, changed=bool(run.touched))
            if mismatch:
                return self._fail(run, "applied, but " + mismatch)
        annotations: dict[str, str | None] = {  # None: remove the annotation
            **self._publish(run, models, states),
            APPLIED_ANNOTATION: run.request.name,
            DIGEST_ANNOTATION: run.request.digest or "",
            REASON_ANNOTATION: None,
            DRIFT_ANNOTATION: None,
        }
        try:
            self.kube.set_state(STATE_SUCCESS, annotations)
        except ApiException as exc:
            label = self.kube.config_label() if exc.status in (403, 422) else run.request.name
            if label == run.request.name:
                raise
            # The node was given another config while this one was applied: the own-node policy refuses
            # an applied config and digest the node's label no longer names. The new one is pending; the
            # next step runs it at once (the label change woke the loop).
            log.info("MIG config %r applied, but the node is now labelled %r: pending", run.request.name, label)
            self.kube.set_state(
                STATE_PENDING,
                {k: v for k, v in annotations.items() if k not in (APPLIED_ANNOTATION, DIGEST_ANNOTATION)},
            )
            return Outcome(
                STATE_PENDING,
                f"the node's config changed to {label!r}",
                run.paused,
                tuple(sorted(run.touched)),
                run.steps,
            )
        if run.steps or run.paused:
            self.kube.event(
                run.node,
                AgentEvent.CONFIG_APPLIED,
                f"MIG config {run.request.name!r} applied ({run.steps} driver calls on GPU "
                f"{', '.join(map(str, sorted(run.touched))) or '-'})",
            )
        return Outcome(STATE_SUCCESS, "", run.paused, tuple(sorted(run.touched)), run.steps)

    def _fail(self, run: _Run, reason: str) -> Outcome:
        log.error("MIG config %r failed: %s", run.request.name, reason)
        problems = self._restore(run)
        if problems:
            reason += " (and " + "; ".join(problems) + ")"
        annotations: dict[str, str | None] = {REASON_ANNOTATION: clip(reason)}
        try:
            devices = self.backend.devices()
            models = node_models(devices)
            states = [self.backend.read(d.index) for d in devices]
            annotations.update(self._publish(run, models, states))
        except (Failure, GpuError, ApiException) as exc:
            log.warning("could not read the GPUs after the failure: %s", _describe(exc))
        try:
            self.kube.set_state(STATE_FAILED, annotations)
        except ApiException as exc:
            log.error("could not set state failed: %s", _describe(exc))
        self.kube.event(run.node, AgentEvent.CONFIG_FAILED, f"MIG config {run.request.name!r}: {reason}", warning=True)
        return Outcome(STATE_FAILED, reason, run.paused, tuple(sorted(run.touched)), run.steps)


def clip(text: str) -> str:
    return text if len(text) <= MAX_REASON else text[: MAX_REASON - 3] + "..."


def _describe(exc: BaseException) -> str:
    if isinstance(exc, ApiException):
        return f"API server: HTTP {exc.status} {exc.reason}"
    if isinstance(exc, InterruptedError):
        return f"interrupted: {exc}"
    return str(exc)


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

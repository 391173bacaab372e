"""The agent's loop: watch this Node, the ClusterPolicy and the MIG ConfigMap; run the flow when the
node's config (name, content as this node sees it, or MIG strategy) changes; retry a failure with
exponential backoff, whatever the labels do; check an applied config against the GPUs every
`--drift-interval` and report or repair what changed out of band (agent/drift.py, docs/agent.md).

A change while a run is in progress is seen when it ends (as in mig-manager); a burst of changes
collapses to the latest. Own writes wake the loop too, and are recognised as nothing new.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from migops.agent.backend import Backend, GpuError
from migops.agent.drift import Check, DriftOptions, DriftWatch
from migops.agent.flow import Failure, Outcome, Reconfigure, Request, clip
from migops.agent.kube import NodeIO, layout_json
from migops.agent.metrics import AgentMetrics
from migops.agent.plan import layout_annotation
from migops.agent.reasons import AgentEvent
from migops.api.names import (
    CONFIGMAP_KEY,
    DRIFT_ANNOTATION,
    LAYOUT_ANNOTATION,
    REASON_ANNOTATION,
    STATE_FAILED,
    STATE_REBOOTING,
    STATE_SUCCESS,
)
from migops.api.objects import DEFAULT_STRATEGY, MigSettings, NodeFacts, settings_from_policies
from migops.kube import clusterpolicy, owners
from migops.kube.informer import Informer
from migops.mig.problems import MigError
from migops.mig.spec import MigPartedConfig, parse_config
from migops.mig.strategy import Strategy

log = logging.getLogger(__name__)
NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"


@dataclass(frozen=True)
class Overrides:
    """Settings given on the command line win over the ClusterPolicy's."""

    config_map: tuple[str, str] | None = None  # (namespace, name)
    strategy: Strategy | None = None
    clients_namespace: str | None = None


@dataclass(frozen=True)
class Retry:
    base: float = 10.0
    cap: float = 600.0
    jitter: float = 0.1

    def delay(self, failures: int) -> float:
        value = min(self.cap, self.base * 2 ** max(failures - 1, 0))
        return value * (1 + random.uniform(-self.jitter, self.jitter))


class IdentityError(RuntimeError):
    """The credentials are bound to another node than the one this agent was told to manage."""


def check_identity(api: k8s.ApiClient, node: str) -> str | None:
    """The node this agent's token is bound to (pod-bound service-account tokens carry it), or None.
    A token bound to another node is refused: the agent writes its own Node only."""
    try:
        review = k8s.AuthenticationV1Api(api).create_self_subject_review(
            {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
        )
    except ApiException as exc:
        log.warning("could not review the agent's own identity: HTTP %s", exc.status)
        return None
    extra = (review.status.user_info.extra or {}) if review.status and review.status.user_info else {}
    bound = (extra.get(NODE_NAME_EXTRA) or [None])[0]
    if bound is not None and bound != node:
        raise IdentityError(
            f"this agent's credentials are bound to node {bound!r}, not {node!r}: an agent "
            "manages only the node its pod runs on"
        )
    return bound


class Agent:
    def __init__(
        self,
        api: k8s.ApiClient,
        node: str,
        backend: Backend,
        flow: Reconfigure,
        kube: NodeIO,
        *,
        overrides: Overrides = Overrides(),
        retry: Retry = Retry(),
        drift: DriftOptions = DriftOptions(),
        metrics: AgentMetrics | None = None,
        simulated_reboot: Callable[[], None] | None = None,
        crd_recheck: float = 10.0,
    ) -> None:
        self.api = api
        self.node_name = node
        self.backend = backend
        self.flow = flow
        self.kube = kube
        self.overrides = overrides
        self.retry = retry
        self.drift = DriftWatch(drift)
        self.metrics = metrics or AgentMetrics()
        self.crd_recheck = crd_recheck  # how often an absent ClusterPolicy CRD is looked for again
        self._simulated_reboot = simulated_reboot
        self.stop = flow.stop
        self.wake = threading.Event()
        self.core = k8s.CoreV1Api(api)
        self.nodes: Informer | None = None
        self.policies: Informer | None = None
        self.configmaps: Informer | None = None
        self._cm_key: tuple[str, str] | None = None
        self._parsed: tuple[str | None, MigPartedConfig | None, str | None] = (None, None, None)
        self.last_key: tuple | None = None
        self.last: Outcome | None = None
        self.failures = 0
        self.next_retry = 0.0
        self.last_run = 0.0
        self.runs = 0

    # ------------------------------------------------------------------------------ watches
    def _wakeup(self, kind: str, obj: dict) -> None:
        self.wake.set()

    def start_watches(self) -> None:
        self.nodes = Informer(
            self.core.list_node,
            name=f"node-{self.node_name}",
            handler=self._wakeup,
            field_selector=f"metadata.name={self.node_name}",
        ).start()
        # Optional CRD: absent (no GPU Operator yet) counts as no ClusterPolicy, the GPU Operator's defaults
        # apply, and the informer looks again every `crd_recheck` s, so one installed later is picked up.
        self.policies = clusterpolicy.informer(self.api, handler=self._wakeup, backoff=(0.2, self.crd_recheck)).start()
        self.kube.start_pod_watch()

    def shutdown(self) -> None:
        """Stop soon (a signal handler calls it): a run in progress restores the clients and ends."""
        self.stop.set()
        self.wake.set()

    def stop_watches(self) -> None:
        for inf in (self.nodes, self.policies, self.configmaps, self.kube.pods):
            if inf is not None:
                inf.stop()

    def settings(self) -> MigSettings:
        policies = self.policies.items().values() if self.policies is not None else ()
        s = settings_from_policies(policies)
        if self.overrides.config_map:
            s = replace(s, namespace=self.overrides.config_map[0], config_name=self.overrides.config_map[1])
        if self.overrides.strategy:
            s = replace(s, strategy=self.overrides.strategy)
        return s

    def _configmap(self, namespace: str, name: str) -> Informer:
        if self._cm_key != (namespace, name):
            if self.configmaps is not None:
                self.configmaps.stop()
            self.configmaps = Informer(
                self.core.list_namespaced_config_map,
                namespace,
                name=f"configmap-{name}",
                handler=self._wakeup,
                field_selector=f"metadata.name={name}",
            ).start()
            self._cm_key = (namespace, name)
        assert self.configmaps is not None
        return self.configmaps

    # ------------------------------------------------------------------------------ what to do
    def request(self, node: dict[str, Any], prior_state: str | None = None) -> Request | None:
        facts = NodeFacts.from_obj(node, offers=False)
        name = facts.config
        if not name:
            return None
        if self.policies is not None:
            self.policies.wait_synced(10)
        s = self.settings()
        clients_ns = self.overrides.clients_namespace or s.namespace
        cms = self._configmap(s.namespace, s.config_name)
        problem, config = None, None
        where = f"ConfigMap {s.namespace}/{s.config_name}"
        if not cms.wait_synced(10):
            problem = f"could not read {where}: {cms.last_error or 'no answer'}"
        else:
            cm = cms.get(f"{s.namespace}/{s.config_name}")
            if cm is None:
                problem = f"{where} not found (named by the ClusterPolicy's migManager.config.name)"
            else:
                text = (cm.get("data") or {}).get(CONFIGMAP_KEY)
                if text is None:
                    problem = f"{where} has no key {CONFIGMAP_KEY!r}"
                else:
                    config, problem = self._parse(text, where)
        dynamic = owners.node_owner(node)
        if dynamic is not None:  # checked last, so it is the reason reported whatever else is wrong
            config = None  # no digest: the request's key is this problem, so becoming owned is seen at once
            problem = (
                f"this node's MIG geometry is owned by {dynamic} ({owners.ENV}), which creates and destroys "
                "instances itself: the agent does not reconfigure here"
            )
        return Request(
            name,
            config,
            problem,
            # A value the ClusterPolicy CRD's enum forbids reads as the CRD's default.
            s.strategy or DEFAULT_STRATEGY,
            clients_ns,
            prior_state if prior_state is not None else facts.state,
        )

    def _parse(self, text: str, where: str) -> tuple[MigPartedConfig | None, str | None]:
        if self._parsed[0] != text:
            try:
                self._parsed = (text, parse_config(text), None)
            except MigError as exc:
                self._parsed = (text, None, f"{where}: the MIG config does not parse: {exc}")
        return self._parsed[1], self._parsed[2]

    @staticmethod
    def key(request: Request) -> tuple:
        return (request.name, request.digest or request.problem, request.strategy)

    # ------------------------------------------------------------------------------ the loop
    def step(self, prior_state: str | None = None) -> Outcome | None:
        """Look once and run the flow (or a drift check) if it is due; None when there was nothing to do."""
        assert self.nodes is not None
        node = self.nodes.get(self.node_name)
        if node is None:
            return None
        request = self.request(node, prior_state)
        if request is None:
            self.last_key, self.last = None, None
            return None
        key = self.key(request)
        if key != self.last_key or self.last is None:
            first = self.last is None
            self.failures = 0
            self.drift.reset()
            if (
                first
                and self.drift.options.enabled
                and prior_state != STATE_REBOOTING
                and NodeFacts.from_obj(node, offers=False).state != STATE_REBOOTING
                and _applied_before(node, request)
            ):
                # Agent start with this config applied before: what differs now changed out of band.
                outcome = self._check_drift(request, node, key, at_start=True)
                if outcome is not None:
                    return outcome  # else the flow runs: it also restores what a killed agent paused
            elif DRIFT_ANNOTATION in self.kube.annotations:
                self.kube.apply(annotations={DRIFT_ANNOTATION: None})  # drift from a config being replaced
            return self._run_flow(request, node, key)
        if prior_state == STATE_REBOOTING:
            return self._run_flow(request, node, key)
        assert self.last is not None
        if self.last.state == STATE_FAILED and not self.drift.holding:
            return self._run_flow(request, node, key) if time.monotonic() >= self.next_retry else None
        if self.drift.due():
            return self._check_drift(request, node, key)
        return None

    def _run_flow(self, request: Request, node: dict[str, Any], key: tuple) -> Outcome:
        if self.drift.repairing:
            request = replace(request, repair=True)
        self.last_run = time.monotonic()
        self.runs += 1
        outcome = self.flow.run(request, node)
        self.last_key, self.last = key, outcome
        self.drift.holding = False
        if outcome.state == STATE_FAILED:
            self.failures += 1
            delay = self.retry.delay(self.failures)
            self.next_retry = time.monotonic() + delay
            log.warning(
                "MIG config %r failed (attempt %d); retrying in %.1fs: %s",
                request.name,
                self.failures,
                delay,
                outcome.reason,
            )
        else:
            self.failures = 0
            log.info("MIG config %r: %s", request.name, outcome.state)
        if request.repair:
            self.metrics.repairs.labels(outcome.state).inc()
        if outcome.state == STATE_SUCCESS:
            self.drift.schedule()
            self.drift.reported = ""
            self.metrics.drifted.set(0)
            if self.drift.repairing:
                self.drift.repairing = False
                self.kube.event(
                    node,
                    AgentEvent.DRIFT_REPAIRED,
                    f"the GPUs match MIG config {request.name!r} again: "
                    f"{outcome.steps} driver calls on GPU {', '.join(map(str, outcome.touched)) or '-'}",
                )
        return outcome

    def _check_drift(
        self, request: Request, node: dict[str, Any], key: tuple, *, at_start: bool = False
    ) -> Outcome | None:
        """Read the GPUs and compare them with the applied config; report, repair or hold. None: nothing
        to do (no drift, or the same drift still held or reported; at start, no drift)."""
        try:
            return self._drift_step(request, node, key, at_start)
        except ApiException as exc:
            # Written next time: the drift counts as unreported and the layout as unpublished.
            log.warning("drift check: could not write the Node: HTTP %s %s", exc.status, exc.reason)
            self.drift.reported = ""
            self.kube.annotations.pop(LAYOUT_ANNOTATION, None)
            return None

    def _drift_step(self, request: Request, node: dict[str, Any], key: tuple, at_start: bool) -> Outcome | None:
        d, m = self.drift, self.metrics
        d.schedule()
        try:
            check = d.check(self.backend, request, key)
        except (GpuError, Failure) as exc:
            log.warning("drift check: %s", exc)
            return None
        m.checks.inc()
        m.check_seconds.observe(check.seconds)
        m.drifted.set(len(check.drifts))
        # Labels and allocatable follow the instances that exist, from the moment a difference is seen.
        layout = {}
        if _layout(check) != self.kube.annotations.get(LAYOUT_ANNOTATION):
            layout = self.flow.publish(node, request.strategy, check.models, check.states)
        if not check.drifts:
            if at_start:
                return None
            if d.reported or d.holding or DRIFT_ANNOTATION in self.kube.annotations:
                log.info("the GPUs match MIG config %r again", request.name)
                d.reported, d.holding, d.repairing = "", False, False
                self.kube.set_state(STATE_SUCCESS, {**layout, DRIFT_ANNOTATION: None, REASON_ANNOTATION: None})
                self.kube.event(
                    node,
                    AgentEvent.DRIFT_RESOLVED,
                    f"the GPUs match MIG config {request.name!r} again (changed back out of band)",
                )
                self.last_key, self.last = key, Outcome(STATE_SUCCESS)
                return self.last
            if layout:
                self.kube.apply(annotations=layout)
            return None
        text = check.text
        new = text != d.reported
        if new:
            d.reported = text
            for g in check.drifts:
                m.detected.labels(str(g.index)).inc()
            log.warning("drift: the GPUs differ from MIG config %r: %s", request.name, text)
            self.kube.event(
                node,
                AgentEvent.DRIFT_DETECTED,
                f"the GPUs differ from MIG config {request.name!r} (changed "
                f"out of band): {text}; "
                + ("repairing" if d.options.policy == "repair" else "not repaired (--drift=report)"),
                warning=True,
            )
        notes = {**layout, DRIFT_ANNOTATION: clip(text)}
        if d.options.policy == "report":
            if new or layout or not d.holding:
                reason = (
                    f"MIG config {request.name!r}: the GPUs differ from the applied config ({text}); "
                    "not repaired (--drift=report)"
                )
                self.kube.set_state(STATE_FAILED, {**notes, REASON_ANNOTATION: clip(reason)})
                if new:
                    m.repairs.labels("report").inc()
                d.holding = True
                self.last_key, self.last = key, Outcome(STATE_FAILED, reason)
                return self.last
            return None
        if d.holding and d.now() < d.held_until:
            if new or layout:
                self.kube.apply(annotations=notes)
            return None
        if d.repairs_left() <= 0:
            wait = d.hold()
            reason = (
                f"MIG config {request.name!r}: the GPUs were changed out of band again after "
                f"{d.options.max_repairs} repairs in the last {d.options.window:g}s ({text}); not repairing "
                f"for {wait:.0f}s (drift backoff)"
            )
            log.warning("%s", reason)
            self.kube.set_state(STATE_FAILED, {**notes, REASON_ANNOTATION: clip(reason)})
            self.kube.event(node, AgentEvent.DRIFT_REPAIR_HELD, reason, warning=True)
            m.repairs.labels("held").inc()
            self.last_key, self.last = key, Outcome(STATE_FAILED, reason)
            return self.last
        d.repairs.append(d.now())
        d.repairing = True
        self.kube.apply(annotations=notes)
        return self._run_flow(request, node, key)

    def _idle_timeout(self) -> float:
        """Until the next retry or drift check (60 s at most: a missed wake-up costs no more)."""
        if self.last is None:
            return 60.0
        if self.last.state == STATE_FAILED and not self.drift.holding:
            return min(max(self.next_retry - time.monotonic(), 0.0), 60.0)
        if self.drift.options.enabled:
            return min(max(self.drift.next_check - time.monotonic(), 0.0), 60.0)
        return 60.0

    def run(self) -> None:
        self.start_watches()
        try:
            assert self.nodes is not None
            while not self.stop.is_set() and not self.nodes.wait_synced(1.0):
                pass
            try:
                self.flow.publish_inventory()
            except Exception as exc:  # noqa: BLE001 - reported again by the first run if it persists
                log.warning("could not publish the node's GPUs: %s", exc)
            prior: str | None = None
            while not self.stop.is_set():
                self.wake.clear()
                outcome = self.step(prior)
                prior = None
                if outcome is not None and outcome.state == STATE_REBOOTING:
                    if self._simulated_reboot is None:
                        log.warning("waiting for the node to reboot")
                        self.stop.wait()
                        break
                    self._simulated_reboot()
                    prior = STATE_REBOOTING  # as a restarted agent reads it from the label
                    continue
                self.wake.wait(self._idle_timeout())
        finally:
            self.stop_watches()


def _layout(check: Check) -> str:
    return layout_json(layout_annotation(check.models, check.states))


def _applied_before(node: dict[str, Any], request: Request) -> bool:
    """The Node says this very config (name and content) was applied: the GPUs should hold it."""
    facts = NodeFacts.from_obj(node, offers=False)
    return request.digest is not None and facts.applied == request.name and facts.digest == request.digest

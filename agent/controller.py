"""The agent's loop: watch this Node, the ClusterPolicy and the MIG ConfigMap; run the flow when the
node's config (name, content as this node sees it, or MIG strategy) changes; retry a failure with
exponential backoff, whatever the labels do.

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

from migops.agent.backend import Backend
from migops.agent.flow import Outcome, Reconfigure, Request
from migops.agent.kube import NodeIO
from migops.kube import clusterpolicy
from migops.kube.clusterpolicy import MigSettings, settings_from_policies
from migops.kube.informer import Informer
from migops.kube.names import (CONFIGMAP_KEY, MIG_CONFIG_LABEL, MIG_CONFIG_STATE_LABEL, STATE_FAILED,
                               STATE_REBOOTING, STATE_SUCCESS)
from migops.mig.problems import MigError
from migops.mig.spec import MigPartedConfig, parse_config

log = logging.getLogger(__name__)
NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"


@dataclass(frozen=True)
class Overrides:
    """Settings given on the command line win over the ClusterPolicy's."""

    config_map: tuple[str, str] | None = None  # (namespace, name)
    strategy: str | None = None
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
            {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
    except ApiException as exc:
        log.warning("could not review the agent's own identity: HTTP %s", exc.status)
        return None
    extra = (review.status.user_info.extra or {}) if review.status and review.status.user_info else {}
    bound = (extra.get(NODE_NAME_EXTRA) or [None])[0]
    if bound is not None and bound != node:
        raise IdentityError(f"this agent's credentials are bound to node {bound!r}, not {node!r}: an agent "
                            "manages only the node its pod runs on")
    return bound


class Agent:
    def __init__(self, api: k8s.ApiClient, node: str, backend: Backend, flow: Reconfigure, kube: NodeIO, *,
                 overrides: Overrides = Overrides(), retry: Retry = Retry(), resync: float = 0.0,
                 simulated_reboot: Callable[[], None] | None = None) -> None:
        self.api = api
        self.node_name = node
        self.backend = backend
        self.flow = flow
        self.kube = kube
        self.overrides = overrides
        self.retry = retry
        self.resync = resync
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
        self.nodes = Informer(self.core.list_node, name=f"node-{self.node_name}", handler=self._wakeup,
                              field_selector=f"metadata.name={self.node_name}").start()
        objects = k8s.CustomObjectsApi(self.api)
        try:
            objects.list_cluster_custom_object(clusterpolicy.GROUP, clusterpolicy.VERSION, clusterpolicy.PLURAL,
                                               limit=1)
            self.policies = Informer(objects.list_cluster_custom_object, clusterpolicy.GROUP, clusterpolicy.VERSION,
                                     clusterpolicy.PLURAL, name="clusterpolicies", handler=self._wakeup).start()
        except ApiException as exc:
            if exc.status != 404:
                raise
            log.info("no ClusterPolicy CRD in this cluster: the GPU Operator's defaults apply")
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
            self.configmaps = Informer(self.core.list_namespaced_config_map, namespace, name=f"configmap-{name}",
                                       handler=self._wakeup, field_selector=f"metadata.name={name}").start()
            self._cm_key = (namespace, name)
        assert self.configmaps is not None
        return self.configmaps

    # ------------------------------------------------------------------------------ what to do
    def request(self, node: dict[str, Any], prior_state: str | None = None) -> Request | None:
        labels = (node.get("metadata") or {}).get("labels") or {}
        name = labels.get(MIG_CONFIG_LABEL)
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
        return Request(name, config, problem, s.strategy, clients_ns,
                       prior_state if prior_state is not None else labels.get(MIG_CONFIG_STATE_LABEL))

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
        """Look once and run the flow if it is due; None when there was nothing to do."""
        assert self.nodes is not None
        node = self.nodes.get(self.node_name)
        if node is None:
            return None
        request = self.request(node, prior_state)
        if request is None:
            self.last_key, self.last = None, None
            return None
        now = time.monotonic()
        key = self.key(request)
        due = (key != self.last_key or self.last is None
               or (self.last.state == STATE_FAILED and now >= self.next_retry)
               or (self.last.state == STATE_SUCCESS and self.resync and now - self.last_run >= self.resync)
               or prior_state == STATE_REBOOTING)
        if not due:
            return None
        if key != self.last_key:
            self.failures = 0
        self.last_run = now
        self.runs += 1
        outcome = self.flow.run(request, node)
        self.last_key, self.last = key, outcome
        if outcome.state == STATE_FAILED:
            self.failures += 1
            delay = self.retry.delay(self.failures)
            self.next_retry = time.monotonic() + delay
            log.warning("MIG config %r failed (attempt %d); retrying in %.1fs: %s", request.name, self.failures,
                        delay, outcome.reason)
        else:
            self.failures = 0
            log.info("MIG config %r: %s", request.name, outcome.state)
        return outcome

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
                timeout = None
                if self.last is not None and self.last.state == STATE_FAILED:
                    timeout = max(self.next_retry - time.monotonic(), 0.0)
                elif self.last is not None and self.resync:
                    timeout = self.resync
                self.wake.wait(timeout if timeout is not None else 60.0)
        finally:
            self.stop_watches()

"""The agent's loop: watch this Node, the ClusterPolicy and the MIG ConfigMap (agent/watch.py); run the
flow when the node's config (name, content as this node sees it, or MIG strategy) changes; retry a
failure with exponential backoff, whatever the labels do; check an applied config against the GPUs
every `--drift-interval` and report or repair what changed out of band (agent/loop.py, docs/agent.md).

A change while a run is in progress is seen when it ends (as in mig-manager); a burst of changes
collapses to the latest. Own writes wake the loop too, and are recognised as nothing new. The loop
holds the agent's state (`state.AgentState`) and swaps in the value each look returns. Nothing ends it
but a stop: an API server that does not answer delays the loop (agent/kube.py), and a look that fails
is logged and tried again with backoff.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from migops.agent.desired import node_models
from migops.agent.loop import Look, LoopPolicy, idle_timeout, tick
from migops.agent.ports import AgentPorts
from migops.agent.report import publish_inventory
from migops.agent.state import AgentState, RunOutcome
from migops.agent.watch import Overrides, Watches
from migops.api.names import STATE_REBOOTING
from migops.kube.errors import until_answered

log = logging.getLogger(__name__)
NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"
LOOK_BACKOFF = 1.0  # seconds before a look that failed is tried again, doubling to a minute


class IdentityError(RuntimeError):
    """The credentials are bound to another node than the one this agent was told to manage."""


def check_identity(api: k8s.ApiClient, node: str, stop: threading.Event | None = None) -> str | None:
    """The node this agent's token is bound to (pod-bound service-account tokens carry it), or None.
    A token bound to another node is refused: the agent writes its own Node only. Asked until the API
    server answers."""
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    try:
        review = until_answered(
            lambda: k8s.AuthenticationV1Api(api).create_self_subject_review(body),
            "review the agent's own identity",
            stop or threading.Event(),
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
        ports: AgentPorts,
        *,
        overrides: Overrides = Overrides(),
        policy: LoopPolicy = LoopPolicy(),
        simulated_reboot: Callable[[], None] | None = None,
        crd_recheck: float = 10.0,
    ) -> None:
        self.ports = ports
        self.policy = policy
        self.wake = threading.Event()
        self.watches = Watches(api, ports.node, self.wake, overrides=overrides, crd_recheck=crd_recheck)
        self.state = AgentState()
        self._simulated_reboot = simulated_reboot

    @property
    def stop(self) -> threading.Event:
        return self.ports.stop

    def shutdown(self) -> None:
        """Stop soon (a signal handler calls it): a run in progress restores the clients and ends."""
        self.stop.set()
        self.wake.set()

    def step(self, rebooted: bool = False) -> RunOutcome | None:
        """Look once and run the flow (or a drift check) if it is due; None when there was nothing to do."""
        node = self.watches.node()
        if node is None:
            return None
        request = self.watches.request(node)
        if request is None:
            self.state = AgentState()
            return None
        self.state, outcome = tick(self.state, Look(node, request, rebooted), self.ports, self.policy)
        return outcome

    def run(self) -> None:
        self.watches.start()
        try:
            self.watches.wait_synced(self.stop)
            try:
                publish_inventory(self.ports, node_models(self.ports.backend.devices()))
            except Exception as exc:  # noqa: BLE001 - reported again by the first run if it persists
                log.warning("could not publish the node's GPUs: %s", exc)
            self._loop()
        finally:
            self.watches.stop()

    def _loop(self) -> None:
        rebooted, backoff = False, LOOK_BACKOFF
        while not self.stop.is_set():
            self.wake.clear()
            try:
                outcome = self.step(rebooted)
            except Exception:
                if self.stop.is_set():
                    break
                log.exception("the look at the node failed; looking again in %.0fs", backoff)
                self.stop.wait(backoff)
                backoff = min(backoff * 2, 60.0)
                continue
            rebooted, backoff = False, LOOK_BACKOFF
            if outcome is not None and outcome.state == STATE_REBOOTING:
                if self._simulated_reboot is None:
                    log.warning("waiting for the node to reboot")
                    self.stop.wait()
                    break
                self._simulated_reboot()
                rebooted = True  # as a restarted agent reads it from the label
                continue
            self.wake.wait(idle_timeout(self.state, self.ports, self.policy))

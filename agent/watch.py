"""What the agent watches: its own Node, the ClusterPolicy (MIG strategy, the MIG ConfigMap's name), the
MIG ConfigMap, and the pods on its node; and the request they make together (`ConfigRequest`: the
node's config name, its content as this node sees it, the strategy). Every change wakes the loop.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace
from typing import Any

from kubernetes import client as k8s

from migops.agent.kube import NodeIO
from migops.agent.state import ConfigRequest
from migops.api.names import CONFIGMAP_KEY
from migops.api.objects import DEFAULT_STRATEGY, MigSettings, NodeFacts, settings_from_policies
from migops.kube import clusterpolicy, owners
from migops.kube.informer import Informer
from migops.mig.problems import MigError
from migops.mig.spec import MigPartedConfig, parse_config
from migops.mig.strategy import Strategy


@dataclass(frozen=True)
class Overrides:
    """Settings given on the command line win over the ClusterPolicy's."""

    config_map: tuple[str, str] | None = None  # (namespace, name)
    strategy: Strategy | None = None
    clients_namespace: str | None = None


class Watches:
    """The informers of one agent, and the request they make."""

    def __init__(
        self,
        api: k8s.ApiClient,
        node: NodeIO,
        wake: threading.Event,
        *,
        overrides: Overrides = Overrides(),
        crd_recheck: float = 10.0,
    ) -> None:
        self.api = api
        self.node_io = node
        self.wake = wake
        self.overrides = overrides
        self.crd_recheck = crd_recheck  # how often an absent ClusterPolicy CRD is looked for again
        self.core = k8s.CoreV1Api(api)
        self.nodes: Informer | None = None
        self.policies: Informer | None = None
        self.configmaps: Informer | None = None
        self._cm_key: tuple[str, str] | None = None
        self._parsed: tuple[str | None, MigPartedConfig | None, str | None] = (None, None, None)

    def _wakeup(self, kind: str, obj: dict) -> None:
        self.wake.set()

    def start(self) -> None:
        name = self.node_io.node
        self.nodes = Informer(
            self.core.list_node, name=f"node-{name}", handler=self._wakeup, field_selector=f"metadata.name={name}"
        ).start()
        # Optional CRD: absent (no GPU Operator yet) counts as no ClusterPolicy, the GPU Operator's defaults
        # apply, and the informer looks again every `crd_recheck` s, so one installed later is picked up.
        self.policies = clusterpolicy.informer(self.api, handler=self._wakeup, backoff=(0.2, self.crd_recheck)).start()
        self.node_io.start_pod_watch()

    def stop(self) -> None:
        for inf in (self.nodes, self.policies, self.configmaps, self.node_io.pods):
            if inf is not None:
                inf.stop()

    def wait_synced(self, stop: threading.Event) -> None:
        assert self.nodes is not None
        while not stop.is_set() and not self.nodes.wait_synced(1.0):
            pass

    def node(self) -> dict[str, Any] | None:
        assert self.nodes is not None
        return self.nodes.get(self.node_io.node)

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

    def request(self, node: dict[str, Any]) -> ConfigRequest | None:
        """What the node asks for now; None when it names no config."""
        facts = NodeFacts.from_obj(node, offers=False)
        if not facts.config:
            return None
        if self.policies is not None:
            self.policies.wait_synced(10)
        s = self.settings()
        config, problem = self._config(s)
        dynamic = owners.node_owner(node)
        if dynamic is not None:  # checked last, so it is the reason reported whatever else is wrong
            config = None  # no digest: the request's key is this problem, so becoming owned is seen at once
            problem = (
                f"this node's MIG geometry is owned by {dynamic} ({owners.ENV}), which creates and destroys "
                "instances itself: the agent does not reconfigure here"
            )
        # A value the ClusterPolicy CRD's enum forbids reads as the CRD's default.
        strategy = s.strategy or DEFAULT_STRATEGY
        return ConfigRequest(facts.config, config, problem, strategy, self.overrides.clients_namespace or s.namespace)

    def _config(self, s: MigSettings) -> tuple[MigPartedConfig | None, str | None]:
        """The MIG ConfigMap's config, parsed, or why there is none."""
        cms = self._configmap(s.namespace, s.config_name)
        where = f"ConfigMap {s.namespace}/{s.config_name}"
        if not cms.wait_synced(10):
            return None, f"could not read {where}: {cms.last_error or 'no answer'}"
        cm = cms.get(f"{s.namespace}/{s.config_name}")
        if cm is None:
            return None, f"{where} not found (named by the ClusterPolicy's migManager.config.name)"
        text = (cm.get("data") or {}).get(CONFIGMAP_KEY)
        if text is None:
            return None, f"{where} has no key {CONFIGMAP_KEY!r}"
        if self._parsed[0] != text:
            try:
                self._parsed = (text, parse_config(text), None)
            except MigError as exc:
                self._parsed = (text, None, f"{where}: the MIG config does not parse: {exc}")
        return self._parsed[1], self._parsed[2]

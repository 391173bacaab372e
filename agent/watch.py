"""What the agent watches: its own Node, the ClusterPolicy (MIG strategy, the MIG ConfigMap's name), the
MIG ConfigMap, the applied record of the MigSync that manages the node, and the pods on its node; and the
request they make together (`ConfigRequest`: the node's config name, its content as this node sees it,
the strategy). Every change wakes the loop.

While a MigSync manages the node, git owns the MIG ConfigMap's content: the reconciler puts back a text
that is not the revision in force. The request then says it waits (`ConfigRequest.waiting`): the agent
does not re-partition for content the reconciler is about to revert, and acts once the reconciler's
verdict is in (the text put back, or a new revision recorded with that very text).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, replace
from typing import Any

from kubernetes import client as k8s

from migops.agent.kube import NodeIO
from migops.agent.state import ConfigRequest
from migops.api import objects
from migops.api.migsync import RECORD_DIGEST_KEY, RECORD_REVISION_KEY, config_text_digest, record_name
from migops.api.names import CONFIGMAP_KEY, MANAGED_BY_ANNOTATION
from migops.api.objects import DEFAULT_STRATEGY, MigSettings, NodeFacts, settings_from_policies
from migops.kube import clusterpolicy, owners
from migops.kube.informer import Informer
from migops.mig.problems import MigError
from migops.mig.spec import MigPartedConfig, parse_config
from migops.mig.strategy import Strategy

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Overrides:
    """Settings given on the command line win over the ClusterPolicy's."""

    config_map: tuple[str, str] | None = None  # (namespace, name)
    strategy: Strategy | None = None
    clients_namespace: str | None = None


class OneConfigMap:
    """An informer on one ConfigMap, by name (what the agent's RBAC grants), started again when the
    name it is asked for changes."""

    def __init__(self, core: k8s.CoreV1Api, wake: threading.Event) -> None:
        self.core = core
        self.wake = wake
        self.informer: Informer | None = None
        self.key: tuple[str, str] | None = None
        self.told: str | None = None  # the read error last logged

    def read(self, namespace: str, name: str, timeout: float = 10.0) -> tuple[dict[str, Any] | None, str | None]:
        """(the ConfigMap or None when there is none, why it could not be read). Only a new informer is
        waited for: one that has not listed yet answers at once, with its error."""
        fresh = self.key != (namespace, name)
        if fresh:
            self.stop()
            self.informer = Informer(
                self.core.list_namespaced_config_map,
                namespace,
                name=f"configmap-{name}",
                handler=lambda kind, obj: self.wake.set(),
                field_selector=f"metadata.name={name}",
            ).start()
            self.key = (namespace, name)
        assert self.informer is not None
        if not self.informer.wait_synced(timeout if fresh else 0):
            return None, self.informer.last_error or "no answer"
        return self.informer.get(f"{namespace}/{name}"), None

    def tell(self, error: str) -> bool:
        """Whether `error` is new (to be logged), not the one logged last."""
        new, self.told = error != self.told, error
        return new

    def stop(self) -> None:
        if self.informer is not None:
            self.informer.stop()
            self.informer = None


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
        self.mig_config = OneConfigMap(self.core, wake)
        self.record = OneConfigMap(self.core, wake)
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
        for inf in (self.nodes, self.policies, self.node_io.pods):
            if inf is not None:
                inf.stop()
        self.mig_config.stop()
        self.record.stop()

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

    def request(self, node: dict[str, Any]) -> ConfigRequest | None:
        """What the node asks for now; None when it names no config."""
        facts = NodeFacts.from_obj(node, offers=False)
        if not facts.config:
            return None
        if self.policies is not None:
            self.policies.wait_synced(10)
        s = self.settings()
        text, config, problem = self._config(s)
        dynamic = owners.node_owner(node)
        if dynamic is not None:  # checked last, so it is the reason reported whatever else is wrong
            config = None  # no digest: the request's key is this problem, so becoming owned is seen at once
            problem = (
                f"this node's MIG geometry is owned by {dynamic}: {owners.why(dynamic)}; the agent does not "
                "reconfigure here"
            )
        # A value the ClusterPolicy CRD's enum forbids reads as the CRD's default.
        strategy = s.strategy or DEFAULT_STRATEGY
        clients = self.overrides.clients_namespace or s.namespace
        waiting = self._waiting(node, text, s) if text is not None else None
        return ConfigRequest(facts.config, config, problem, strategy, clients, waiting)

    def _config(self, s: MigSettings) -> tuple[str | None, MigPartedConfig | None, str | None]:
        """The MIG ConfigMap's text and config, parsed, or why there is none."""
        where = f"ConfigMap {s.namespace}/{s.config_name}"
        cm, error = self.mig_config.read(s.namespace, s.config_name)
        if error is not None:
            return None, None, f"could not read {where}: {error}"
        if cm is None:
            return None, None, f"{where} not found (named by the ClusterPolicy's migManager.config.name)"
        text = (cm.get("data") or {}).get(CONFIGMAP_KEY)
        if text is None:
            return None, None, f"{where} has no key {CONFIGMAP_KEY!r}"
        if self._parsed[0] != text:
            try:
                self._parsed = (text, parse_config(text), None)
            except MigError as exc:
                self._parsed = (text, None, f"{where}: the MIG config does not parse: {exc}")
        return text, self._parsed[1], self._parsed[2]

    def _waiting(self, node: dict[str, Any], text: str, s: MigSettings) -> str | None:
        """Why the MIG ConfigMap's text waits for the reconciler's verdict: a MigSync manages the node and
        its applied record holds another text. None when it may be acted on: no MigSync manages the node,
        or it has no record yet, or the record cannot be read (the webhook still guards the ConfigMap), or
        the ConfigMap is labelled migops.io/unmanaged=true (out of git's hands: the reconciler never puts
        it back)."""
        managed = objects.annotations_of(node).get(MANAGED_BY_ANNOTATION) or ""
        namespace, _, migsync = managed.partition("/")
        if not namespace or not migsync:
            return None
        cm, _ = self.mig_config.read(s.namespace, s.config_name)
        if objects.is_unmanaged(cm):
            return None
        record, error = self.record.read(namespace, record_name(migsync))
        if error is not None:
            if self.record.tell(error):
                log.warning("could not read the applied record %s/%s: %s", namespace, record_name(migsync), error)
            return None
        data = (record or {}).get("data") or {}
        digest = data.get(RECORD_DIGEST_KEY)
        if digest is None or digest == config_text_digest(text):
            return None
        revision = str(data.get(RECORD_REVISION_KEY) or "")[:12] or "?"
        return (
            f"ConfigMap {s.namespace}/{s.config_name} holds a config.yaml other than revision {revision}'s, which "
            f"MigSync {managed} applied: waiting for its reconciler to put it back or to record a new revision"
        )

"""The cluster as the webhook needs to see it, kept in memory by informers: no API call per review.

Three watches: Nodes (trimmed to the labels, annotation and capacity that name their GPUs, MIG config
and MIG resources), ClusterPolicies (the MIG strategy and where the MIG ConfigMap lives; the CRD may be
absent) and that one ConfigMap (re-targeted when the ClusterPolicy moves it). Rules read an immutable
`Snapshot`; `version` changes only when something a rule reads changes (a kubelet heartbeat does not),
so verdicts cached under one version stay valid until then.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from kubernetes import client as k8s

from migops.kube import clusterpolicy
from migops.kube.informer import Informer, Obj
from migops.kube.names import (
    CONFIGMAP_KEY, DEVICE_ID_LABEL, GPU_COUNT_LABEL, GPU_PRODUCT_LABEL, GPUS_ANNOTATION, MIG_CONFIG_LABEL,
)
from migops.kube.nodes import UnknownGpuError, node_gpus
from migops.mig import gfd
from migops.mig.catalogue import GpuModel
from migops.mig.problems import MigError
from migops.mig.spec import MigPartedConfig
from migops.webhook import checks

log = logging.getLogger(__name__)

_NODE_LABELS = frozenset({MIG_CONFIG_LABEL, DEVICE_ID_LABEL, GPU_PRODUCT_LABEL, GPU_COUNT_LABEL})
_MIG_COUNT_LABEL = gfd.MIG_COUNT_LABEL
MIG_RESOURCE_PREFIX = gfd.MIG_RESOURCE_PREFIX


# ------------------------------------------------------------------------------------------ trimming
def trim_node(obj: Obj) -> Obj:
    """What the rules read of a Node; everything else (status, images, conditions) is dropped, so the
    cache is small and a heartbeat changes nothing in it."""
    meta = obj.get("metadata") or {}
    labels = {k: v for k, v in (meta.get("labels") or {}).items() if k in _NODE_LABELS or _MIG_COUNT_LABEL.match(k)}
    gpus = (meta.get("annotations") or {}).get(GPUS_ANNOTATION)
    capacity = {k: v for k, v in ((obj.get("status") or {}).get("capacity") or {}).items()
                if k.startswith(MIG_RESOURCE_PREFIX)}
    return {"metadata": {"name": meta.get("name"), "resourceVersion": meta.get("resourceVersion"), "labels": labels,
                         "annotations": {GPUS_ANNOTATION: gpus} if gpus else {}},
            "status": {"capacity": capacity}}


def trim_policy(obj: Obj) -> Obj:
    """What settings_from_policies reads."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    return {"metadata": {k: meta.get(k) for k in ("name", "creationTimestamp", "resourceVersion")},
            "spec": {"mig": spec.get("mig") or {}, "migManager": {"config": (spec.get("migManager") or {}).get("config") or {}}},
            "status": {"namespace": (obj.get("status") or {}).get("namespace")}}


def trim_configmap(obj: Obj) -> Obj:
    meta = obj.get("metadata") or {}
    data = obj.get("data") or {}
    return {"metadata": {k: meta.get(k) for k in ("name", "namespace", "resourceVersion")},
            "data": {CONFIGMAP_KEY: data[CONFIGMAP_KEY]} if CONFIGMAP_KEY in data else {}}


# ------------------------------------------------------------------------------------------ snapshot
@dataclass(frozen=True)
class NodeView:
    """One Node as the rules see it."""

    name: str
    config: str | None  # nvidia.com/mig.config
    gpus: tuple[GpuModel, ...]  # index order when `exact`; one per model otherwise; () when unknown
    exact: bool
    gpu_problem: str | None  # why the GPUs are unknown (a device ID the catalogue lacks)
    offers: frozenset[str]  # MIG resources (nvidia.com/mig-<profile>) it advertises now

    @cached_property
    def models(self) -> tuple[GpuModel, ...]:
        return tuple(dict.fromkeys(self.gpus))

    @cached_property
    def model_ids(self) -> frozenset[str]:
        """The device IDs of its GPU models (the catalogue's key for a model)."""
        return frozenset(g.device_id for g in self.gpus)

    def describe(self) -> str:
        if not self.gpus:
            return "GPUs unknown"
        counts: dict[str, int] = {}
        for g in self.gpus:
            counts[g.name] = counts.get(g.name, 0) + 1
        return ", ".join(f"{c} x {n}" if self.exact else n for n, c in counts.items())


def node_view(obj: Mapping[str, Any]) -> NodeView:
    """A NodeView of a Node object (from the cache or from a review)."""
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    try:
        found = node_gpus(obj)
        gpus, exact, problem = (found.gpus, found.exact, None) if found else ((), False, None)
    except UnknownGpuError as exc:
        gpus, exact, problem = (), False, str(exc)
    offers = gfd.mig_offers(labels, (obj.get("status") or {}).get("capacity") or {})
    config = labels.get(MIG_CONFIG_LABEL)
    return NodeView(str(meta.get("name")), config if isinstance(config, str) else None, gpus, exact, problem,
                    offers)


class Snapshot:
    """Immutable view of the cluster at one version; derived values are computed once, on demand."""

    def __init__(self, version: int, settings: clusterpolicy.MigSettings, nodes: Iterable[NodeView],
                 active: Mapping[str, Any] | None) -> None:
        self.version = version
        self.settings = settings
        self.nodes = tuple(sorted(nodes, key=lambda n: n.name))
        self.active = active  # the MIG ConfigMap named by the ClusterPolicy; None when it does not exist

    @classmethod
    def build(cls, version: int, nodes: Iterable[Mapping[str, Any]], policies: Iterable[Mapping[str, Any]],
              configmaps: Iterable[Mapping[str, Any]]) -> Snapshot:
        settings = clusterpolicy.settings_from_policies(policies)
        active = None
        for cm in configmaps:
            meta = cm.get("metadata") or {}
            if (meta.get("namespace"), meta.get("name")) == settings.configmap:
                active = cm
        return cls(version, settings, (node_view(n) for n in nodes), active)

    @property
    def strategy(self) -> str:
        return self.settings.strategy

    @cached_property
    def active_text(self) -> str | None:
        if self.active is None:
            return None
        text = (self.active.get("data") or {}).get(CONFIGMAP_KEY)
        return text if isinstance(text, str) else None

    @cached_property
    def active_digest(self) -> str | None:
        return checks.digest(self.active_text) if self.active_text is not None else None

    @cached_property
    def active_config(self) -> MigPartedConfig | MigError | None:
        """The parsed MIG config in force; the MigError when it does not parse; None when absent."""
        if self.active_text is None:
            return None
        try:
            return checks.parse(self.active_text, self.active_digest)
        except MigError as exc:
            return exc

    @cached_property
    def users(self) -> dict[str, tuple[NodeView, ...]]:
        """Config name -> the nodes whose nvidia.com/mig.config names it."""
        out: dict[str, list[NodeView]] = {}
        for node in self.nodes:
            if node.config:
                out.setdefault(node.config, []).append(node)
        return {k: tuple(v) for k, v in out.items()}

    @cached_property
    def gpu_nodes(self) -> tuple[NodeView, ...]:
        return tuple(n for n in self.nodes if n.gpus)

    @property
    def configmap_name(self) -> str:
        ns, name = self.settings.configmap
        return f"{ns}/{name}"


# ------------------------------------------------------------------------------------------ informers
class ClusterState:
    """Informers on Nodes, ClusterPolicies and the MIG ConfigMap, and the Snapshot they make."""

    def __init__(self, api: k8s.ApiClient, *, watch_timeout: int = 290) -> None:
        self._api = api
        self._watch_timeout = watch_timeout
        self._lock = threading.RLock()
        self._version = 0
        self._seen: dict[tuple[str, str], Obj] = {}
        self._snapshot: Snapshot | None = None
        core = k8s.CoreV1Api(api)
        self._core = core
        self.nodes = Informer(core.list_node, name="nodes", transform=trim_node, handler=self._handler("nodes"),
                              watch_timeout=watch_timeout)
        self.policies = Informer(k8s.CustomObjectsApi(api).list_cluster_custom_object, clusterpolicy.GROUP,
                                 clusterpolicy.VERSION, clusterpolicy.PLURAL, name="clusterpolicies",
                                 transform=trim_policy, handler=self._policy_event, missing_ok=True,
                                 watch_timeout=watch_timeout)
        self.configmap: Informer | None = None
        self._configmap_target: tuple[str, str] | None = None
        self._started = False
        self._settings_cache: tuple[int, clusterpolicy.MigSettings] | None = None

    # --------------------------------------------------------------------------- lifecycle
    def start(self) -> ClusterState:
        with self._lock:
            if self._started:
                return self
            self._started = True
        self.nodes.start()
        self.policies.start()
        threading.Thread(target=self._first_target, name="state-target", daemon=True).start()
        return self

    def stop(self) -> None:
        for informer in (self.nodes, self.policies, self.configmap):
            if informer is not None:
                informer.stop()

    def _first_target(self) -> None:
        if self.policies.wait_synced(None):
            self._retarget()

    @property
    def synced(self) -> bool:
        cm = self.configmap
        return (self.nodes.synced and self.policies.synced and cm is not None and cm.synced
                and self._configmap_target == self._settings().configmap)

    def wait_synced(self, timeout: float) -> bool:
        import time

        deadline = time.monotonic() + timeout
        while not self.synced:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)
        return True

    # --------------------------------------------------------------------------- reading
    @property
    def version(self) -> int:
        return self._version

    def snapshot(self) -> Snapshot:
        snap = self._snapshot
        if snap is not None and snap.version == self._version:
            return snap
        with self._lock:
            version = self._version
            if self._snapshot is None or self._snapshot.version != version:
                cm = self.configmap
                self._snapshot = Snapshot.build(version, self.nodes.items().values(), self.policies.items().values(),
                                                cm.items().values() if cm is not None else ())
            return self._snapshot

    def errors(self) -> dict[str, str]:
        """Informers whose last list or watch failed, and why (for /readyz)."""
        found = {i.name: i.last_error for i in (self.nodes, self.policies, self.configmap) if i and i.last_error}
        return {k: v for k, v in found.items() if v}

    # --------------------------------------------------------------------------- events
    def _settings(self) -> clusterpolicy.MigSettings:
        """The ClusterPolicy's settings, recomputed only when the policies changed (read per review)."""
        version = self.policies.version
        cached = self._settings_cache
        if cached is None or cached[0] != version:
            cached = (version, clusterpolicy.settings_from_policies(self.policies.items().values()))
            self._settings_cache = cached
        return cached[1]

    def _handler(self, source: str) -> Callable[[str, Obj], None]:
        def handle(kind: str, obj: Obj) -> None:
            meta = obj.get("metadata") or {}
            key = (source, f"{meta.get('namespace') or ''}/{meta.get('name')}")
            projection = {**obj, "metadata": {k: v for k, v in meta.items() if k != "resourceVersion"}}
            with self._lock:
                if kind == "DELETED":
                    changed = self._seen.pop(key, None) is not None
                else:
                    changed = self._seen.get(key) != projection
                    self._seen[key] = projection
                if changed:
                    self._version += 1
        return handle

    def _policy_event(self, kind: str, obj: Obj) -> None:
        self._handler("clusterpolicies")(kind, obj)
        if self.policies.synced:
            self._retarget()

    def _retarget(self) -> None:
        """Watch the ConfigMap the ClusterPolicy names now (a new informer when it moved)."""
        target = self._settings().configmap
        with self._lock:
            if target == self._configmap_target:
                return
            old, self._configmap_target = self.configmap, target
            namespace, name = target
            self.configmap = Informer(self._core.list_namespaced_config_map, namespace, name=f"configmap {namespace}/{name}",
                                      field_selector=f"metadata.name={name}", transform=trim_configmap,
                                      handler=self._handler("configmap"), watch_timeout=self._watch_timeout)
            # The old ConfigMap's contents are no longer the config in force.
            for key in [k for k in self._seen if k[0] == "configmap"]:
                del self._seen[key]
            self._version += 1
        if old is not None:
            threading.Thread(target=old.stop, name="informer-stop", daemon=True).start()
        self.configmap.start()
        log.info("watching MIG ConfigMap %s/%s", namespace, name)

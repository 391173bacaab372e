"""The cluster as the webhook needs to see it, kept in memory by informers: no API call per review.

Four watches: Nodes (trimmed to the labels, annotation and capacity that name their GPUs, MIG config
and MIG resources), ClusterPolicies (the MIG strategy and where the MIG ConfigMap lives; the CRD may be
absent), that one ConfigMap (re-targeted when the ClusterPolicy moves it) and MigSyncs (which repo
owns a managed node's labels; the CRD may be absent).

Everything is maintained per event, never rebuilt: a Node event replaces that node's NodeFacts in the
node index (webhook/nodeindex.py), in O(1) plus the node's own labels; a ClusterPolicy or ConfigMap
event replaces the small immutable `MigView` (settings, the config in force, parsed once). A review
reads them through a `Snapshot`: an immutable value the state swaps whole on every change, so a
review holds one without any lock, however long its rule runs, and reads it in O(1) or O(the nodes
the rule is about); its verdict is cached under the versions of exactly what its rule reads (app.py):
a Node review reads no other node, so a rollout of 10,000 nodes never invalidates it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from kubernetes import client as k8s

from migops.api import migsync, objects
from migops.api.migsync import SyncSpec, parse_spec
from migops.api.names import (
    CONFIGMAP_KEY,
    DEVICE_ID_LABEL,
    GPU_COUNT_LABEL,
    GPU_PRODUCT_LABEL,
    GPUS_ANNOTATION,
    MIG_CONFIG_LABEL,
)
from migops.api.objects import MigSettings, NodeFacts, settings_from_policies
from migops.kube import clusterpolicy
from migops.kube.informer import Informer, Obj, object_key
from migops.mig import gfd
from migops.mig.catalogue import GpuModel
from migops.mig.problems import MigError
from migops.mig.spec import MigPartedConfig
from migops.mig.strategy import Strategy
from migops.webhook import checks
from migops.webhook.nodeindex import NodeIndex, NodeIndexer, NodeSample, NodeSummary

log = logging.getLogger(__name__)

_NODE_LABELS = frozenset({MIG_CONFIG_LABEL, DEVICE_ID_LABEL, GPU_PRODUCT_LABEL, GPU_COUNT_LABEL})
_MIG_COUNT_LABEL = gfd.MIG_COUNT_LABEL
MIG_RESOURCE_PREFIX = gfd.MIG_RESOURCE_PREFIX
# The reconciler's identity in a cluster (manifests/base/reconciler: its ServiceAccount); the only
# writer of a managed node's nvidia.com/mig.config. `migops webhook --reconciler-user` names others.
DEFAULT_RECONCILER_USER = "system:serviceaccount:migops-system:migops-reconciler"


# ------------------------------------------------------------------------------------------ trimming
def trim_node(obj: Obj) -> Obj:
    """What the rules read of a Node; everything else (status, images, conditions) is dropped, so the
    cache is small and a heartbeat changes nothing in it."""
    meta = objects.meta(obj)
    labels = {k: v for k, v in (meta.get("labels") or {}).items() if k in _NODE_LABELS or _MIG_COUNT_LABEL.match(k)}
    gpus = (meta.get("annotations") or {}).get(GPUS_ANNOTATION)
    capacity = {
        k: v for k, v in ((obj.get("status") or {}).get("capacity") or {}).items() if k.startswith(MIG_RESOURCE_PREFIX)
    }
    return {
        "metadata": {
            "name": meta.get("name"),
            "resourceVersion": meta.get("resourceVersion"),
            "labels": labels,
            "annotations": {GPUS_ANNOTATION: gpus} if gpus else {},
        },
        "status": {"capacity": capacity},
    }


def trim_policy(obj: Obj) -> Obj:
    """What settings_from_policies reads."""
    meta = objects.meta(obj)
    spec = obj.get("spec") or {}
    return {
        "metadata": {k: meta.get(k) for k in ("name", "creationTimestamp", "resourceVersion")},
        "spec": {
            "mig": spec.get("mig") or {},
            "migManager": {"config": (spec.get("migManager") or {}).get("config") or {}},
        },
        "status": {"namespace": (obj.get("status") or {}).get("namespace")},
    }


def trim_configmap(obj: Obj) -> Obj:
    meta = objects.meta(obj)
    data = obj.get("data") or {}
    return {
        "metadata": {k: meta.get(k) for k in ("name", "namespace", "resourceVersion")},
        "data": {CONFIGMAP_KEY: data[CONFIGMAP_KEY]} if CONFIGMAP_KEY in data else {},
    }


def trim_migsync(obj: Obj) -> Obj:
    """Where a MigSync's desired labels come from (its status, written constantly, is dropped)."""
    meta = objects.meta(obj)
    return {
        "metadata": {k: meta.get(k) for k in ("name", "namespace", "resourceVersion")},
        "spec": obj.get("spec") or {},
    }


# ------------------------------------------------------------------------------------------ settings
@dataclass(frozen=True)
class MigView:
    """The ClusterPolicy's settings and the MIG ConfigMap they name: immutable, replaced per event
    (the config text is parsed once per content, by digest)."""

    settings: MigSettings
    active: Mapping[str, Any] | None  # the MIG ConfigMap named by the ClusterPolicy; None when it does not exist

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
    def key(self) -> tuple:
        """What a verdict that reads only these settings and the config in force depends on."""
        return self.settings, self.active_digest


@dataclass(frozen=True)
class MigSyncRef:
    """A MigSync that exists, and its spec (None when the spec cannot be read: `problem` says why; the
    MigSync still owns the nodes it names)."""

    namespace: str
    name: str
    spec: SyncSpec | None
    problem: str = ""

    @property
    def url(self) -> str:
        return self.spec.url if self.spec else f"its repository (its spec cannot be read: {self.problem})"

    @property
    def ref(self) -> str:
        return self.spec.ref if self.spec else ""

    @property
    def path(self) -> str:
        return self.spec.path if self.spec else ""

    @property
    def suspend(self) -> bool:
        """The reconciler applies nothing of a suspended MigSync (one whose spec cannot be read still owns)."""
        return self.spec.suspend if self.spec else False


# ------------------------------------------------------------------------------------------ snapshot
@dataclass(frozen=True)
class Snapshot:
    """What a review reads, immutable: held by a review without any lock while the informers go on
    (ClusterState swaps in a new one on every change). The settings and the config in force (MigView),
    the MigSyncs, who the reconciler is, every ClusterPolicy, the nodes' summary (what Pod and DRA
    rules read), and the node index, frozen on its first read (`nodes`: rules that read no other node,
    a Node's, never make it)."""

    mig: MigView
    summary: NodeSummary = NodeSummary()
    index: Callable[[], NodeIndex] = field(default=NodeIndex, repr=False, compare=False)
    migsyncs: Mapping[str, MigSyncRef] = field(default_factory=dict)
    reconciler_users: frozenset[str] = frozenset()  # who may write what git owns (the reconciler's identities)
    # Every ClusterPolicy (trimmed; a few): what is in force once the one in force is deleted.
    policies: tuple[Mapping[str, Any], ...] = ()

    @classmethod
    def build(
        cls,
        version: int,
        nodes: Iterable[Mapping[str, Any]],
        policies: Iterable[Mapping[str, Any]],
        configmaps: Iterable[Mapping[str, Any]],
        migsyncs: Iterable[Mapping[str, Any]] = (),
        reconciler_users: Iterable[str] = (DEFAULT_RECONCILER_USER,),
    ) -> Snapshot:
        """From whole lists of objects (tests, benchmarks and the property tests' full rebuild).
        `version` is not used (versions live in the node index); kept for the callers' signature."""
        policies = tuple(policies)
        settings = settings_from_policies(policies)
        active = None
        for cm in configmaps:
            meta = objects.meta(cm)
            if (meta.get("namespace"), meta.get("name")) == settings.configmap:
                active = cm
        indexer = NodeIndexer(NodeFacts.from_obj(n) for n in nodes)
        return cls(
            MigView(settings, active),
            indexer.summary,
            indexer.index,
            {object_key(m): ref for m in migsyncs if (ref := migsync_ref(m)) is not None},
            frozenset(reconciler_users),
            tuple(trim_policy(dict(p)) for p in policies),
        )

    @property
    def nodes(self) -> NodeIndex:
        """The node index, the same one for every read of this snapshot: frozen on the first (at least
        as new as `summary`; a verdict that reads it is cached under its own version)."""
        found: NodeIndex | None = self.__dict__.get("_nodes")
        if found is None:
            found = self.__dict__["_nodes"] = self.index()
        return found

    # the settings and the config in force
    @property
    def settings(self) -> MigSettings:
        return self.mig.settings

    @property
    def strategy(self) -> Strategy | None:
        """The cluster's MIG strategy; None when the ClusterPolicy names none of the three."""
        return self.mig.settings.strategy

    @property
    def active(self) -> Mapping[str, Any] | None:
        return self.mig.active

    @property
    def active_text(self) -> str | None:
        return self.mig.active_text

    @property
    def active_digest(self) -> str | None:
        return self.mig.active_digest

    @property
    def active_config(self) -> MigPartedConfig | MigError | None:
        return self.mig.active_config

    @property
    def configmap_name(self) -> str:
        ns, name = self.settings.configmap
        return f"{ns}/{name}"

    # the nodes, through the index
    @property
    def users(self) -> dict[str, tuple[NodeFacts, ...]]:
        """Config name -> the nodes whose nvidia.com/mig.config names it."""
        return self.nodes.users()

    def groups(self, config: str) -> list[tuple[tuple[str, ...], bool, tuple[NodeFacts, ...]]]:
        return self.nodes.groups(config)

    def configured(self) -> NodeSample:
        return self.nodes.configured()

    def not_served(self, fit: frozenset[str] | set[str], config: str) -> NodeSample:
        return self.nodes.not_served(fit, config)

    @property
    def config_models(self) -> frozenset[str]:
        return self.nodes.summary.config_models

    # the nodes, through the summary
    @property
    def models_present(self) -> frozenset[GpuModel]:
        return self.summary.models_present

    @property
    def offered(self) -> frozenset[str]:
        return self.summary.offered

    def migsync(self, key: str) -> MigSyncRef | None:
        """The MigSync `namespace/name`, None when there is none (or no MigSync CRD)."""
        return self.migsyncs.get(key)


def migsync_ref(obj: Mapping[str, Any]) -> MigSyncRef | None:
    meta = objects.meta(obj)
    if not isinstance(meta.get("name"), str):
        return None
    namespace = str(meta.get("namespace") or "")
    try:
        return MigSyncRef(namespace, meta["name"], parse_spec(obj))
    except ValueError as exc:
        return MigSyncRef(namespace, meta["name"], None, str(exc))


# ------------------------------------------------------------------------------------------ informers
class ClusterState:
    """Informers on Nodes, ClusterPolicies, the MIG ConfigMap and MigSyncs, and the indexes their
    events maintain."""

    def __init__(
        self,
        api: k8s.ApiClient,
        *,
        watch_timeout: int = 290,
        reconciler_users: Iterable[str] = (DEFAULT_RECONCILER_USER,),
    ) -> None:
        self._api = api
        self.reconciler_users = frozenset(reconciler_users)
        self._watch_timeout = watch_timeout
        self.lock = threading.RLock()  # held by the informers' handlers while they change the state
        self._indexer = NodeIndexer()
        self._policies: dict[str, Obj] = {}
        self._configmap_obj: Obj | None = None
        self._snapshot = Snapshot(
            MigView(MigSettings(), None),
            self._indexer.summary,
            self._indexer.index,
            reconciler_users=self.reconciler_users,
        )
        core = k8s.CoreV1Api(api)
        self._core = core
        custom = k8s.CustomObjectsApi(api)
        self.nodes = Informer(
            core.list_node, name="nodes", transform=trim_node, handler=self._node_event, watch_timeout=watch_timeout
        )
        self.policies = clusterpolicy.informer(
            api, transform=trim_policy, handler=self._policy_event, watch_timeout=watch_timeout
        )
        self.migsyncs = Informer(
            custom.list_cluster_custom_object,
            migsync.GROUP,
            migsync.VERSION,
            migsync.PLURAL,
            name="migsyncs",
            transform=trim_migsync,
            handler=self._migsync_event,
            missing_ok=True,
            # A CRD installed after the webhook started is seen within 2 s (a review in between reads
            # the MigSync it needs live: nodelabels.uncached_owner).
            backoff=(0.2, 2.0),
            watch_timeout=watch_timeout,
        )
        self.configmap: Informer | None = None
        self._configmap_target: tuple[str, str] | None = None
        self._started = False

    # --------------------------------------------------------------------------- lifecycle
    def start(self) -> ClusterState:
        with self.lock:
            if self._started:
                return self
            self._started = True
        self.nodes.start()
        self.policies.start()
        self.migsyncs.start()
        threading.Thread(target=self._first_target, name="state-target", daemon=True).start()
        return self

    def stop(self) -> None:
        for informer in (self.nodes, self.policies, self.migsyncs, self.configmap):
            if informer is not None:
                informer.stop()

    def _first_target(self) -> None:
        if self.policies.wait_synced(None):
            self._retarget()

    @property
    def synced(self) -> bool:
        cm = self.configmap
        return (
            self.nodes.synced
            and self.policies.synced
            and self.migsyncs.synced
            and cm is not None
            and cm.synced
            and self._configmap_target == self._mig.settings.configmap
        )

    def wait_synced(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not self.synced:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)
        return True

    # --------------------------------------------------------------------------- reading
    def snapshot(self) -> Snapshot:
        """The current view: O(1), immutable, read without a lock."""
        return self._snapshot

    @property
    def _mig(self) -> MigView:
        return self._snapshot.mig

    def _publish(self, **changed: Any) -> None:
        """The next snapshot: this one with `changed` (called under `lock`)."""
        self._snapshot = replace(self._snapshot, **changed)

    def errors(self) -> dict[str, str]:
        """Informers whose last list or watch failed, and why (for /readyz)."""
        found = {
            i.name: i.last_error
            for i in (self.nodes, self.policies, self.migsyncs, self.configmap)
            if i and i.last_error
        }
        return {k: v for k, v in found.items() if v}

    # --------------------------------------------------------------------------- events
    def _node_event(self, kind: str, obj: Obj) -> None:
        view = NodeFacts.from_obj(obj)
        with self.lock:
            if kind == "DELETED":
                self._indexer.remove(view.name)
            else:
                self._indexer.put(view)
            if self._indexer.summary != self._snapshot.summary:
                self._publish(summary=self._indexer.summary)

    def _policy_event(self, kind: str, obj: Obj) -> None:
        key = object_key(obj)
        with self.lock:
            if kind == "DELETED":
                self._policies.pop(key, None)
            else:
                self._policies[key] = obj
            settings = settings_from_policies(self._policies.values())
            mig = self._mig
            if settings != mig.settings:
                active = self._configmap_obj if settings.configmap == self._configmap_target else None
                mig = MigView(settings, active)
            self._publish(mig=mig, policies=tuple(self._policies.values()))
        if self.policies.synced:
            self._retarget()

    def _configmap_event(self, target: tuple[str, str]) -> Callable[[str, Obj], None]:
        def handle(kind: str, obj: Obj) -> None:
            meta = objects.meta(obj)
            with self.lock:
                if target != self._configmap_target or (meta.get("namespace"), meta.get("name")) != target:
                    return  # an informer being replaced, or not the ConfigMap in force
                current = None if kind == "DELETED" else obj
                self._configmap_obj = current
                if self._mig.settings.configmap == target and _content(current) != _content(self._mig.active):
                    self._publish(mig=MigView(self._mig.settings, current))

        return handle

    def _migsync_event(self, kind: str, obj: Obj) -> None:
        key = object_key(obj)
        ref = None if kind == "DELETED" else migsync_ref(obj)
        with self.lock:
            if self._snapshot.migsyncs.get(key) == ref:
                return
            found = dict(self._snapshot.migsyncs)  # replaced, not changed: a review holds the old one (a few)
            if ref is None:
                found.pop(key, None)
            else:
                found[key] = ref
            self._publish(migsyncs=found)

    def _retarget(self) -> None:
        """Watch the ConfigMap the ClusterPolicy names now (a new informer when it moved)."""
        with self.lock:
            target = self._mig.settings.configmap
            if target == self._configmap_target:
                return
            old, self._configmap_target = self.configmap, target
            namespace, name = target
            self.configmap = Informer(
                self._core.list_namespaced_config_map,
                namespace,
                name=f"configmap {namespace}/{name}",
                field_selector=f"metadata.name={name}",
                transform=trim_configmap,
                handler=self._configmap_event(target),
                watch_timeout=self._watch_timeout,
            )
            # The old ConfigMap's contents are no longer the config in force.
            self._configmap_obj = None
            self._publish(mig=MigView(self._mig.settings, None))
        if old is not None:
            threading.Thread(target=old.stop, name="informer-stop", daemon=True).start()
        self._start_informer(self.configmap)
        log.info("watching MIG ConfigMap %s/%s", namespace, name)

    def _start_informer(self, informer: Informer) -> None:
        informer.start()


def _content(cm: Mapping[str, Any] | None) -> object:
    """A ConfigMap as the rules read it (its resourceVersion aside)."""
    if cm is None:
        return None
    meta = objects.meta(cm)
    return (meta.get("namespace"), meta.get("name"), cm.get("data"))

"""The cluster as the webhook needs to see it, kept in memory by informers: no API call per review.

Four watches: Nodes (trimmed to the labels, annotation and capacity that name their GPUs, MIG config
and MIG resources), ClusterPolicies (the MIG strategy and where the MIG ConfigMap lives; the CRD may be
absent), that one ConfigMap (re-targeted when the ClusterPolicy moves it) and MigSyncs (which repo
owns a managed node's labels; the CRD may be absent).

Everything is maintained per event, never rebuilt: a Node event replaces that node's NodeFacts in the
`Placement` indexes (nodes per config name, per GPU set, per (config, GPUs) group, the GPU models and
MIG resources present), in O(1) plus the node's own labels; a ClusterPolicy or ConfigMap event
replaces the small immutable `MigView` (settings, the config in force, parsed once). A review reads
them through a `Snapshot`, under the state's lock, in O(1) or O(the nodes the rule is about), and its
verdict is cached under the versions of exactly what its rule reads (app.py): a Node review reads no
other node, so a rollout of 10,000 nodes never invalidates it.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
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


# ------------------------------------------------------------------------------------------ node views
# One Node as the rules see it: migops.api.objects.NodeFacts (the one Node reader), from the trimmed
# cache object or a review's object alike.
GroupKey = tuple[str, tuple[str, ...], bool]  # (config, device IDs in order, exact)


class NodeSample(Sequence[NodeFacts]):
    """Nodes in name order, drawn lazily from sorted groups: `len` is known at once, and naming the
    first few (findings.node_names) reads only those, however many nodes there are."""

    def __init__(
        self,
        parts: Iterable[Sequence[NodeFacts]],
        count: int | None = None,
        keep: Callable[[NodeFacts], bool] | None = None,
    ) -> None:
        self._parts = [p for p in parts if p]
        self._keep = keep
        self._count = count if count is not None else sum(len(p) for p in self._parts)
        self._seen: list[NodeFacts] = []
        self._iter: Iterator[NodeFacts] | None = None

    def __len__(self) -> int:
        return self._count

    def _more(self) -> Iterator[NodeFacts]:
        merged = heapq.merge(*self._parts, key=lambda n: n.name)
        return filter(self._keep, merged) if self._keep else merged

    def __iter__(self) -> Iterator[NodeFacts]:
        yield from self._seen
        if self._iter is None:
            self._iter = self._more()
        for node in self._iter:
            self._seen.append(node)
            yield node

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            stop = index.stop if index.stop is not None and index.stop >= 0 else None
            if stop is not None and (index.start or 0) >= 0:
                return list(itertools.islice(iter(self), stop))[index]
            return list(self)[index]
        if index < 0:
            return list(self)[index]
        for i, node in enumerate(self):
            if i == index:
                return node
        raise IndexError(index)


class _Bucket:
    """Nodes by name, with their name-sorted tuple made on demand and kept until the bucket changes."""

    __slots__ = ("nodes", "_sorted")

    def __init__(self) -> None:
        self.nodes: dict[str, NodeFacts] = {}
        self._sorted: tuple[NodeFacts, ...] | None = None

    def put(self, node: NodeFacts) -> None:
        self.nodes[node.name] = node
        self._sorted = None

    def drop(self, name: str) -> bool:
        """Remove `name`; True when the bucket is now empty."""
        self.nodes.pop(name, None)
        self._sorted = None
        return not self.nodes

    def sorted(self) -> tuple[NodeFacts, ...]:
        found = self._sorted
        if found is None:
            found = self._sorted = tuple(sorted(self.nodes.values(), key=lambda n: n.name))
        return found

    def first(self) -> str:
        return self.sorted()[0].name


class Placement:
    """Every Node's view and the indexes the rules read, updated one node at a time.

    Versions say what changed, so verdicts are cached under what they read: `version` when any
    node's config or GPUs (what ConfigMap and ClusterPolicy rules read) change, `offers_version` when
    the set of MIG resources offered anywhere changes, `models_version` when the set of GPU models
    present changes (what Pod rules read). A kubelet heartbeat or an agent's capacity update that
    offers nothing new changes none of them.
    """

    def __init__(self, nodes: Iterable[NodeFacts] = ()) -> None:
        self.nodes: dict[str, NodeFacts] = {}
        self.version = 0
        self.offers_version = 0
        self.models_version = 0
        self._by_config: dict[str, _Bucket] = {}
        self._by_gpus: dict[frozenset[str], _Bucket] = {}  # GPU nodes by their models' device IDs
        self._groups: dict[GroupKey, _Bucket] = {}  # nodes with a config, by (config, GPUs, exact)
        self._groups_of: dict[str, set[GroupKey]] = {}  # config -> its group keys
        self._models: Counter[GpuModel] = Counter()  # GPU nodes per model
        self._offers: Counter[str] = Counter()  # nodes per MIG resource offered
        self._config_models: Counter[str] = Counter()  # nodes with a config, per device ID of their models
        for node in nodes:
            self.put(node)

    # ------------------------------------------------------------------ updates
    def put(self, node: NodeFacts) -> None:
        old = self.nodes.get(node.name)
        if old == node:
            return
        if old is not None:
            self._unindex(old)
        self.nodes[node.name] = node
        self._index(node)
        if old is None or _placed(old) != _placed(node):
            self.version += 1

    def remove(self, name: str) -> None:
        old = self.nodes.pop(name, None)
        if old is not None:
            self._unindex(old)
            self.version += 1

    def _index(self, node: NodeFacts) -> None:
        if node.config:
            self._by_config.setdefault(node.config, _Bucket()).put(node)
            key = (node.config, node.device_ids, node.exact)
            self._groups.setdefault(key, _Bucket()).put(node)
            self._groups_of.setdefault(node.config, set()).add(key)
            for device_id in node.model_ids:
                self._config_models[device_id] += 1
        if node.gpus:
            self._by_gpus.setdefault(node.model_ids, _Bucket()).put(node)
            for model in node.models:
                self._models[model] += 1
                if self._models[model] == 1:
                    self.models_version += 1
        for res in node.offers:
            self._offers[res] += 1
            if self._offers[res] == 1:
                self.offers_version += 1

    def _unindex(self, node: NodeFacts) -> None:
        if node.config:
            if self._by_config[node.config].drop(node.name):
                del self._by_config[node.config]
            key = (node.config, node.device_ids, node.exact)
            if self._groups[key].drop(node.name):
                del self._groups[key]
                keys = self._groups_of[node.config]
                keys.discard(key)
                if not keys:
                    del self._groups_of[node.config]
            for device_id in node.model_ids:
                _decrement(self._config_models, device_id)
        if node.gpus:
            if self._by_gpus[node.model_ids].drop(node.name):
                del self._by_gpus[node.model_ids]
            for model in node.models:
                if _decrement(self._models, model):
                    self.models_version += 1
        for res in node.offers:
            if _decrement(self._offers, res):
                self.offers_version += 1

    # ------------------------------------------------------------------ reading
    def users(self) -> dict[str, tuple[NodeFacts, ...]]:
        """Config name -> the nodes whose nvidia.com/mig.config names it (name order), the configs in
        the order of their first node's name (as a scan of the nodes in name order finds them)."""
        buckets = sorted(self._by_config.items(), key=lambda item: item[1].first())
        return {name: bucket.sorted() for name, bucket in buckets}

    def users_of(self, config: str) -> tuple[NodeFacts, ...]:
        bucket = self._by_config.get(config)
        return bucket.sorted() if bucket is not None else ()

    def groups(self, config: str) -> list[tuple[tuple[str, ...], bool, tuple[NodeFacts, ...]]]:
        """The nodes selecting `config`, by the GPUs they are judged on: (device IDs, exact, nodes),
        groups in the order of their first node's name."""
        found = [(key[1], key[2], self._groups[key].sorted()) for key in self._groups_of.get(config, ())]
        return sorted(found, key=lambda g: g[2][0].name)

    def configs(self) -> list[str]:
        return list(self._by_config)

    def configured(self) -> NodeSample:
        """Every node that has a config, in name order."""
        return NodeSample([b.sorted() for b in self._by_config.values()])

    def not_served(self, fit: frozenset[str] | set[str], config: str) -> NodeSample:
        """GPU nodes with a model outside `fit` (device IDs) that do not select `config` themselves."""
        parts = [b for ids, b in self._by_gpus.items() if not ids <= fit]
        count = sum(len(b.nodes) for b in parts)
        count -= sum(len(self._groups[k].nodes) for k in self._groups_of.get(config, ()) if not frozenset(k[1]) <= fit)
        return NodeSample([b.sorted() for b in parts], count, keep=lambda n: n.config != config)

    @property
    def models_present(self) -> frozenset[GpuModel]:
        return frozenset(self._models)

    @property
    def offered(self) -> frozenset[str]:
        return frozenset(self._offers)

    @property
    def config_models(self) -> frozenset[str]:
        """Device IDs of the GPU models of the nodes that select a config."""
        return frozenset(self._config_models)

    def view(self) -> dict[str, Any]:
        """Everything the indexes answer, as plain values (the property tests compare it with a rebuild)."""
        return {
            "nodes": dict(self.nodes),
            "users": {k: [n.name for n in v] for k, v in self.users().items()},
            "users order": list(self.users()),
            "groups": {
                c: [(ids, exact, [n.name for n in ns]) for ids, exact, ns in self.groups(c)] for c in self._by_config
            },
            "configured": [n.name for n in self.configured()],
            "gpu sets": {ids: [n.name for n in b.sorted()] for ids, b in self._by_gpus.items()},
            "models": self.models_present,
            "offered": self.offered,
            "config models": self.config_models,
        }


def _placed(node: NodeFacts) -> tuple:
    """What ConfigMap and ClusterPolicy rules read of a node (not what it offers)."""
    return node.config, node.gpus, node.exact, node.gpu_problem


def _decrement(counter: Counter, key: Any) -> bool:
    """Count one less; True when that was the last one."""
    counter[key] -= 1
    if counter[key] <= 0:
        del counter[key]
        return True
    return False


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
class Snapshot:
    """What a review reads: the MigView (immutable) and the Placement indexes (live: read them only
    while the state's lock is held, as app.py does around a review)."""

    def __init__(
        self,
        mig: MigView,
        placement: Placement,
        migsyncs: Mapping[str, MigSyncRef] | None = None,
        reconciler_users: frozenset[str] = frozenset(),
        policies: tuple[Mapping[str, Any], ...] = (),
    ) -> None:
        self.mig = mig
        self.placement = placement
        self.migsyncs = migsyncs if migsyncs is not None else {}
        self.reconciler_users = reconciler_users  # who may write what git owns (the reconciler's identities)
        # Every ClusterPolicy (trimmed; a few): what is in force once the one in force is deleted.
        self.policies = policies

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
        `version` is not used (versions live in the Placement); kept for the callers' signature."""
        policies = tuple(policies)
        settings = settings_from_policies(policies)
        active = None
        for cm in configmaps:
            meta = objects.meta(cm)
            if (meta.get("namespace"), meta.get("name")) == settings.configmap:
                active = cm
        refs = {object_key(m): ref for m in migsyncs if (ref := migsync_ref(m)) is not None}
        return cls(
            MigView(settings, active),
            Placement(NodeFacts.from_obj(n) for n in nodes),
            refs,
            frozenset(reconciler_users),
            tuple(trim_policy(dict(p)) for p in policies),
        )

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

    # the nodes, through the indexes
    @property
    def users(self) -> dict[str, tuple[NodeFacts, ...]]:
        """Config name -> the nodes whose nvidia.com/mig.config names it."""
        return self.placement.users()

    def groups(self, config: str) -> list[tuple[tuple[str, ...], bool, tuple[NodeFacts, ...]]]:
        return self.placement.groups(config)

    def configured(self) -> NodeSample:
        return self.placement.configured()

    def not_served(self, fit: frozenset[str] | set[str], config: str) -> NodeSample:
        return self.placement.not_served(fit, config)

    @property
    def models_present(self) -> frozenset[GpuModel]:
        return self.placement.models_present

    @property
    def offered(self) -> frozenset[str]:
        return self.placement.offered

    @property
    def config_models(self) -> frozenset[str]:
        return self.placement.config_models

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
        self.lock = threading.RLock()
        self._placement = Placement()
        self._policies: dict[str, Obj] = {}
        self._policy_list: tuple[Obj, ...] = ()  # replaced per event: a review holds the old one
        self._configmap_obj: Obj | None = None
        self._mig = MigView(MigSettings(), None)
        self._migsyncs: dict[str, MigSyncRef] = {}
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
        import time

        deadline = time.monotonic() + timeout
        while not self.synced:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)
        return True

    # --------------------------------------------------------------------------- reading
    def snapshot(self) -> Snapshot:
        """The current view: O(1). Read its nodes while holding `lock` (app.py holds it per review)."""
        return Snapshot(self._mig, self._placement, self._migsyncs, self.reconciler_users, self._policy_list)

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
                self._placement.remove(view.name)
            else:
                self._placement.put(view)

    def _policy_event(self, kind: str, obj: Obj) -> None:
        key = object_key(obj)
        with self.lock:
            if kind == "DELETED":
                self._policies.pop(key, None)
            else:
                self._policies[key] = obj
            self._policy_list = tuple(self._policies.values())
            settings = settings_from_policies(self._policies.values())
            if settings != self._mig.settings:
                active = self._configmap_obj if settings.configmap == self._configmap_target else None
                self._mig = MigView(settings, active)
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
                    self._mig = MigView(self._mig.settings, current)

        return handle

    def _migsync_event(self, kind: str, obj: Obj) -> None:
        key = object_key(obj)
        ref = None if kind == "DELETED" else migsync_ref(obj)
        with self.lock:
            if self._migsyncs.get(key) == ref:
                return
            found = dict(self._migsyncs)  # replaced, not changed: a review holds the old one (a few MigSyncs)
            if ref is None:
                found.pop(key, None)
            else:
                found[key] = ref
            self._migsyncs = found

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
            self._mig = MigView(self._mig.settings, None)
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

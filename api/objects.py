"""Kubernetes objects as the parts read them: one reader per kind, frozen views, written once.

Built from an object as the client returns it: a dict (the informers' cache, an AdmissionReview, a
custom object) or one of the client's generated models (`read_node`), which `as_mapping` turns into
the API's own JSON shape. Every accessor tolerates a missing or malformed part (a review may hold
anything; the API server's schema stops most of it first) and reads it as absent.

- `meta`, `labels`, `annotations_of`: an object's metadata, instead of `obj.get("metadata") or {}`;
- `managed_entries`, `owned_keys`: managedFields (server-side apply), the one reader;
- `NodeFacts.from_obj`: what a Node shows of its GPUs, MIG config, state and management, read by the
  webhook, the reconciler, the agent and gitops alike;
- `MigSettings` (`settings_from_policies`): the GPU Operator's ClusterPolicy in force, its MIG strategy
  parsed once to `Strategy`;
- `GpuOperator`: which of the GPU Operator's stacks the cluster runs (its ClusterPolicies and GPUCluster).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from functools import cache
from typing import Any

from migops.api.names import (
    AGENT_ANNOTATIONS,
    APPLIED_ANNOTATION,
    CONFIGMAP_KEY,
    DEVICE_ID_LABEL,
    DIGEST_ANNOTATION,
    DRIFT_ANNOTATION,
    GPU_COUNT_LABEL,
    GPU_PRODUCT_LABEL,
    GPUS_ANNOTATION,
    MANAGED_BY_ANNOTATION,
    MIG_CONFIG_LABEL,
    MIG_CONFIG_STATE_LABEL,
    REASON_ANNOTATION,
    RECONCILER_MANAGER,
    REVISION_ANNOTATION,
    UNMANAGED_LABEL,
)
from migops.mig.catalogue import Catalogue, GpuModel, UnknownGpuError
from migops.mig.gfd import NodeGpus, mig_offers, read_gpus
from migops.mig.strategy import Strategy, as_strategy

_EMPTY: Mapping[str, Any] = {}


# ------------------------------------------------------------------------------------------ metadata
def as_mapping(obj: object) -> Mapping[str, Any]:
    """`obj` as a mapping in the API's JSON shape (camelCase keys); {} for None or anything else."""
    if type(obj) is dict or isinstance(obj, Mapping):  # a dict first: the ABC check costs ten times more
        return obj
    if obj is None or not hasattr(obj, "to_dict"):
        return _EMPTY
    found = _serializer().sanitize_for_serialization(obj)
    return found if isinstance(found, Mapping) else _EMPTY


@cache
def _serializer() -> Any:
    """An ApiClient used only for its serializer (a generated model's attribute map gives the JSON
    names); made once, it connects nowhere."""
    from kubernetes import client as k8s

    return k8s.ApiClient()


def _part(value: object) -> Mapping[str, Any]:
    if type(value) is dict:  # the usual case, without the ABC check
        return value
    return value if isinstance(value, Mapping) else _EMPTY


def meta(obj: object) -> Mapping[str, Any]:
    """metadata, {} when absent or malformed."""
    return _part(as_mapping(obj).get("metadata"))


def labels(obj: object) -> Mapping[str, Any]:
    """metadata.labels, {} when absent or malformed."""
    return _part(meta(obj).get("labels"))


def annotations_of(obj: object) -> Mapping[str, Any]:
    """metadata.annotations, {} when absent or malformed. Not named `annotations`: `from __future__
    import annotations` binds that name in every module."""
    return _part(meta(obj).get("annotations"))


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def is_unmanaged(obj: object) -> bool:
    """A person took the object out of management (migops.io/unmanaged=true): on a node, the reconciler
    leaves it and the webhook lets anyone set its nvidia.com/mig.config; on the MIG ConfigMap in force,
    the reconciler never writes it and the webhook lets anyone write its config.yaml."""
    return labels(obj).get(UNMANAGED_LABEL) == "true"


def config_text(obj: object) -> str | None:
    """A MIG ConfigMap's data."config.yaml", None when absent or not a string."""
    data = obj.get("data") if isinstance(obj, Mapping) else None
    return _text(data.get(CONFIGMAP_KEY)) if isinstance(data, Mapping) else None


# ------------------------------------------------------------------------------------------ label selectors
@dataclass(frozen=True)
class Requirement:
    """metav1.LabelSelectorRequirement: In, NotIn, Exists, DoesNotExist."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.operator == "In":
            return labels.get(self.key) in self.values
        if self.operator == "NotIn":
            return self.key not in labels or labels[self.key] not in self.values
        if self.operator == "Exists":
            return self.key in labels
        return self.key not in labels  # DoesNotExist


@dataclass(frozen=True)
class LabelSelector:
    """metav1.LabelSelector: matchLabels and matchExpressions, ANDed. Empty matches every node."""

    match_labels: tuple[tuple[str, str], ...] = ()
    match_expressions: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in self.match_labels) and all(
            r.matches(labels) for r in self.match_expressions
        )


# ------------------------------------------------------------------------------------------ managedFields
@dataclass(frozen=True)
class ManagedEntry:
    """One managedFields entry: which manager owns which fields, by which operation."""

    manager: str
    operation: str
    subresource: str | None
    time: str | None
    fields: Mapping[str, Any]  # fieldsV1

    def keys(self, path: Sequence[str]) -> frozenset[str]:
        """Keys of the map at `path` (e.g. ("metadata", "labels")) this entry owns."""
        fields = self.fields
        for part in path:
            fields = _part(fields.get(f"f:{part}"))
        return frozenset(k[2:] for k in fields if isinstance(k, str) and k.startswith("f:"))

    @property
    def timestamp(self) -> float | None:
        """`time` in unix seconds, None when absent or unreadable."""
        if not self.time:
            return None
        try:
            return datetime.fromisoformat(self.time.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return None


def _entry(raw: Mapping[str, Any]) -> ManagedEntry:
    return ManagedEntry(
        str(raw.get("manager") or ""),
        str(raw.get("operation") or ""),
        _text(raw.get("subresource")) or None,
        None if raw.get("time") is None else str(raw.get("time")),
        _part(raw.get("fieldsV1")),
    )


def _raw_entries(obj: object) -> Iterator[Mapping[str, Any]]:
    found = meta(obj).get("managedFields")
    for raw in found if isinstance(found, list) else ():
        if isinstance(raw, dict) or isinstance(raw, Mapping):
            yield raw


def managed_entries(obj: object) -> tuple[ManagedEntry, ...]:
    """metadata.managedFields, every entry (malformed ones left out)."""
    return tuple(_entry(raw) for raw in _raw_entries(obj))


def _entries_of(obj: object, manager: str, operation: str, subresource: str | None) -> Iterator[ManagedEntry]:
    """The entries of one manager and operation on the object itself or one subresource (matched on the
    raw entry first: a Node has a dozen managers' entries, and only ours is read)."""
    for raw in _raw_entries(obj):
        if raw.get("manager") == manager and raw.get("operation") == operation:
            entry = _entry(raw)
            if entry.subresource == subresource:
                yield entry


def owned_keys(
    obj: object, manager: str, path: Sequence[str], *, subresource: str | None = None, operation: str = "Apply"
) -> set[str]:
    """Keys of the map at `path` that `manager` owns in `obj`'s managedFields. A manager that applies
    must send every field it owns each time (a field left out is removed); a restarted process learns
    here what its predecessor owned, so its first apply does not drop them."""
    keys: set[str] = set()
    for entry in _entries_of(obj, manager, operation, subresource):
        keys.update(entry.keys(path))
    return keys


def label_owner_entry(obj: object, manager: str, label: str) -> ManagedEntry | None:
    """`manager`'s Apply entry on the object itself that owns metadata.labels[`label`], if any."""
    raw = _label_owner(meta(obj).get("managedFields"), manager, "f:" + label)
    return None if raw is None else _entry(raw)


def _label_owner(managed: object, manager: str, field: str) -> Mapping[str, Any] | None:
    """The raw entry (every Node read asks, thousands per sync: no entry is built for it)."""
    for raw in managed if isinstance(managed, list) else ():
        if (
            isinstance(raw, dict)
            and raw.get("manager") == manager
            and raw.get("operation") == "Apply"
            and not raw.get("subresource")
            and field in _part(_part(_part(raw.get("fieldsV1")).get("f:metadata")).get("f:labels"))
        ):
            return raw
    return None


# ------------------------------------------------------------------------------------------ nodes
_CONFIG_LABEL_FIELD = "f:" + MIG_CONFIG_LABEL
_LABELS_READ = (
    MIG_CONFIG_LABEL,
    MIG_CONFIG_STATE_LABEL,
    UNMANAGED_LABEL,
    DEVICE_ID_LABEL,
    GPU_PRODUCT_LABEL,
    GPU_COUNT_LABEL,
)
_ANNOTATIONS_READ = (
    DIGEST_ANNOTATION,
    APPLIED_ANNOTATION,
    REASON_ANNOTATION,
    DRIFT_ANNOTATION,
    MANAGED_BY_ANNOTATION,
    REVISION_ANNOTATION,
    GPUS_ANNOTATION,
)


@dataclass(frozen=True)
class GpuReading:
    """Which GPUs a node holds, as `migops.mig.gfd.read_gpus` reads its labels and annotation."""

    gpus: tuple[GpuModel, ...]  # index order when `exact`; one per model otherwise; () when unknown
    exact: bool
    problem: str | None  # why the GPUs are unknown (a device ID the catalogue lacks)

    @classmethod
    def of(cls, gpus: tuple[GpuModel, ...], exact: bool, problem: str | None) -> GpuReading:
        return cls(gpus, exact, problem, tuple(dict.fromkeys(gpus)), tuple(g.device_id for g in gpus))

    models: tuple[GpuModel, ...] = ()  # each model once, in order
    device_ids: tuple[str, ...] = ()  # the GPUs' device IDs in order

    @property
    def model_ids(self) -> frozenset[str]:
        return frozenset(self.device_ids)


@dataclass(frozen=True)
class NodeFacts:
    """One Node as every part reads it: its MIG config label and state, the agent's annotations, who
    manages it, what names its GPUs and which MIG resources it offers. The GPUs themselves are read on
    first use (`gpus`, `exact`, `gpu_problem`): the reconciler's plan never needs them."""

    name: str
    config: str | None  # nvidia.com/mig.config
    state: str | None  # nvidia.com/mig.config.state
    digest: str | None  # migops.io/mig.config.digest: of the content the agent applied
    applied: str | None  # migops.io/mig.config.applied: the config name it applied
    reason: str | None  # migops.io/mig.config.reason: why the last attempt failed
    drift: str | None  # migops.io/mig.drift: what differs between the GPUs and the applied config
    managed_by: str | None  # migops.io/managed-by: "<namespace>/<migsync>" that owns its config label
    revision: str | None  # migops.io/mig.config.revision: the revision that gave it its label
    agent: bool  # run by the migops agent (it annotates), else by mig-manager or nothing
    unmanaged: bool  # migops.io/unmanaged=true
    owned: bool  # the reconciler's field manager owns its config label (managedFields)
    config_written: str | None  # when it last applied that label (managedFields time)
    # What names its GPUs (read_gpus' inputs, kept so the reading is lazy and the value comparable).
    gpus_listed: str | None = None  # migops.io/gpus
    device_id: str | None = None  # migops.io/gpu.device-id
    product: str | None = None  # nvidia.com/gpu.product
    gpu_count: str | None = None  # nvidia.com/gpu.count
    offers: frozenset[str] = frozenset()  # MIG resources (nvidia.com/mig-<profile>) it advertises now

    @classmethod
    def from_obj(cls, obj: object, *, offers: bool = True) -> NodeFacts:
        """From a Node (the cache's trimmed one, a review's, the client's model). `offers=False` skips
        reading the MIG resources offered (a scan of every label) for readers that never use them."""
        node = as_mapping(obj)
        m = meta(node)
        lab, notes = _part(m.get("labels")), _part(m.get("annotations"))
        # Read once per Node per sync by the reconciler (thousands of nodes): one pass per mapping.
        config, state, unmanaged, device_id, product, count = [
            v if isinstance(v, str) else None for v in map(lab.get, _LABELS_READ)
        ]
        digest, applied, reason, drift, managed_by, revision, listed = [
            v if isinstance(v, str) else None for v in map(notes.get, _ANNOTATIONS_READ)
        ]
        entry = _label_owner(m.get("managedFields"), RECONCILER_MANAGER, _CONFIG_LABEL_FIELD)
        # Every field, in order, straight into the instance's dict: a frozen dataclass's __init__ sets
        # each of its 18 fields through object.__setattr__, half the cost of a read.
        facts = object.__new__(cls)
        facts.__dict__.update(
            zip(
                _NODE_FIELDS,
                (
                    str(m.get("name")),
                    config,
                    state,
                    digest,
                    applied,
                    reason,
                    drift,
                    managed_by,
                    revision,
                    any(map(notes.__contains__, AGENT_ANNOTATIONS)),
                    unmanaged == "true",
                    entry is not None,
                    None if entry is None or entry.get("time") is None else str(entry["time"]),
                    listed,
                    device_id,
                    product,
                    count,
                    mig_offers(lab, _part(_part(node.get("status")).get("capacity"))) if offers else frozenset(),
                ),
                strict=True,
            )
        )
        return facts

    # ------------------------------------------------------------------ management
    @property
    def label_written_at(self) -> float | None:
        """When the reconciler last wrote the config label, unix seconds."""
        if self.config_written is None:
            return None
        return ManagedEntry(RECONCILER_MANAGER, "Apply", None, self.config_written, _EMPTY).timestamp

    # ------------------------------------------------------------------ GPUs
    def read_gpus(self, cat: Catalogue | None = None) -> NodeGpus | None:
        """Its GPUs (docs/interfaces.md); None when nothing names one. Raises UnknownGpuError for a
        device ID or product the catalogue cannot resolve."""
        # read_gpus reads a value that is not a string (None here) as absent.
        found = {GPU_PRODUCT_LABEL: self.product, DEVICE_ID_LABEL: self.device_id, GPU_COUNT_LABEL: self.gpu_count}
        return read_gpus(found, {GPUS_ANNOTATION: self.gpus_listed}, cat)

    @property
    def reading(self) -> GpuReading:
        """Read on first use and kept (in the instance's dict: a cached_property takes a lock per read
        on Python 3.11, and the webhook's indexes read these per node event)."""
        found: GpuReading | None = self.__dict__.get("_reading")
        if found is None:
            try:
                gpus = self.read_gpus()
                found = GpuReading.of(gpus.gpus, gpus.exact, None) if gpus else GpuReading.of((), False, None)
            except UnknownGpuError as exc:
                found = GpuReading.of((), False, str(exc))
            self.__dict__["_reading"] = found
        return found

    @property
    def gpus(self) -> tuple[GpuModel, ...]:
        return self.reading.gpus

    @property
    def exact(self) -> bool:
        return self.reading.exact

    @property
    def gpu_problem(self) -> str | None:
        return self.reading.problem

    @property
    def models(self) -> tuple[GpuModel, ...]:
        return self.reading.models

    @property
    def model_ids(self) -> frozenset[str]:
        """The device IDs of its GPU models (the catalogue's key for a model)."""
        found: frozenset[str] | None = self.__dict__.get("_model_ids")
        if found is None:
            found = self.__dict__["_model_ids"] = self.reading.model_ids
        return found

    @property
    def device_ids(self) -> tuple[str, ...]:
        """Its GPUs' device IDs in order: with `exact`, what a config is judged on."""
        return self.reading.device_ids

    def describe(self) -> str:
        if not self.gpus:
            return "GPUs unknown"
        counts: dict[str, int] = {}
        for g in self.gpus:
            counts[g.name] = counts.get(g.name, 0) + 1
        return ", ".join(f"{c} x {n}" if self.exact else n for n, c in counts.items())


_NODE_FIELDS = tuple(f.name for f in fields(NodeFacts))


def node_gpus(node: object, cat: Catalogue | None = None) -> NodeGpus | None:
    """The node's GPUs; None when nothing on the node names a GPU. Raises UnknownGpuError for a
    device ID or product that the catalogue cannot resolve."""
    return read_gpus(labels(node), annotations_of(node), cat)


# ------------------------------------------------------------------------------------------ ClusterPolicy
DEFAULT_STRATEGY: Strategy = "single"  # the ClusterPolicy CRD's default for spec.mig.strategy
DEFAULT_CONFIG_NAME = "default-mig-parted-config"
DEFAULT_NAMESPACE = "gpu-operator"
DEFAULT_CONFIG = "all-disabled"


@dataclass(frozen=True)
class MigSettings:
    """The GPU Operator's MIG settings, from the ClusterPolicy in force (docs/interfaces.md). The
    strategy is parsed here, once: `strategy` is None when the policy names none of the three (then
    `strategy_text` is what it says, for messages)."""

    strategy: Strategy | None = DEFAULT_STRATEGY
    config_name: str = DEFAULT_CONFIG_NAME  # the MIG config ConfigMap
    namespace: str = DEFAULT_NAMESPACE  # where it lives: the operator's namespace
    default_config: str = DEFAULT_CONFIG  # what the operator labels new MIG-capable nodes with
    policy: str | None = None  # the ClusterPolicy read, None when there is none
    invalid_strategy: str | None = None  # spec.mig.strategy as written, when it is not a Strategy

    @property
    def configmap(self) -> tuple[str, str]:
        """(namespace, name) of the MIG config ConfigMap."""
        return self.namespace, self.config_name

    @property
    def strategy_text(self) -> str:
        """The strategy as the ClusterPolicy writes it."""
        return self.strategy if self.strategy is not None else str(self.invalid_strategy)

    @classmethod
    def from_obj(cls, policy: object) -> MigSettings:
        """The settings one ClusterPolicy gives."""
        obj = as_mapping(policy)
        spec = _part(obj.get("spec"))
        manager = _part(_part(spec.get("migManager")).get("config"))
        written = _part(spec.get("mig")).get("strategy") or DEFAULT_STRATEGY
        strategy = as_strategy(written)
        return cls(
            strategy=strategy,
            config_name=manager.get("name") or DEFAULT_CONFIG_NAME,
            namespace=_part(obj.get("status")).get("namespace") or DEFAULT_NAMESPACE,
            default_config=manager.get("default") or DEFAULT_CONFIG,
            policy=meta(obj).get("name"),
            invalid_strategy=None if strategy is not None else str(written),
        )


def settings_from_policies(policies: Iterable[object]) -> MigSettings:
    """The settings of the oldest ClusterPolicy (the operator acts on one and reports the others as
    ignored, and so do we); defaults when there is none."""
    chosen = sorted(policies, key=lambda p: (meta(p).get("creationTimestamp") or "", meta(p).get("name") or ""))
    return MigSettings.from_obj(chosen[0]) if chosen else MigSettings()


# ------------------------------------------------------------------------------------------ GPUCluster
DYNAMIC_MIG_GATE = "DynamicMIG"  # the DRA driver's feature gate that creates MIG devices per claim


@dataclass(frozen=True)
class GpuOperator:
    """Which of the GPU Operator's two stacks the cluster runs: the ClusterPolicy's (device plugin, MIG
    Manager: the stack migops drives) or the GPUCluster's (GPU Operator 26.7+: NVIDIA's DRA driver and no
    MIG Manager, so MIG on its nodes is the DRA stack's). The operator refuses both at once: while both
    exist it reconciles neither (each reports notReady) and labels no node (v26.7.0's controllers)."""

    policies: tuple[str, ...] = ()  # ClusterPolicy names, the one in force first
    gpu_cluster: str | None = None
    dynamic_mig: bool = False  # spec.draDriver.featureGates.DynamicMIG
    state: str | None = None  # the GPUCluster's status.state: ready, notReady, disabled
    waiting: str | None = None  # the message of its Ready condition when that is not True

    @classmethod
    def from_objects(cls, policies: Iterable[object], gpu_clusters: Iterable[object]) -> GpuOperator:
        chosen = sorted(policies, key=lambda p: (meta(p).get("creationTimestamp") or "", meta(p).get("name") or ""))
        found = [as_mapping(g) for g in gpu_clusters]
        if not found:
            return cls(tuple(str(meta(p).get("name")) for p in chosen))
        obj = found[0]
        gates = _part(_part(_part(obj.get("spec")).get("draDriver")).get("featureGates"))
        status = _part(obj.get("status"))
        conditions = status.get("conditions")
        ready = (
            [_part(c) for c in conditions if _part(c).get("type") == "Ready"] if isinstance(conditions, list) else []
        )
        waiting = next((str(c.get("message")) for c in ready if c.get("status") != "True" and c.get("message")), None)
        return cls(
            tuple(str(meta(p).get("name")) for p in chosen),
            str(meta(obj).get("name")),
            gates.get(DYNAMIC_MIG_GATE) is True,
            _text(status.get("state")),
            waiting,
        )

    @property
    def conflict(self) -> str | None:
        """What an operator must be told when both stacks are declared; None otherwise."""
        if not (self.policies and self.gpu_cluster):
            return None
        return (
            f"both ClusterPolicy {self.policies[0]} and GPUCluster {self.gpu_cluster} exist: the GPU Operator "
            "reconciles neither while both do (each reports notReady) and labels no node; delete the one you do "
            "not mean to run"
        )

    def describe(self) -> str:
        """One line: the stack in force and what migops does under it."""
        if self.gpu_cluster is None:
            if not self.policies:
                return "no ClusterPolicy or GPUCluster (the GPU Operator's defaults apply)"
            return f"ClusterPolicy {self.policies[0]}: MIG Manager's stack, whose node labels migops writes"
        mode = "DynamicMIG on" if self.dynamic_mig else "static MIG"
        state = (f", {self.state}" if self.state else "") + (f": {self.waiting}" if self.waiting else "")
        return (
            f"GPUCluster {self.gpu_cluster} (the DRA stack: NVIDIA's DRA driver, {mode}{state}): MIG on the nodes it "
            "runs the DRA driver on is the DRA stack's; migops leaves them alone"
        )

"""Every Node as the rules see it, indexed: written one event at a time (`NodeIndexer`), read as frozen
values (`NodeIndex`, `NodeSummary`) that a review holds without any lock.

A Node event replaces that node's NodeFacts in the indexer's buckets (nodes per config name, per GPU
set, per (config, GPUs) group) and counts (GPU models, MIG resources, config models present), in O(1)
plus the node's own labels. What the rules read is frozen from them:
- `NodeSummary`, replaced on every change of what Pod and DRA rules read (the MIG resources offered,
  the GPU models present) or of a node's config or GPUs (the versions): a few sets, made per change;
- `NodeIndex`, the buckets as name-sorted tuples, made on the first read after a change, re-sorting
  only the buckets that changed: a rollout of 10,000 nodes, whose Node reviews read no other node,
  never pays for it; a ConfigMap review reads it.

Versions say what changed, so verdicts are cached under what they read: `version` when any node's
config or GPUs (what ConfigMap and ClusterPolicy rules read) change, `offers_version` when the set of
MIG resources offered anywhere changes, `models_version` when the set of GPU models present changes
(what Pod rules read). A kubelet heartbeat or an agent's capacity update that offers nothing new
changes none of them.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from migops.api.objects import NodeFacts
from migops.mig.catalogue import GpuModel

GroupKey = tuple[str, tuple[str, ...], bool]  # (config, device IDs in order, exact)
Nodes = tuple[NodeFacts, ...]  # in name order


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


@dataclass(frozen=True)
class NodeSummary:
    """What Pod and DRA rules read of the nodes, and the versions every verdict that reads nodes is
    cached under."""

    changes: int = 0  # every change of a node's facts: a new index (and a new snapshot) to read
    version: int = 0
    offers_version: int = 0
    models_version: int = 0
    offered: frozenset[str] = frozenset()  # MIG resources some node offers
    models_present: frozenset[GpuModel] = frozenset()  # GPU models of the GPU nodes
    config_models: frozenset[str] = frozenset()  # device IDs of the models of the nodes that select a config


@dataclass(frozen=True)
class NodeIndex:
    """The indexes as they were at one `summary.version`: immutable, read without a lock."""

    summary: NodeSummary = NodeSummary()
    nodes: Mapping[str, NodeFacts] = field(default_factory=dict)
    by_config: Mapping[str, Nodes] = field(default_factory=dict)
    by_gpus: Mapping[frozenset[str], Nodes] = field(default_factory=dict)  # GPU nodes by their models' device IDs
    by_group: Mapping[GroupKey, Nodes] = field(default_factory=dict)  # nodes with a config, by (config, GPUs, exact)
    groups_of: Mapping[str, frozenset[GroupKey]] = field(default_factory=dict)  # config -> its group keys

    @property
    def version(self) -> int:
        return self.summary.version

    def users(self) -> dict[str, Nodes]:
        """Config name -> the nodes whose nvidia.com/mig.config names it (name order), the configs in
        the order of their first node's name (as a scan of the nodes in name order finds them)."""
        return dict(sorted(self.by_config.items(), key=lambda item: item[1][0].name))

    def users_of(self, config: str) -> Nodes:
        return self.by_config.get(config, ())

    def groups(self, config: str) -> list[tuple[tuple[str, ...], bool, Nodes]]:
        """The nodes selecting `config`, by the GPUs they are judged on: (device IDs, exact, nodes),
        groups in the order of their first node's name."""
        found = [(key[1], key[2], self.by_group[key]) for key in self.groups_of.get(config, ())]
        return sorted(found, key=lambda g: g[2][0].name)

    def configs(self) -> list[str]:
        return list(self.by_config)

    def configured(self) -> NodeSample:
        """Every node that has a config, in name order."""
        return NodeSample(self.by_config.values())

    def not_served(self, fit: frozenset[str] | set[str], config: str) -> NodeSample:
        """GPU nodes with a model outside `fit` (device IDs) that do not select `config` themselves."""
        parts = [b for ids, b in self.by_gpus.items() if not ids <= fit]
        count = sum(len(b) for b in parts)
        count -= sum(len(self.by_group[k]) for k in self.groups_of.get(config, ()) if not frozenset(k[1]) <= fit)
        return NodeSample(parts, count, keep=lambda n: n.config != config)

    def view(self) -> dict[str, Any]:
        """Everything the index answers, as plain values (the property tests compare it with a rebuild)."""
        return {
            "nodes": dict(self.nodes),
            "users": {k: [n.name for n in v] for k, v in self.users().items()},
            "users order": list(self.users()),
            "groups": {
                c: [(ids, exact, [n.name for n in ns]) for ids, exact, ns in self.groups(c)] for c in self.by_config
            },
            "configured": [n.name for n in self.configured()],
            "gpu sets": {ids: [n.name for n in b] for ids, b in self.by_gpus.items()},
            "models": self.summary.models_present,
            "offered": self.summary.offered,
            "config models": self.summary.config_models,
        }


class _Buckets:
    """Nodes by a key, each bucket a dict by name; the keys changed since the last freeze."""

    def __init__(self) -> None:
        self.items: dict[Any, dict[str, NodeFacts]] = {}
        self.changed: set[Any] = set()

    def put(self, key: Any, node: NodeFacts) -> None:
        self.items.setdefault(key, {})[node.name] = node
        self.changed.add(key)

    def drop(self, key: Any, name: str) -> None:
        bucket = self.items[key]
        bucket.pop(name, None)
        if not bucket:
            del self.items[key]
        self.changed.add(key)

    def frozen(self, before: Mapping[Any, Nodes]) -> dict[Any, Nodes]:
        """`before` with the changed buckets sorted anew."""
        found = {k: v for k, v in before.items() if k in self.items}
        for key in self.changed:
            bucket = self.items.get(key)
            if bucket is not None:
                found[key] = tuple(sorted(bucket.values(), key=lambda n: n.name))
        self.changed.clear()
        return found


class NodeIndexer:
    """The one writer of the node index: `put` and `remove` per Node event, `summary` and `index()`
    for readers (any thread)."""

    def __init__(self, nodes: Iterable[NodeFacts] = ()) -> None:
        self._lock = threading.Lock()
        self._nodes: dict[str, NodeFacts] = {}
        self._by_config, self._by_gpus, self._by_group = _Buckets(), _Buckets(), _Buckets()
        self._groups_of: dict[str, set[GroupKey]] = {}
        self._models: Counter[GpuModel] = Counter()  # GPU nodes per model
        self._offers: Counter[str] = Counter()  # nodes per MIG resource offered
        self._config_models: Counter[str] = Counter()  # nodes with a config, per device ID of their models
        self.summary = NodeSummary()
        self._last = NodeIndex()  # the last index made: its unchanged buckets are the next one's
        self._index: NodeIndex | None = self._last
        for node in nodes:
            self.put(node)

    # ------------------------------------------------------------------ writing
    def put(self, node: NodeFacts) -> None:
        with self._lock:
            old = self._nodes.get(node.name)
            if old == node:
                return
            moved = old is None or _placed(old) != _placed(node)
            if old is not None:
                self._unindex(old)
            self._nodes[node.name] = node
            self._index_node(node)
            self._changed(moved)

    def remove(self, name: str) -> None:
        with self._lock:
            old = self._nodes.pop(name, None)
            if old is not None:
                self._unindex(old)
                self._changed(True)

    def _changed(self, moved: bool) -> None:
        """A new summary (what readers see next) and a stale index."""
        s = self.summary
        offered, models, config_models = (
            frozenset(self._offers),
            frozenset(self._models),
            frozenset(self._config_models),
        )
        self.summary = NodeSummary(
            s.changes + 1,
            s.version + moved,
            s.offers_version + (offered != s.offered),
            s.models_version + (models != s.models_present),
            offered if offered != s.offered else s.offered,
            models if models != s.models_present else s.models_present,
            config_models if config_models != s.config_models else s.config_models,
        )
        self._index = None

    def _index_node(self, node: NodeFacts) -> None:
        if node.config:
            self._by_config.put(node.config, node)
            key = (node.config, node.device_ids, node.exact)
            self._by_group.put(key, node)
            self._groups_of.setdefault(node.config, set()).add(key)
            self._config_models.update(node.model_ids)
        if node.gpus:
            self._by_gpus.put(node.model_ids, node)
            self._models.update(node.models)
        self._offers.update(node.offers)

    def _unindex(self, node: NodeFacts) -> None:
        if node.config:
            self._by_config.drop(node.config, node.name)
            key = (node.config, node.device_ids, node.exact)
            self._by_group.drop(key, node.name)
            if key not in self._by_group.items:
                keys = self._groups_of[node.config]
                keys.discard(key)
                if not keys:
                    del self._groups_of[node.config]
            _subtract(self._config_models, node.model_ids)
        if node.gpus:
            self._by_gpus.drop(node.model_ids, node.name)
            _subtract(self._models, node.models)
        _subtract(self._offers, node.offers)

    # ------------------------------------------------------------------ reading
    def index(self) -> NodeIndex:
        """The index now: the last one made, or a new one when nodes changed since (O(the buckets that
        changed))."""
        with self._lock:
            found = self._index
            if found is None:
                before = self._last
                found = self._index = NodeIndex(
                    self.summary,
                    dict(self._nodes),
                    self._by_config.frozen(before.by_config),
                    self._by_gpus.frozen(before.by_gpus),
                    self._by_group.frozen(before.by_group),
                    {c: frozenset(keys) for c, keys in self._groups_of.items()},
                )
                self._last = found
            return found


def _placed(node: NodeFacts) -> tuple:
    """What ConfigMap and ClusterPolicy rules read of a node (not what it offers)."""
    return node.config, node.gpus, node.exact, node.gpu_problem


def _subtract(counter: Counter, keys: Iterable[Any]) -> None:
    """Count one less of each key; a key counted zero times is gone."""
    for key in keys:
        counter[key] -= 1
        if counter[key] <= 0:
            del counter[key]

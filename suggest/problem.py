"""The decision as the solver sees it: demand in classes, nodes in groups, and which class may use which
option of which group.

Pods with the same needs (profiles, count, priority, selectors, tolerations, CPU and memory) form one
class. Nodes form one group when the decision cannot tell them apart: the same options (config, what
each frees, GPUs it reconfigures) and, for every class, the same verdict on every option (labels the
class's selectors read, taints, allocatable CPU and memory). Labels no pending pod reads -- a node's
hostname, a zone nobody selects on -- do not split a group: a thousand nodes in one layout are one
group, counted by integers instead of one choice per node.

A group's counts are exact: within a group, per profile, the options are split into pools whose
options every class either may use or may not, and at most one device count above 1 competes for a
profile (pods needing 1 and 2 devices can share; then n pods of 2 fit on identical nodes exactly when
they fit by devices and by pairs per node). A group where pods needing 2 and 3 devices of one profile
compete is solved node by node.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from migops.suggest.model import Demand, NodeSupply, Option

# A variable of the model: ("y", group, option) nodes of the group taking the option; ("z", class, pool)
# pods of the class served by the pool.
Var = tuple[str, int, int]


@dataclass(frozen=True)
class Pool:
    group: int
    profile: str
    options: tuple[int, ...]  # option indices within the group
    classes: tuple[int, ...]  # the classes that may use these options for this profile


@dataclass(frozen=True)
class Decision:
    """What the solver decides: which option each group's nodes take, which pool serves each class."""

    classes: tuple[tuple[Demand, ...], ...]  # highest priority first; pods by namespace and name
    groups: tuple[tuple[str, ...], ...]  # node names, each group's in name order
    options: tuple[tuple[Option, ...], ...]  # per group: the options of its nodes (alike by construction)
    pools: tuple[Pool, ...]
    rank: Mapping[str, int]  # node name -> its place in name order

    @functools.cached_property
    def pools_of(self) -> tuple[tuple[int, ...], ...]:
        """Per group, the indices of its pools."""
        out: list[list[int]] = [[] for _ in self.groups]
        for i, pool in enumerate(self.pools):
            out[pool.group].append(i)
        return tuple(tuple(p) for p in out)

    def size(self, c: int) -> int:
        return len(self.classes[c])

    def count(self, c: int) -> int:
        return self.classes[c][0].count


def classes_of(demands: Sequence[Demand]) -> tuple[tuple[Demand, ...], ...]:
    by: dict[tuple[object, ...], list[Demand]] = defaultdict(list)
    for d in demands:
        key = (tuple(sorted(d.keys)), d.count, d.priority, d.node_selectors, d.tolerations, d.requests)
        by[key].append(d)
    out = [tuple(sorted(g, key=lambda d: (d.namespace, d.name))) for g in by.values()]
    return tuple(sorted(out, key=lambda g: (-g[0].priority, g[0].namespace, g[0].name)))


class _Admits:
    """Which classes may use which option of which node, memoised on what the classes can tell apart:
    the labels their selectors read, the node's taints and allocatable CPU and memory."""

    def __init__(self, classes: Sequence[Sequence[Demand]]) -> None:
        self.heads = [c[0] for c in classes]
        self.keys = tuple(sorted({k for d in self.heads for k in d.label_keys}))
        self._memo: dict[tuple[object, ...], tuple[bool, ...]] = {}

    def vector(self, node: NodeSupply, option: Option) -> tuple[bool, ...]:
        seen = tuple(option.labels.get(k) for k in self.keys)
        key = (seen, node.taints, node.capacity)
        found = self._memo.get(key)
        if found is None:
            admitted = [node.admits(d) for d in self.heads]
            found = tuple(a and d.matches(option.labels) for a, d in zip(admitted, self.heads))
            self._memo[key] = found
        return found


def _signature(option: Option, admits: tuple[bool, ...]) -> tuple[object, ...]:
    return (option.config, option.changed, option.new, tuple(sorted(option.free.items())), len(option.gpus), admits)


def build(
    nodes: Sequence[NodeSupply],
    options: Mapping[str, Sequence[Option]],
    demands: Sequence[Demand],
    group: bool = True,
) -> Decision:
    classes = classes_of(demands)
    admits = _Admits(classes)
    vectors = {n.name: [admits.vector(n, o) for o in options[n.name]] for n in nodes}
    by: dict[tuple[object, ...], list[str]] = {}
    for name in sorted(vectors):
        sig = tuple(_signature(o, v) for o, v in zip(options[name], vectors[name]))
        by.setdefault(sig, []).append(name)
    groups: list[tuple[str, ...]] = []
    for members in sorted(by.values()):
        first = members[0]
        if len(members) > 1 and not (group and _exact(classes, options[first], vectors[first])):
            groups += [(m,) for m in members]  # solved node by node
        else:
            groups.append(tuple(members))
    groups.sort()
    group_options = tuple(tuple(options[g[0]]) for g in groups)
    pools = tuple(
        pool for g, members in enumerate(groups) for pool in _pools(g, classes, group_options[g], vectors[members[0]])
    )
    rank = {name: i for i, name in enumerate(sorted(vectors))}
    return Decision(classes, tuple(groups), group_options, pools, rank)


def _users(
    classes: Sequence[Sequence[Demand]], options: Sequence[Option], vectors: Sequence[tuple[bool, ...]], p: str
) -> dict[int, tuple[int, ...]]:
    """Option index -> the classes that may use it for profile key p (options that offer p)."""
    return {
        k: tuple(
            c for c, pods in enumerate(classes) if vectors[k][c] and p in pods[0].keys and o.free[p] >= pods[0].count
        )
        for k, o in enumerate(options)
        if o.free.get(p, 0) > 0
    }


def _exact(classes: Sequence[Sequence[Demand]], options: Sequence[Option], vectors: Sequence[tuple[bool, ...]]) -> bool:
    """Counting the group's nodes is exact: per profile, at most one device count above 1 competes."""
    for p in {p for o in options for p in o.free}:
        counts = {classes[c][0].count for cs in _users(classes, options, vectors, p).values() for c in cs}
        if len(counts - {1}) > 1:
            return False
    return True


def _pools(
    g: int, classes: Sequence[Sequence[Demand]], options: Sequence[Option], vectors: Sequence[tuple[bool, ...]]
) -> list[Pool]:
    out: list[Pool] = []
    for p in sorted({p for o in options for p in o.free}):
        by: dict[tuple[int, ...], list[int]] = defaultdict(list)
        for k, cs in _users(classes, options, vectors, p).items():
            if cs:
                by[cs].append(k)
        out += [Pool(g, p, tuple(ks), cs) for cs, ks in sorted(by.items(), key=lambda item: item[1])]
    return out

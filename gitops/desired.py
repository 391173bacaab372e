"""A RepoSpec meets the cluster: which node gets which config, each checked on that node's GPUs.

Explicit `nodes:` lists win over selectors; a node two selectors match (or two lists name) is an error;
`default` covers the GPU nodes nothing else matches. Every assigned config must fit the node's GPUs
(from `migops.api.objects.node_gpus`) under the cluster's MIG strategy, as `migops.mig.fit` answers it
(the node's own report and the errors of the config's text, the same verdict as the webhook's and
`migops validate`'s): one failing node makes the whole commit invalid, so nothing of it is applied. The verdicts are cached
by (config entries, GPUs, strategy): however many nodes share a model, it is validated once per config.
Within one resolve, nodes alike in everything it reads of them (their labels and annotations: a fleet
inventory's groups, a pool of identical machines) have their selectors, GPUs and fit worked out once.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, defaultdict
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

from migops.api.migsync import NODES_FILE
from migops.api.objects import MigSettings, annotations_of, labels, node_gpus
from migops.gitops.reasons import SourceReason
from migops.gitops.repo import RepoError, RepoProblem, RepoSpec, referenced_configs
from migops.kube.owners import node_owner
from migops.mig.catalogue import UnknownGpuError
from migops.mig.fit import DIRECT, Fit, Reports, fit
from migops.mig.gfd import NodeGpus
from migops.mig.problems import Problem, key_path
from migops.mig.strategy import Strategy
from migops.mig.text import listed

_SHOWN_NODES = 5  # a problem shared by many nodes names this many of them


@dataclass(frozen=True)
class NodeTarget:
    config: str
    digest: str  # MigPartedConfig.digest(config): what the agent reports back once applied
    source: str  # the nodes.yaml path that chose it: assignments[i] or default


@dataclass(frozen=True)
class DesiredState:
    """Everything the reconciler applies for one revision, on the nodes as they are now."""

    spec: RepoSpec
    strategy: Strategy | None  # None: the ClusterPolicy names none of the three (no strategy question)
    namespace: str  # the MIG ConfigMap's
    configmap: str
    targets: Mapping[str, NodeTarget]  # node name -> what it should get
    warnings: tuple[RepoProblem, ...] = ()

    @property
    def revision(self) -> str:
        return self.spec.revision


class FitCache:
    """Bounded memo of `migops.mig.fit` verdicts by (config entries, GPUs, strategy): it remembers, the
    MIG core decides. Threads may share it (the reconciler's syncs and its suggestions): a verdict is
    looked up and kept under a lock and worked out outside it (two threads may work out one verdict
    at once; both get the same)."""

    def __init__(self, size: int = 4096) -> None:
        self._size = size
        self._items: OrderedDict[tuple, Fit] = OrderedDict()
        self._lock = threading.Lock()

    def fit(self, spec: RepoSpec, config: str, gpus: NodeGpus | None, strategy: Strategy | None) -> Fit:
        """The config on these GPUs (None: the catalogue) under the strategy."""
        # By the entries as parsed, not the digest: the digest is what the node sees, and two spellings
        # with one digest (`devices: [1, 1]` and `[1]`) get different verdicts.
        key = (
            config,
            spec.config.entries(config),
            None if gpus is None else (tuple(g.device_id for g in gpus.gpus), gpus.exact),
            strategy,
        )
        with self._lock:
            found = self._items.get(key)
            if found is not None:
                self._items.move_to_end(key)
                return found
        # The catalogue question is asked once per config, not once per distinct set of GPUs.
        reports = Reports(catalogue=lambda c, n, s: self.fit(spec, n, None, s).report) if gpus is not None else DIRECT
        found = fit(spec.config, config, gpus, strategy, reports)
        with self._lock:
            self._items[key] = found
            if len(self._items) > self._size:
                self._items.popitem(last=False)
        return found

    def check(self, spec: RepoSpec, config: str, gpus: NodeGpus, strategy: Strategy | None) -> tuple[Problem, ...]:
        """The errors of the config on these GPUs; empty when it fits."""
        return self.fit(spec, config, gpus, strategy).errors

    def catalogue(self, spec: RepoSpec, config: str, strategy: Strategy | None) -> tuple[Problem, ...]:
        """The errors of the config against the catalogue (a config no node has now; strategy None: no
        strategy question, as the webhook asks it of a ConfigMap's config no node takes)."""
        return self.fit(spec, config, None, strategy).errors


# How a problem of a config no assignment names says so (it is judged as the MIG ConfigMap's content).
UNASSIGNED = "is named by no assignment but is written into the MIG ConfigMap"


def resolve(
    spec: RepoSpec, nodes: Mapping[str, Mapping[str, Any]], settings: MigSettings, cache: FitCache | None = None
) -> DesiredState:
    """Assign configs to `nodes` (name -> Node object) and check each fits. Raises RepoError."""
    cache = cache or FitCache()
    found = _Found(spec.file(NODES_FILE))
    _check_strategy(spec, settings, found)
    namespace, configmap = _configmap(spec, settings, found)
    chosen: dict[str, tuple[str, str]] = {}  # node -> (config, the nodes.yaml path that chose it)
    named = _listed(spec, nodes, chosen, found)
    alike = _Alike(nodes)
    _selected(spec, nodes, named, chosen, found, alike)
    gpu_of = _gpus(spec, nodes, chosen, found, alike)
    _owned_elsewhere(nodes, chosen, gpu_of, found)
    targets = _fitted(spec, chosen, gpu_of, settings.strategy, cache, found, alike)
    _unassigned(spec, targets, settings.strategy, cache, found)
    found.report_failures(gpu_of)
    if found.problems:
        raise RepoError(found.problems + found.warnings)
    warnings = tuple(spec.warnings) + tuple(found.warnings)
    return DesiredState(spec, settings.strategy, namespace, configmap, targets, warnings)


@dataclass
class _Found:
    """What resolving found so far: errors, warnings, and the nodes each config does not fit."""

    nodes_file: str
    problems: list[RepoProblem] = field(default_factory=list)
    warnings: list[RepoProblem] = field(default_factory=list)
    # (the path that chose the config, the config, why it does not fit) -> the nodes
    failures: defaultdict[tuple[str, str, str], list[str]] = field(default_factory=lambda: defaultdict(list))
    causes: dict[str, Problem] = field(default_factory=dict)  # a failure's text -> the MIG core's problem

    def error(self, problem: Problem) -> None:
        self.problems.append(RepoProblem(self.nodes_file, problem))

    def warning(self, problem: Problem) -> None:
        self.warnings.append(RepoProblem(self.nodes_file, problem))

    def report_failures(self, gpu_of: Mapping[str, NodeGpus]) -> None:
        """One problem per (assignment, config, reason), naming the nodes it concerns."""
        for (source, config, why), names in sorted(self.failures.items()):
            self.problems.append(
                RepoProblem(
                    self.nodes_file,
                    Problem(
                        key_path(source, "config") if source != "default" else "default",
                        "does-not-fit-node",
                        f"config {config!r} cannot be applied to {_some(names)}{_describe(gpu_of.get(names[0]))}: {why}",
                    ),
                    tuple(c for c in (self.causes.get(why),) if c),
                )
            )


class _Alike:
    """What resolving reads of a node, worked out once per shape. A node's shape is its labels and
    annotations, all that `labels`, the selectors and `node_gpus` read of it; a node with a key or value
    that is not a string is its own shape (None: nothing is shared), so nodes share a verdict only when
    what is read of them is equal string for string."""

    def __init__(self, nodes: Mapping[str, Mapping[str, Any]]) -> None:
        self._nodes = nodes
        self._shapes: dict[str, Hashable] = {}
        self.hits: dict[Hashable, list[Any]] = {}  # shape -> the selector assignments it matches
        self.gpus: dict[Hashable, NodeGpus | UnknownGpuError | None] = {}
        self.errors: dict[tuple[str, Hashable], tuple[Problem, ...]] = {}  # (config, shape) -> its fit's errors

    def shape(self, name: str) -> Hashable:
        if name not in self._shapes:
            node = self._nodes[name]
            read = (labels(node), annotations_of(node))
            plain = all(type(k) is str and type(v) is str for m in read for k, v in m.items())
            self._shapes[name] = tuple(tuple(sorted(m.items())) for m in read) if plain else None
        return self._shapes[name]


def _check_strategy(spec: RepoSpec, settings: MigSettings, found: _Found) -> None:
    """nodes.yaml's strategy, when it states one, is the cluster's; else nothing is applied."""
    stated = spec.nodes.strategy
    if stated is not None and stated != settings.strategy_text:
        found.error(
            Problem(
                "strategy",
                "strategy-mismatch",
                f"strategy {stated!r} does not match the cluster's MIG strategy {settings.strategy_text!r} "
                f"(ClusterPolicy {settings.policy or '(none: the default)'} spec.mig.strategy); nothing is applied",
            )
        )
        raise RepoError(found.problems, reason=SourceReason.STRATEGY_MISMATCH)


def _configmap(spec: RepoSpec, settings: MigSettings, found: _Found) -> tuple[str, str]:
    """The MIG ConfigMap written (nodes.yaml's, else the ClusterPolicy's); warned when mig-manager reads another."""
    namespace = spec.nodes.configmap_namespace or settings.namespace
    configmap = spec.nodes.configmap_name or settings.config_name
    if (namespace, configmap) != settings.configmap:
        found.warning(
            Problem(
                "configMap",
                "configmap-not-read",
                f"configMap {namespace}/{configmap} is not the one the GPU Operator's mig-manager reads "
                f"({settings.namespace}/{settings.config_name}, from the ClusterPolicy)",
                "warning",
            )
        )
    return namespace, configmap


def _listed(
    spec: RepoSpec, nodes: Mapping[str, Mapping[str, Any]], chosen: dict[str, tuple[str, str]], found: _Found
) -> dict[str, str]:
    """The nodes assignments list by name (node -> the assignment's path); those in the cluster are chosen."""
    named: dict[str, str] = {}
    for a in spec.nodes.assignments:
        for name in a.nodes or ():
            if name in named and named[name] != a.path:
                found.error(
                    Problem(
                        key_path(a.path, "nodes"), "node-assigned-twice", f"node {name} is also listed in {named[name]}"
                    )
                )
                continue
            named[name] = a.path
            if name in nodes:
                chosen[name] = (a.config, a.path)
            else:
                found.warning(
                    Problem(
                        key_path(a.path, "nodes"),
                        "node-not-found",
                        f"{a.path} matches no node: node {name} does not exist (yet); it gets {a.config!r} when it joins",
                        "warning",
                    )
                )
    return named


def _selected(
    spec: RepoSpec,
    nodes: Mapping[str, Mapping[str, Any]],
    named: Mapping[str, str],
    chosen: dict[str, tuple[str, str]],
    found: _Found,
    alike: _Alike,
) -> None:
    """The nodes not listed by name that one selector matches; two matching one node is an error."""
    selectors = [a for a in spec.nodes.assignments if a.selector is not None]
    clashes: dict[tuple[str, str], list[str]] = defaultdict(list)
    matched: set[str] = set()  # selectors' paths that match some node
    for name, node in nodes.items():
        if name in named:
            continue
        shape = alike.shape(name)
        hits = alike.hits.get(shape) if shape is not None else None
        if hits is None:
            found_labels = labels(node)
            hits = [a for a in selectors if a.selector.matches(found_labels)]  # type: ignore[union-attr]
            if shape is not None:
                alike.hits[shape] = hits
        matched.update(a.path for a in hits)
        if len(hits) > 1:
            clashes[(hits[0].path, hits[1].path)].append(name)
        elif hits:
            chosen[name] = (hits[0].config, hits[0].path)
    for a in selectors:
        if a.path not in matched:
            found.warning(
                Problem(
                    key_path(a.path, "nodeSelector"),
                    "matches-no-node",
                    f"{a.path} matches no node: no node (not listed by name) has the labels its nodeSelector asks "
                    f"for, so nothing gets {a.config!r} from it",
                    "warning",
                )
            )
    for (first, second), names in sorted(clashes.items()):
        found.error(
            Problem(
                second,
                "selectors-overlap",
                f"{_some(names)} {'matches' if len(names) == 1 else 'match'} both {first} and {second}; "
                "a node may match one selector only (list it under nodes: to choose)",
            )
        )


def _owned_elsewhere(
    nodes: Mapping[str, Mapping[str, Any]],
    chosen: dict[str, tuple[str, str]],
    gpu_of: Mapping[str, NodeGpus],
    found: _Found,
) -> None:
    """Nodes whose MIG geometry another manager owns (migops.kube.owners): the reconciler skips them, so
    each assignment that picks some is warned of, and one that names no GPU is not judged (the GPU
    Operator's DRA stack runs no GPU Feature Discovery: its nodes name no GPU)."""
    owned: dict[tuple[str, str], list[str]] = defaultdict(list)
    for name, (_, source) in list(chosen.items()):
        owner = node_owner(nodes[name])
        if owner is None:
            continue
        owned[(source, owner)].append(name)
        if name not in gpu_of:
            del chosen[name]
    for (source, owner), names in sorted(owned.items()):
        found.warning(
            Problem(
                source,
                "nodes-owned-elsewhere",
                f"{_some(sorted(names))}: MIG geometry owned by {owner}; the reconciler leaves "
                f"{'it' if len(names) == 1 else 'them'} alone",
                "warning",
            )
        )


def _gpus(
    spec: RepoSpec,
    nodes: Mapping[str, Mapping[str, Any]],
    chosen: dict[str, tuple[str, str]],
    found: _Found,
    alike: _Alike,
) -> dict[str, NodeGpus]:
    """Each node's GPUs; an assigned node whose GPUs cannot be read fails (unless another manager owns it:
    `_owned_elsewhere`), the other GPU nodes get `default`."""
    gpu_of: dict[str, NodeGpus] = {}
    for name, node in nodes.items():
        explicit = chosen.get(name)
        judged = explicit if explicit and node_owner(node) is None else None
        gpus = _read_gpus(name, node, alike)
        if isinstance(gpus, UnknownGpuError):
            if judged:
                found.failures[(judged[1], judged[0], f"the node's GPU is not in the catalogue: {gpus}")].append(name)
            continue
        if gpus is None:
            if judged:
                why = "the node shows no GPU (no migops.io/gpus annotation, device-ID or GFD product label)"
                found.failures[(judged[1], judged[0], why)].append(name)
            continue
        gpu_of[name] = gpus
        if not explicit and spec.nodes.default is not None:
            chosen[name] = (spec.nodes.default, "default")
    return gpu_of


def _read_gpus(name: str, node: Mapping[str, Any], alike: _Alike) -> NodeGpus | UnknownGpuError | None:
    """node_gpus of the node, once per shape; the catalogue's refusal returned, not raised."""
    shape = alike.shape(name)
    if shape is not None and shape in alike.gpus:
        return alike.gpus[shape]
    try:
        gpus: NodeGpus | UnknownGpuError | None = node_gpus(node)
    except UnknownGpuError as exc:
        gpus = exc
    if shape is not None:
        alike.gpus[shape] = gpus
    return gpus


def _fitted(
    spec: RepoSpec,
    chosen: Mapping[str, tuple[str, str]],
    gpu_of: Mapping[str, NodeGpus],
    strategy: Strategy | None,
    cache: FitCache,
    found: _Found,
    alike: _Alike,
) -> dict[str, NodeTarget]:
    """The targets: each chosen node with readable GPUs and its config; the configs that do not fit fail."""
    targets: dict[str, NodeTarget] = {}
    digests: dict[str, str] = {}
    for name, (config, source) in chosen.items():
        gpus = gpu_of.get(name)
        if gpus is None:
            continue  # reported by `_gpus`
        shape = alike.shape(name)
        errors = alike.errors.get((config, shape)) if shape is not None else None
        if errors is None:
            errors = cache.check(spec, config, gpus, strategy)
            if shape is not None:
                alike.errors[(config, shape)] = errors
        for p in errors:
            why = f"{spec.file('config.yaml')}: {p}"
            found.failures[(source, config, why)].append(name)
            found.causes[why] = p
        digest = digests.get(config) or digests.setdefault(config, spec.digest(config))
        targets[name] = NodeTarget(config, digest, source)
    return targets


def _unassigned(
    spec: RepoSpec, targets: Mapping[str, NodeTarget], strategy: Strategy | None, cache: FitCache, found: _Found
) -> None:
    """A config no node has now must still fit some GPU: the node it is meant for may join tomorrow. One
    that nodes.yaml does not name at all is written into the MIG ConfigMap all the same, where the
    webhook judges it against the catalogue with no strategy (webhook/configmaps.judge; `migops validate`
    judges every config of the file): its errors refuse the commit here too, rather than meet a 422."""
    in_use = {t.config for t in targets.values()}
    referenced = referenced_configs(spec.nodes)
    for name in spec.config.names():
        if name in in_use:
            continue
        path = referenced.get(name)
        where = f"is named at {path} in {found.nodes_file}" if path else UNASSIGNED
        for p in cache.catalogue(spec, name, strategy if path else None):
            found.problems.append(
                RepoProblem(spec.file("config.yaml"), Problem(p.path, p.rule, f"{p.message} (config {name!r} {where})"))
            )


def _some(names: list[str]) -> str:
    return f"node{'s' if len(names) > 1 else ''} {listed(sorted(names), _SHOWN_NODES)}"


def _describe(gpus: NodeGpus | None) -> str:
    if gpus is None:
        return ""
    models = sorted({g.name for g in gpus.gpus})
    count = f"{len(gpus.gpus)} x " if gpus.exact else ""
    return f" ({count}{', '.join(models)})"

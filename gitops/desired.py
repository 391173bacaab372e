"""A RepoSpec meets the cluster: which node gets which config, each checked on that node's GPUs.

Explicit `nodes:` lists win over selectors; a node two selectors match (or two lists name) is an error;
`default` covers the GPU nodes nothing else matches. Every assigned config must fit the node's GPUs
(from `migops.kube.nodes.node_gpus`) under the cluster's MIG strategy, checked by `migops.mig.validate`:
one failing node makes the whole commit invalid, so nothing of it is applied. The verdicts are cached
by (config digest, GPUs, strategy): 2,000 nodes of three models cost three validations.
"""
from __future__ import annotations

from collections import OrderedDict, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from migops.gitops.reasons import SourceReason
from migops.gitops.repo import NODES_FILE, RepoError, RepoProblem, RepoSpec, referenced_configs
from migops.kube.clusterpolicy import MigSettings
from migops.kube.nodes import NodeGpus, UnknownGpuError, node_gpus
from migops.mig.problems import Problem, key_path
from migops.mig.validate import validate_against_catalogue, validate_on_node

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
    strategy: str
    namespace: str  # the MIG ConfigMap's
    configmap: str
    targets: Mapping[str, NodeTarget]  # node name -> what it should get
    warnings: tuple[RepoProblem, ...] = ()

    @property
    def revision(self) -> str:
        return self.spec.revision


class FitCache:
    """Bounded memo of per-(config, GPUs, strategy) verdicts: the error Problems, empty when it fits."""

    def __init__(self, size: int = 4096) -> None:
        self._size = size
        self._items: OrderedDict[tuple, tuple[Problem, ...]] = OrderedDict()

    def check(self, spec: RepoSpec, config: str, gpus: NodeGpus, strategy: str) -> tuple[Problem, ...]:
        key = (spec.digest(config), config, tuple(g.device_id for g in gpus.gpus), gpus.exact, strategy)
        found = self._items.get(key)
        if found is None:
            if gpus.exact:
                report = validate_on_node(spec.config, config, gpus.gpus, strategy)  # type: ignore[arg-type]
                found = report.errors
            else:
                # GFD under the single strategy tells the model, not the count: the config must fit a
                # node of that model as the catalogue check sizes it.
                report = validate_against_catalogue(spec.config, config, strategy)  # type: ignore[arg-type]
                found = report.errors if report.errors or gpus.gpus[0] in report.fits else (
                    Problem(key_path("mig-configs", config), "does-not-fit-model",
                            f"config {config!r} does not fit {gpus.gpus[0].name}"),)
            self._items[key] = found
            if len(self._items) > self._size:
                self._items.popitem(last=False)
        else:
            self._items.move_to_end(key)
        return found


    def catalogue(self, spec: RepoSpec, config: str, strategy: str) -> tuple[Problem, ...]:
        key = (spec.digest(config), config, "catalogue", strategy)
        found = self._items.get(key)
        if found is None:
            found = self._items[key] = validate_against_catalogue(spec.config, config, strategy).errors  # type: ignore[arg-type]
            if len(self._items) > self._size:
                self._items.popitem(last=False)
        return found


def _labels(node: Mapping[str, Any]) -> Mapping[str, str]:
    return (node.get("metadata") or {}).get("labels") or {}


def resolve(spec: RepoSpec, nodes: Mapping[str, Mapping[str, Any]], settings: MigSettings,
            cache: FitCache | None = None) -> DesiredState:
    """Assign configs to `nodes` (name -> Node object) and check each fits. Raises RepoError."""
    cache = cache or FitCache()
    nodes_file = spec.file(NODES_FILE)
    cfg = spec.nodes
    problems: list[RepoProblem] = []
    strategy = settings.strategy
    if cfg.strategy is not None and cfg.strategy != settings.strategy:
        problems.append(RepoProblem(nodes_file, Problem(
            "strategy", "strategy-mismatch",
            f"strategy {cfg.strategy!r} does not match the cluster's MIG strategy {settings.strategy!r} "
            f"(ClusterPolicy {settings.policy or '(none: the default)'} spec.mig.strategy); nothing is applied")))
        raise RepoError(problems, reason=SourceReason.STRATEGY_MISMATCH)
    namespace = cfg.configmap_namespace or settings.namespace
    configmap = cfg.configmap_name or settings.config_name
    warnings: list[RepoProblem] = []
    if (namespace, configmap) != settings.configmap:
        warnings.append(RepoProblem(nodes_file, Problem(
            "configMap", "configmap-not-read",
            f"configMap {namespace}/{configmap} is not the one the GPU Operator's mig-manager reads "
            f"({settings.namespace}/{settings.config_name}, from the ClusterPolicy)", "warning")))

    chosen: dict[str, tuple[str, str]] = {}  # node -> (config, source path)
    named: dict[str, str] = {}
    for a in cfg.assignments:
        for name in a.nodes or ():
            if name in named and named[name] != a.path:
                problems.append(RepoProblem(nodes_file, Problem(
                    key_path(a.path, "nodes"), "node-assigned-twice",
                    f"node {name} is also listed in {named[name]}")))
                continue
            named[name] = a.path
            if name in nodes:
                chosen[name] = (a.config, a.path)
            else:
                warnings.append(RepoProblem(nodes_file, Problem(
                    key_path(a.path, "nodes"), "node-not-found",
                    f"{a.path} matches no node: node {name} does not exist (yet); it gets {a.config!r} when it "
                    "joins", "warning")))
    selectors = [a for a in cfg.assignments if a.selector is not None]
    clashes: dict[tuple[str, str], list[str]] = defaultdict(list)
    matched: set[str] = set()  # selectors' paths that match some node
    for name, node in nodes.items():
        if name in named:
            continue
        labels = _labels(node)
        hits = [a for a in selectors if a.selector.matches(labels)]  # type: ignore[union-attr]
        matched.update(a.path for a in hits)
        if len(hits) > 1:
            clashes[(hits[0].path, hits[1].path)].append(name)
        elif hits:
            chosen[name] = (hits[0].config, hits[0].path)
    for a in selectors:
        if a.path not in matched:
            warnings.append(RepoProblem(nodes_file, Problem(
                key_path(a.path, "nodeSelector"), "matches-no-node",
                f"{a.path} matches no node: no node (not listed by name) has the labels its nodeSelector asks "
                f"for, so nothing gets {a.config!r} from it", "warning")))
    for (first, second), names in sorted(clashes.items()):
        problems.append(RepoProblem(nodes_file, Problem(
            second, "selectors-overlap",
            f"{_some(names)} {'matches' if len(names) == 1 else 'match'} both {first} and {second}; "
            "a node may match one selector only (list it under nodes: to choose)")))

    failures: dict[tuple[str, str, str], list[str]] = defaultdict(list)
    gpu_of: dict[str, NodeGpus] = {}
    for name, node in nodes.items():
        explicit = name in chosen
        try:
            gpus = node_gpus(node)
        except UnknownGpuError as exc:
            if explicit:
                failures[(chosen[name][1], chosen[name][0], f"the node's GPU is not in the catalogue: {exc}")].append(name)
            continue
        if gpus is None:
            if explicit:
                failures[(chosen[name][1], chosen[name][0], "the node shows no GPU (no migops.io/gpus annotation, "
                          "device-ID or GFD product label)")].append(name)
            continue
        gpu_of[name] = gpus
        if not explicit and cfg.default is not None:
            chosen[name] = (cfg.default, "default")
    targets: dict[str, NodeTarget] = {}
    digests: dict[str, str] = {}
    for name, (config, source) in chosen.items():
        gpus = gpu_of.get(name)
        if gpus is None:
            continue  # reported above
        for p in cache.check(spec, config, gpus, strategy):
            failures[(source, config, f"{spec.file('config.yaml')}: {p}")].append(name)
        digest = digests.get(config) or digests.setdefault(config, spec.digest(config))
        targets[name] = NodeTarget(config, digest, source)
    # A config no node has now must still fit some GPU: the node it is meant for may join tomorrow.
    in_use = {t.config for t in targets.values()}
    for name, path in referenced_configs(cfg).items():
        if name not in in_use:
            for p in cache.catalogue(spec, name, strategy):
                problems.append(RepoProblem(spec.file("config.yaml"), Problem(
                    p.path, p.rule, f"{p.message} (config {name!r} is named at {path} in {nodes_file})")))
    for (source, config, why), names in sorted(failures.items()):
        model = _describe(gpu_of.get(names[0]))
        problems.append(RepoProblem(nodes_file, Problem(
            key_path(source, "config") if source != "default" else "default", "does-not-fit-node",
            f"config {config!r} cannot be applied to {_some(names)}{model}: {why}")))
    if problems:
        raise RepoError(problems + warnings)
    return DesiredState(spec, strategy, namespace, configmap, targets, tuple(spec.warnings) + tuple(warnings))


def _some(names: list[str]) -> str:
    names = sorted(names)
    shown = ", ".join(names[:_SHOWN_NODES])
    more = f" and {len(names) - _SHOWN_NODES} more" if len(names) > _SHOWN_NODES else ""
    return f"node{'s' if len(names) > 1 else ''} {shown}{more}"


def _describe(gpus: NodeGpus | None) -> str:
    if gpus is None:
        return ""
    models = sorted({g.name for g in gpus.gpus})
    count = f"{len(gpus.gpus)} x " if gpus.exact else ""
    return f" ({count}{', '.join(models)})"

"""A RepoSpec meets the cluster: which node gets which config, each checked on that node's GPUs.

Explicit `nodes:` lists win over selectors; a node two selectors match (or two lists name) is an error;
`default` covers the GPU nodes nothing else matches. Every assigned config must fit the node's GPUs
(from `migops.api.objects.node_gpus`) under the cluster's MIG strategy, as `migops.mig.fit` answers it
(the node's own report and the errors of the config's text, the same verdict as the webhook's and
`migops validate`'s): one failing node makes the whole commit invalid, so nothing of it is applied. The verdicts are cached
by (config entries, GPUs, strategy): 2,000 nodes of three models cost three validations.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from migops.api.migsync import NODES_FILE
from migops.api.objects import MigSettings, labels, node_gpus
from migops.gitops.reasons import SourceReason
from migops.gitops.repo import RepoError, RepoProblem, RepoSpec, referenced_configs
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
    nodes_file = spec.file(NODES_FILE)
    cfg = spec.nodes
    problems: list[RepoProblem] = []
    strategy = settings.strategy
    if cfg.strategy is not None and cfg.strategy != settings.strategy_text:
        problems.append(
            RepoProblem(
                nodes_file,
                Problem(
                    "strategy",
                    "strategy-mismatch",
                    f"strategy {cfg.strategy!r} does not match the cluster's MIG strategy {settings.strategy_text!r} "
                    f"(ClusterPolicy {settings.policy or '(none: the default)'} spec.mig.strategy); nothing is applied",
                ),
            )
        )
        raise RepoError(problems, reason=SourceReason.STRATEGY_MISMATCH)
    namespace = cfg.configmap_namespace or settings.namespace
    configmap = cfg.configmap_name or settings.config_name
    warnings: list[RepoProblem] = []
    if (namespace, configmap) != settings.configmap:
        warnings.append(
            RepoProblem(
                nodes_file,
                Problem(
                    "configMap",
                    "configmap-not-read",
                    f"configMap {namespace}/{configmap} is not the one the GPU Operator's mig-manager reads "
                    f"({settings.namespace}/{settings.config_name}, from the ClusterPolicy)",
                    "warning",
                ),
            )
        )

    chosen: dict[str, tuple[str, str]] = {}  # node -> (config, source path)
    named: dict[str, str] = {}
    for a in cfg.assignments:
        for name in a.nodes or ():
            if name in named and named[name] != a.path:
                problems.append(
                    RepoProblem(
                        nodes_file,
                        Problem(
                            key_path(a.path, "nodes"),
                            "node-assigned-twice",
                            f"node {name} is also listed in {named[name]}",
                        ),
                    )
                )
                continue
            named[name] = a.path
            if name in nodes:
                chosen[name] = (a.config, a.path)
            else:
                warnings.append(
                    RepoProblem(
                        nodes_file,
                        Problem(
                            key_path(a.path, "nodes"),
                            "node-not-found",
                            f"{a.path} matches no node: node {name} does not exist (yet); it gets {a.config!r} when it "
                            "joins",
                            "warning",
                        ),
                    )
                )
    selectors = [a for a in cfg.assignments if a.selector is not None]
    clashes: dict[tuple[str, str], list[str]] = defaultdict(list)
    matched: set[str] = set()  # selectors' paths that match some node
    for name, node in nodes.items():
        if name in named:
            continue
        found = labels(node)
        hits = [a for a in selectors if a.selector.matches(found)]  # type: ignore[union-attr]
        matched.update(a.path for a in hits)
        if len(hits) > 1:
            clashes[(hits[0].path, hits[1].path)].append(name)
        elif hits:
            chosen[name] = (hits[0].config, hits[0].path)
    for a in selectors:
        if a.path not in matched:
            warnings.append(
                RepoProblem(
                    nodes_file,
                    Problem(
                        key_path(a.path, "nodeSelector"),
                        "matches-no-node",
                        f"{a.path} matches no node: no node (not listed by name) has the labels its nodeSelector asks "
                        f"for, so nothing gets {a.config!r} from it",
                        "warning",
                    ),
                )
            )
    for (first, second), names in sorted(clashes.items()):
        problems.append(
            RepoProblem(
                nodes_file,
                Problem(
                    second,
                    "selectors-overlap",
                    f"{_some(names)} {'matches' if len(names) == 1 else 'match'} both {first} and {second}; "
                    "a node may match one selector only (list it under nodes: to choose)",
                ),
            )
        )

    failures: dict[tuple[str, str, str], list[str]] = defaultdict(list)
    causes: dict[str, Problem] = {}  # a failure's text -> the MIG core's problem it reports
    gpu_of: dict[str, NodeGpus] = {}
    for name, node in nodes.items():
        explicit = name in chosen
        try:
            gpus = node_gpus(node)
        except UnknownGpuError as exc:
            if explicit:
                failures[(chosen[name][1], chosen[name][0], f"the node's GPU is not in the catalogue: {exc}")].append(
                    name
                )
            continue
        if gpus is None:
            if explicit:
                failures[
                    (
                        chosen[name][1],
                        chosen[name][0],
                        "the node shows no GPU (no migops.io/gpus annotation, device-ID or GFD product label)",
                    )
                ].append(name)
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
            why = f"{spec.file('config.yaml')}: {p}"
            failures[(source, config, why)].append(name)
            causes[why] = p
        digest = digests.get(config) or digests.setdefault(config, spec.digest(config))
        targets[name] = NodeTarget(config, digest, source)
    # A config no node has now must still fit some GPU: the node it is meant for may join tomorrow. One
    # that nodes.yaml does not name at all is written into the MIG ConfigMap all the same, where the
    # webhook judges it against the catalogue with no strategy (webhook/configmaps.judge; `migops validate`
    # judges every config of the file): its errors refuse the commit here too, rather than meet a 422.
    in_use = {t.config for t in targets.values()}
    referenced = referenced_configs(cfg)
    for name in spec.config.names():
        if name in in_use:
            continue
        path = referenced.get(name)
        where = (
            f"is named at {path} in {nodes_file}"
            if path
            else "is named by no assignment but is written into the MIG ConfigMap"
        )
        for p in cache.catalogue(spec, name, strategy if path else None):
            problems.append(
                RepoProblem(spec.file("config.yaml"), Problem(p.path, p.rule, f"{p.message} (config {name!r} {where})"))
            )
    for (source, config, why), names in sorted(failures.items()):
        model = _describe(gpu_of.get(names[0]))
        problems.append(
            RepoProblem(
                nodes_file,
                Problem(
                    key_path(source, "config") if source != "default" else "default",
                    "does-not-fit-node",
                    f"config {config!r} cannot be applied to {_some(names)}{model}: {why}",
                ),
                tuple(c for c in (causes.get(why),) if c),
            )
        )
    if problems:
        raise RepoError(problems + warnings)
    return DesiredState(spec, strategy, namespace, configmap, targets, tuple(spec.warnings) + tuple(warnings))


def _some(names: list[str]) -> str:
    return f"node{'s' if len(names) > 1 else ''} {listed(sorted(names), _SHOWN_NODES)}"


def _describe(gpus: NodeGpus | None) -> str:
    if gpus is None:
        return ""
    models = sorted({g.name for g in gpus.gpus})
    count = f"{len(gpus.gpus)} x " if gpus.exact else ""
    return f" ({count}{', '.join(models)})"

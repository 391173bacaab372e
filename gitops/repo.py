"""The config repo's two files, read and checked: `<path>/config.yaml` and `<path>/nodes.yaml`.

config.yaml is mig-parted's own format, parsed by `migops.mig` (never re-implemented here) and shipped
byte for byte as `data["config.yaml"]` of the MIG ConfigMap. nodes.yaml says which nodes get which
config (the contract is in docs/reconciler.md). Every problem names its file and path, e.g.
`clusters/prod/nodes.yaml: assignments[1].config: ...`; all problems are collected, not just the first.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from migops.api.migsync import CONFIG_FILE, NODES_FILE
from migops.api.objects import LabelSelector, Requirement
from migops.gitops.reasons import SourceReason
from migops.gitops.schema import schema_problems
from migops.mig.fit import fit
from migops.mig.problems import MigError, Problem, index_path, key_path
from migops.mig.spec import MigPartedConfig, parse_config
from migops.mig.strategy import STRATEGIES, Strategy, as_strategy
from migops.mig.text import did_you_mean, listed
from migops.mig.yamlsafe import load_yaml

_TOP_FIELDS = ("version", "strategy", "configMap", "rollout", "default", "prune", "assignments", "suggest")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_PERCENT = re.compile(r"^([0-9]{1,3})%$")
_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")

# nodes.yaml's bounds (docs/reconciler.md): the reconciler matches every assignment against every node
# whenever a node's labels change, and keeps the file in the cluster's applied record (a ConfigMap).
# `migops validate` and the reconciler both refuse a file past either with the same problem.
MAX_NODES_FILE_BYTES = 512 * 1024
MAX_ASSIGNMENTS = 1000


@dataclass(frozen=True)
class RepoProblem:
    """A Problem from `migops.mig` or nodes.yaml, with the repository file it is in."""

    file: str
    problem: Problem
    causes: tuple[Problem, ...] = ()  # the MIG core's problems behind it (does-not-fit-node), rules intact

    @property
    def severity(self) -> str:
        return self.problem.severity

    def __str__(self) -> str:
        return f"{self.file}: {self.problem}"

    def as_dict(self) -> dict[str, object]:  # Problem.as_dict's, with line and column (ints) when known
        return {"file": self.file, **self.problem.as_dict()}


class RepoError(Exception):
    """The commit cannot be applied; carries every problem found (errors, and warnings beside them)."""

    def __init__(self, problems: Sequence[RepoProblem], reason: SourceReason = SourceReason.VALIDATION_FAILED) -> None:
        self.problems = tuple(problems)
        self.reason = reason
        errors = [p for p in self.problems if p.severity == "error"] or list(self.problems)
        super().__init__(listed(errors, 5, sep="; "))


@dataclass(frozen=True)
class Assignment:
    path: str  # assignments[i], for messages
    config: str
    nodes: tuple[str, ...] | None = None
    selector: LabelSelector | None = None


@dataclass(frozen=True)
class SuggestPool:
    """nodes.yaml `suggest.pools[i]`: the configs `migops suggest` may give these nodes."""

    path: str  # suggest.pools[i], for messages
    configs: tuple[str, ...]
    nodes: tuple[str, ...] | None = None
    selector: LabelSelector | None = None

    def matches(self, name: str, labels: Mapping[str, str]) -> bool:
        if self.nodes is not None:
            return name in self.nodes
        return self.selector is not None and self.selector.matches(labels)


@dataclass(frozen=True)
class SuggestPolicy:
    """nodes.yaml `suggest`: the limits of what `migops suggest` may propose (docs/suggest.md)."""

    max_nodes: int | None = None  # nodes one proposal may change; None: no limit
    new_configs: bool = False  # may add a named config to config.yaml
    pools: tuple[SuggestPool, ...] | None = None  # None: every node, every config of config.yaml
    # Namespaces whose pods' system priorities (above 1,000,000,000, the system-* PriorityClasses) count
    # as they are; elsewhere such a priority counts as 0.
    trusted_priority_namespaces: tuple[str, ...] = ("kube-system",)
    max_pods_per_namespace: int | None = None  # pending requests one namespace may count; None: no cap
    claims_without_pods: bool = False  # pending ResourceClaims no pod uses count as demand

    def allowed(self, name: str, labels: Mapping[str, str]) -> tuple[str, ...] | None:
        """The configs this node may take (the first pool that matches it); None: any config; () none."""
        if self.pools is None:
            return None
        for pool in self.pools:
            if pool.matches(name, labels):
                return pool.configs
        return ()


DEFAULT_PROGRESS_DEADLINE = 600.0  # as a Deployment's progressDeadlineSeconds
_ROLLOUT_FIELDS = ("maxUnavailable", "maxDefaulted", "progressDeadlineSeconds")


@dataclass(frozen=True)
class NodesFile:
    strategy: Strategy | None = None  # must equal the ClusterPolicy's when given
    configmap_name: str | None = None  # None: the ClusterPolicy's
    configmap_namespace: str | None = None
    max_unavailable: int | str = 1  # a count, or "25%"
    default: str | None = None  # config for GPU nodes no assignment matches; None leaves them alone
    prune: bool = False  # remove the label from nodes that leave every assignment
    assignments: tuple[Assignment, ...] = ()
    max_defaulted: int | None = None  # refuse a commit moving more nodes than this to `default`; None: no limit
    progress_deadline: float = DEFAULT_PROGRESS_DEADLINE  # seconds a node may reconfigure before it is Stalled
    suggest: SuggestPolicy = SuggestPolicy()  # what `migops suggest` may propose


@dataclass(frozen=True)
class RepoSpec:
    """One commit's desired state before it meets the cluster."""

    revision: str
    path: str  # directory in the repository ('' for the root)
    config_text: str  # config.yaml as committed: becomes the ConfigMap's data["config.yaml"]
    config: MigPartedConfig
    nodes: NodesFile
    warnings: tuple[RepoProblem, ...] = ()
    nodes_text: str = ""  # nodes.yaml as committed (kept with config_text in the cluster's applied record)

    def file(self, name: str) -> str:
        return f"{self.path}/{name}" if self.path else name

    def digest(self, config: str) -> str:
        return self.config.digest(config)


def _unexpected_fields(obj: Mapping[str, Any], path: str, allowed: Sequence[str]) -> list[Problem]:
    """One problem per key of `obj` outside `allowed`, each naming the fields that are."""
    return [
        Problem(key_path(path, k), "unexpected-field", f"unexpected field {k!r} (allowed: {', '.join(allowed)})")
        for k in obj
        if k not in allowed
    ]


def load_repo(files: Mapping[str, bytes | None], path: str, revision: str = "") -> RepoSpec:
    """Parse and check both files (found in `files` under `<path>/<name>`). Raises RepoError."""

    def where(name: str) -> str:
        return f"{path}/{name}" if path else name

    cfg_file, nodes_file = where(CONFIG_FILE), where(NODES_FILE)
    problems: list[RepoProblem] = []
    raw_config, raw_nodes = files.get(cfg_file), files.get(nodes_file)
    for name, raw in ((cfg_file, raw_config), (nodes_file, raw_nodes)):
        if raw is None:
            problems.append(RepoProblem(name, Problem("", "file-missing", f"{name} is missing at this revision")))
    too_large = nodes_file_too_large(nodes_file, len(raw_nodes)) if raw_nodes is not None else None
    if too_large is not None:
        problems.append(RepoProblem(nodes_file, too_large))
        raw_nodes = None  # not read further: nothing of it is applied
    config: MigPartedConfig | None = None
    config_text = ""
    if raw_config is not None:
        try:
            config_text = raw_config.decode("utf-8")
        except UnicodeDecodeError as exc:
            problems.append(RepoProblem(cfg_file, Problem("", "not-utf8", f"not UTF-8 text: {exc}")))
        else:
            try:
                config = parse_config(config_text)
            except MigError as exc:
                problems.extend(RepoProblem(cfg_file, p) for p in exc.problems)
    nodes: NodesFile | None = None
    if raw_nodes is not None:
        try:
            doc = load_yaml(raw_nodes)
        except MigError as exc:
            problems.extend(RepoProblem(nodes_file, p) for p in exc.problems)
        else:
            found: list[Problem] = []
            nodes = parse_nodes(doc, found)
            problems.extend(RepoProblem(nodes_file, p) for p in found)
    if config is not None and nodes is not None:
        problems.extend(_check_references(config, nodes, cfg_file, nodes_file))
    if any(p.severity == "error" for p in problems) or config is None or nodes is None or raw_nodes is None:
        raise RepoError(problems)
    return RepoSpec(
        revision, path, config_text, config, nodes, tuple(problems), raw_nodes.decode("utf-8", errors="replace")
    )


def nodes_file_too_large(name: str, size: int) -> Problem | None:
    """The problem of a nodes.yaml of `size` bytes past its bound, else None."""
    if size <= MAX_NODES_FILE_BYTES:
        return None
    return Problem(
        "",
        "nodes-file-too-large",
        f"{name} is {size} bytes; the bound is {MAX_NODES_FILE_BYTES} bytes: select nodes by their labels "
        "(nodeSelector) rather than listing thousands by name",
    )


def _check_references(config: MigPartedConfig, nodes: NodesFile, cfg_file: str, nodes_file: str) -> list[RepoProblem]:
    """Every config named in nodes.yaml exists. Whether an assigned config fits is decided per node, in
    `desired`, when the cluster's nodes are known; the configs no assignment names are checked against
    the catalogue here, and their problems are warnings (they block nothing, but a person should see them)."""
    problems: list[RepoProblem] = []
    names = set(config.names())
    referenced = referenced_configs(nodes)
    for pool in nodes.suggest.pools or ():
        for j, name in enumerate(pool.configs):
            if name not in names:
                problems.append(
                    RepoProblem(
                        nodes_file,
                        Problem(
                            index_path(key_path(pool.path, "configs"), j),
                            "config-not-found",
                            f"config {name!r} is not in {cfg_file} (it has: {', '.join(config.names())})"
                            + did_you_mean(name, config.names()),
                        ),
                    )
                )
    for name, path in referenced.items():
        if name not in names:
            problems.append(
                RepoProblem(
                    nodes_file,
                    Problem(
                        path,
                        "config-not-found",
                        f"config {name!r} is not in {cfg_file} (it has: {', '.join(config.names())})"
                        + did_you_mean(name, config.names()),
                    ),
                )
            )
    for name in config.names():
        if name in referenced:
            continue
        for p in fit(config, name, None, nodes.strategy).problems:
            if p.severity == "error":
                p = Problem(p.path, p.rule, p.message + " (no assignment names this config)", "warning")
            problems.append(RepoProblem(cfg_file, p))
    return problems


def referenced_configs(nodes: NodesFile) -> dict[str, str]:
    """Config name -> the first nodes.yaml path that names it."""
    referenced: dict[str, str] = {}
    for a in nodes.assignments:
        referenced.setdefault(a.config, key_path(a.path, "config"))
    if nodes.default is not None:
        referenced.setdefault(nodes.default, "default")
    return referenced


# ---------------------------------------------------------------------------------------- nodes.yaml


def parse_nodes(doc: object, problems: list[Problem]) -> NodesFile | None:
    """nodes.yaml (already loaded) → NodesFile; problems appended with their paths."""
    if not isinstance(doc, Mapping):
        problems.append(Problem("", "not-a-mapping", "nodes.yaml must be a mapping with version and assignments"))
        return None
    start = len(problems)
    problems.extend(_unexpected_fields(doc, "", _TOP_FIELDS))
    if doc.get("version") != "v1":
        problems.append(
            Problem(
                "version",
                "unknown-version",
                f"version must be \"v1\", not {doc.get('version')!r}"
                if "version" in doc
                else "missing 'version' (must be \"v1\")",
            )
        )
    written = doc.get("strategy")
    strategy = as_strategy(written)
    if written is not None and strategy is None:
        problems.append(
            Problem("strategy", "invalid-strategy", f"strategy must be one of {', '.join(STRATEGIES)}, not {written!r}")
        )
    cm_name = cm_ns = None
    cm = doc.get("configMap")
    if cm is not None:
        if not isinstance(cm, Mapping):
            problems.append(
                Problem("configMap", "invalid-configmap", "configMap must be a mapping with name and namespace")
            )
        else:
            problems.extend(_unexpected_fields(cm, "configMap", ("name", "namespace")))
            cm_name, cm_ns = cm.get("name"), cm.get("namespace")
            if cm_name is not None and not (
                isinstance(cm_name, str) and _DNS_SUBDOMAIN.match(cm_name) and len(cm_name) <= 253
            ):
                problems.append(Problem("configMap.name", "invalid-name", f"{cm_name!r} is not a valid ConfigMap name"))
            if cm_ns is not None and not (isinstance(cm_ns, str) and _DNS_LABEL.match(cm_ns) and len(cm_ns) <= 63):
                problems.append(
                    Problem("configMap.namespace", "invalid-name", f"{cm_ns!r} is not a valid namespace name")
                )
    max_unavailable, max_defaulted, deadline = _parse_rollout(doc.get("rollout"), problems)
    default = doc.get("default")
    if default is not None and not isinstance(default, str):
        problems.append(Problem("default", "invalid-config-name", f"default must be a config name, not {default!r}"))
    prune = doc.get("prune", False)
    if not isinstance(prune, bool):
        problems.append(Problem("prune", "invalid-prune", f"prune must be true or false, not {prune!r}"))
    assignments = _parse_assignments(doc.get("assignments"), problems)
    suggest = _parse_suggest(doc.get("suggest"), problems)
    if len(problems) == start:  # the published schema (gitops/schema.py) holds too: label key syntax, ...
        problems.extend(schema_problems(doc))
    if len(problems) > start:
        return None
    return NodesFile(
        strategy, cm_name, cm_ns, max_unavailable, default, prune, assignments, max_defaulted, deadline, suggest
    )


_SUGGEST_FIELDS = (
    "maxNodes",
    "newConfigs",
    "pools",
    "trustedPriorityNamespaces",
    "maxPodsPerNamespace",
    "claimsWithoutPods",
)


def _parse_suggest(raw: object, problems: list[Problem]) -> SuggestPolicy:
    """nodes.yaml `suggest` (the schema holds too: it runs once these checks pass)."""
    if raw is None:
        return SuggestPolicy()
    if not isinstance(raw, Mapping):
        problems.append(Problem("suggest", "invalid-suggest", "suggest must be a mapping such as {maxNodes: 4}"))
        return SuggestPolicy()
    problems.extend(_unexpected_fields(raw, "suggest", _SUGGEST_FIELDS))
    trusted = raw.get("trustedPriorityNamespaces", ["kube-system"])
    if not isinstance(trusted, list) or not all(isinstance(n, str) and n for n in trusted):
        problems.append(
            Problem(
                "suggest.trustedPriorityNamespaces",
                "invalid-trustedprioritynamespaces",
                "trustedPriorityNamespaces must be a list of namespace names",
            )
        )
        trusted = ["kube-system"]
    return SuggestPolicy(
        _whole(raw, "maxNodes", 1, None, problems, "suggest"),
        _flag(raw, "newConfigs", problems),
        _parse_pools(raw.get("pools"), problems),
        tuple(trusted),
        _whole(raw, "maxPodsPerNamespace", 1, None, problems, "suggest"),
        _flag(raw, "claimsWithoutPods", problems),
    )


def _flag(raw: Mapping[str, object], key: str, problems: list[Problem]) -> bool:
    value = raw.get(key, False)
    if isinstance(value, bool):
        return value
    problems.append(Problem(f"suggest.{key}", f"invalid-{key.lower()}", f"{key} must be true or false, not {value!r}"))
    return False


def _parse_pools(raw_pools: object, problems: list[Problem]) -> tuple[SuggestPool, ...] | None:
    if raw_pools is None:
        return None
    if not isinstance(raw_pools, list):
        problems.append(Problem("suggest.pools", "invalid-pools", "pools must be a list"))
        return ()
    pools = [pool for i, item in enumerate(raw_pools) if (pool := _parse_pool(item, i, problems)) is not None]
    return tuple(pools)


def _parse_pool(item: object, i: int, problems: list[Problem]) -> SuggestPool | None:
    path = index_path("suggest.pools", i)
    if not isinstance(item, Mapping):
        problems.append(Problem(path, "invalid-pool", "each pool is a mapping with configs and nodes or nodeSelector"))
        return None
    problems.extend(_unexpected_fields(item, path, ("configs", "nodes", "nodeSelector")))
    configs = item.get("configs")
    if not isinstance(configs, list) or not configs or not all(isinstance(c, str) and c for c in configs):
        problems.append(
            Problem(
                key_path(path, "configs"),
                "invalid-configs",
                "configs must be a non-empty list of config names of config.yaml",
            )
        )
        return None
    if ("nodes" in item) == ("nodeSelector" in item):
        problems.append(Problem(path, "one-target", "give exactly one of nodes (a list of node names) or nodeSelector"))
        return None
    if "nodes" in item:
        names = item["nodes"]
        if not isinstance(names, list) or not names or not all(isinstance(n, str) and n for n in names):
            problems.append(
                Problem(key_path(path, "nodes"), "invalid-nodes", "nodes must be a non-empty list of node names")
            )
            return None
        return SuggestPool(path, tuple(configs), nodes=tuple(names))
    selector = parse_selector(item["nodeSelector"], key_path(path, "nodeSelector"), problems)
    return None if selector is None else SuggestPool(path, tuple(configs), selector=selector)


def _parse_rollout(raw: object, problems: list[Problem]) -> tuple[int | str, int | None, float]:
    """(maxUnavailable, maxDefaulted, progressDeadlineSeconds)."""
    if raw is None:
        return 1, None, DEFAULT_PROGRESS_DEADLINE
    if not isinstance(raw, Mapping):
        problems.append(Problem("rollout", "invalid-rollout", "rollout must be a mapping such as {maxUnavailable: 1}"))
        return 1, None, DEFAULT_PROGRESS_DEADLINE
    problems.extend(_unexpected_fields(raw, "rollout", _ROLLOUT_FIELDS))
    return (
        _max_unavailable(raw.get("maxUnavailable", 1), problems),
        _whole(raw, "maxDefaulted", 0, None, problems),
        float(
            _whole(raw, "progressDeadlineSeconds", 1, DEFAULT_PROGRESS_DEADLINE, problems) or DEFAULT_PROGRESS_DEADLINE
        ),
    )


def _whole(
    raw: Mapping[str, object],
    key: str,
    least: int,
    default: float | None,
    problems: list[Problem],
    section: str = "rollout",
) -> Any:
    value = raw.get(key, default)
    if value is default or (isinstance(value, int) and not isinstance(value, bool) and value >= least):
        return value
    problems.append(
        Problem(
            key_path(section, key),
            f"invalid-{key.lower()}",
            f"{key} must be a whole number >= {least}, not {value!r}",
        )
    )
    return default


def _max_unavailable(value: object, problems: list[Problem]) -> int | str:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    if isinstance(value, str):
        m = _PERCENT.match(value)
        if m and 1 <= int(m.group(1)) <= 100:
            return value
    problems.append(
        Problem(
            "rollout.maxUnavailable",
            "invalid-max-unavailable",
            f"maxUnavailable must be a whole number >= 1 or a percentage from \"1%\" to \"100%\", not {value!r}",
        )
    )
    return 1


def _parse_assignments(raw: object, problems: list[Problem]) -> tuple[Assignment, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        problems.append(Problem("assignments", "invalid-assignments", "assignments must be a list"))
        return ()
    if len(raw) > MAX_ASSIGNMENTS:
        problems.append(
            Problem(
                "assignments",
                "too-many-assignments",
                f"{len(raw)} assignments; the bound is {MAX_ASSIGNMENTS}: one assignment lists any number of "
                "nodes (nodes:) or selects them by their labels (nodeSelector)",
            )
        )
        return ()
    out = []
    for i, item in enumerate(raw):
        path = index_path("assignments", i)
        if not isinstance(item, Mapping):
            problems.append(
                Problem(
                    path, "invalid-assignment", "each assignment is a mapping with config and nodes or nodeSelector"
                )
            )
            continue
        problems.extend(_unexpected_fields(item, path, ("config", "nodes", "nodeSelector")))
        config = item.get("config")
        if not isinstance(config, str) or not config:
            problems.append(
                Problem(
                    key_path(path, "config"),
                    "invalid-config-name",
                    "config is required: the name of a config in config.yaml",
                )
            )
        has_nodes, has_selector = "nodes" in item, "nodeSelector" in item
        if has_nodes == has_selector:
            problems.append(
                Problem(path, "one-target", "give exactly one of nodes (a list of node names) or nodeSelector")
            )
            continue
        if has_nodes:
            names = item["nodes"]
            if not isinstance(names, list) or not names or not all(isinstance(n, str) and n for n in names):
                problems.append(
                    Problem(key_path(path, "nodes"), "invalid-nodes", "nodes must be a non-empty list of node names")
                )
                continue
            out.append(Assignment(path, str(config), nodes=tuple(names)))
        else:
            selector = parse_selector(item["nodeSelector"], key_path(path, "nodeSelector"), problems)
            if selector is not None:
                out.append(Assignment(path, str(config), selector=selector))
    return tuple(out)


def parse_selector(raw: object, path: str, problems: list[Problem]) -> LabelSelector | None:
    if not isinstance(raw, Mapping):
        problems.append(
            Problem(path, "invalid-selector", "nodeSelector must be a mapping with matchLabels and/or matchExpressions")
        )
        return None
    start = len(problems)
    problems.extend(_unexpected_fields(raw, path, ("matchLabels", "matchExpressions")))
    labels = raw.get("matchLabels") or {}
    if not isinstance(labels, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
        problems.append(
            Problem(
                key_path(path, "matchLabels"),
                "invalid-selector",
                "matchLabels must map label keys to string values (quote numbers and booleans)",
            )
        )
        labels = {}
    exprs: list[Requirement] = []
    raw_exprs = raw.get("matchExpressions") or []
    if not isinstance(raw_exprs, list):
        problems.append(
            Problem(key_path(path, "matchExpressions"), "invalid-selector", "matchExpressions must be a list")
        )
        raw_exprs = []
    for j, e in enumerate(raw_exprs):
        epath = index_path(key_path(path, "matchExpressions"), j)
        if not isinstance(e, Mapping) or not isinstance(e.get("key"), str) or e.get("operator") not in _OPERATORS:
            problems.append(
                Problem(
                    epath, "invalid-selector", f"each expression needs a key and an operator ({', '.join(_OPERATORS)})"
                )
            )
            continue
        values = e.get("values") or []
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            problems.append(Problem(key_path(epath, "values"), "invalid-selector", "values must be a list of strings"))
            continue
        if e["operator"] in ("In", "NotIn") and not values:
            problems.append(
                Problem(key_path(epath, "values"), "invalid-selector", f"operator {e['operator']} needs values")
            )
            continue
        if e["operator"] in ("Exists", "DoesNotExist") and values:
            problems.append(
                Problem(key_path(epath, "values"), "invalid-selector", f"operator {e['operator']} takes no values")
            )
            continue
        exprs.append(Requirement(e["key"], e["operator"], tuple(values)))
    if len(problems) > start:
        return None
    if not labels and not exprs:
        problems.append(
            Problem(path, "empty-selector", "an empty nodeSelector would match every node; name the labels to match")
        )
        return None
    return LabelSelector(tuple(sorted(labels.items())), tuple(exprs))

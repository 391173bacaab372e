"""A fleet repository: one config repo for several clusters, each checked offline against its inventory.

The layout (docs/fleet.md):

    fleet.yaml                          the clusters and the wave each rolls out in
    config.yaml                         the configs every cluster carries
    clusters/<name>/config.yaml         the cluster's MIG config: the shared configs, unchanged, and its own
    clusters/<name>/nodes.yaml          its assignments
    clusters/<name>/inventory.yaml      what `migops inventory` recorded of it (GPU nodes, strategy)
    clusters/<name>/sync/migsync.yaml   the MigSync the GitOps tool applies to it: `spec.ref` is the commit it
                                        follows, `spec.path` its directory

A cluster's reconciler reads exactly its own directory (the MigSync's `path`), as for one cluster. The
check here is the reconciler's own: `repo.load_repo` and `desired.resolve` on the nodes the inventory
recorded, so a pull request shows what each cluster's reconciler would say, with the cluster's name and
file:line:col in every problem.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from migops.api.migsync import API_VERSION, CONFIG_FILE, KIND, NODES_FILE
from migops.api.names import (
    DEPLOY_DRA_DRIVER_LABEL,
    DEVICE_ID_LABEL,
    GPU_COUNT_LABEL,
    GPU_PRODUCT_LABEL,
    GPUS_ANNOTATION,
    OWNER_LABEL,
    UNMANAGED_LABEL,
)
from migops.api.objects import GpuOperator, MigSettings
from migops.gitops.desired import DesiredState, FitCache, resolve
from migops.gitops.repo import RepoError, RepoProblem, RepoSpec, load_repo
from migops.gitops.schema import schema_problems
from migops.mig.problems import MigError, Problem, index_path, key_path
from migops.mig.spec import MigPartedConfig, parse_config
from migops.mig.strategy import Strategy, as_strategy
from migops.mig.yamlsafe import Document, read_first

FLEET_FILE = "fleet.yaml"
INVENTORY_FILE = "inventory.yaml"
SYNC_DIR = "sync"
MIGSYNC_FILE = f"{SYNC_DIR}/migsync.yaml"
FLEET_SCHEMA = "fleet.v1.schema.json"
INVENTORY_SCHEMA = "inventory.v1.schema.json"
# Labels an inventory always records: what names a node's GPUs, and the opt-out of management.
GPU_LABELS = (GPU_PRODUCT_LABEL, GPU_COUNT_LABEL, DEVICE_ID_LABEL, UNMANAGED_LABEL)
# Labels that say another manager owns a node's MIG geometry (migops.kube.owners): recorded where a node has one.
OWNERSHIP_LABELS = (DEPLOY_DRA_DRIVER_LABEL, OWNER_LABEL)
_SHA = re.compile(r"^[0-9a-f]{40}$")

Reader = Callable[[str], bytes | None]  # a repository-relative path -> its bytes, None when absent


def directory_reader(root: Path) -> Reader:
    """The files under `root`, as they are on disk."""

    def read(path: str) -> bytes | None:
        file = root / path
        return file.read_bytes() if file.is_file() else None

    return read


@dataclass(frozen=True)
class FleetProblem:
    """A problem in one file of the fleet repo, of one cluster ('' for the fleet as a whole)."""

    cluster: str
    file: str
    problem: Problem  # located (line, column) when the path is found in the file

    @property
    def severity(self) -> str:
        return self.problem.severity

    def __str__(self) -> str:
        p = self.problem
        where = f"{self.file}:{p.line}:{p.column}" if p.line is not None else self.file
        return f"{where}: {p.severity}: {p}"

    def as_dict(self) -> dict[str, object]:
        return {"cluster": self.cluster, "file": self.file, **self.problem.as_dict()}


@dataclass(frozen=True)
class FleetCluster:
    name: str
    wave: int
    path: str  # its directory in the repository


@dataclass(frozen=True)
class FleetFile:
    shared_config: str  # the configs every cluster carries
    clusters: tuple[FleetCluster, ...]

    @property
    def waves(self) -> tuple[tuple[FleetCluster, ...], ...]:
        """The clusters by wave, lowest first: the first wave is the canary."""
        numbers = sorted({c.wave for c in self.clusters})
        return tuple(tuple(c for c in self.clusters if c.wave == n) for n in numbers)


@dataclass(frozen=True)
class InventoryNodes:
    """Nodes of one cluster that look alike: the same recorded labels and GPU list."""

    names: tuple[str, ...]
    labels: tuple[tuple[str, str], ...]
    gpus: str | None = None  # the agent's migops.io/gpus annotation, when the node has one


@dataclass(frozen=True)
class Inventory:
    """What a check of a cluster's nodes.yaml needs of the cluster, recorded by `migops inventory`."""

    cluster: str
    strategy: Strategy | None
    configmap: tuple[str, str]  # (namespace, name) of the MIG ConfigMap
    labels: tuple[str, ...]  # the label keys recorded: a selector reading another cannot be judged here
    nodes: tuple[InventoryNodes, ...]
    operator: GpuOperator = GpuOperator()  # recorded only where the cluster has a GPUCluster

    def node_objects(self) -> dict[str, dict[str, Any]]:
        """name -> a Node as the reconciler reads it (its recorded labels and GPU annotation)."""
        out: dict[str, dict[str, Any]] = {}
        for group in self.nodes:
            labels = dict(group.labels)
            if labels.get(UNMANAGED_LABEL) == "true":
                continue  # the reconciler leaves it alone
            notes = {GPUS_ANNOTATION: group.gpus} if group.gpus else {}
            for name in group.names:
                out[name] = {"metadata": {"name": name, "labels": labels, "annotations": notes}}
        return out

    def settings(self) -> MigSettings:
        namespace, name = self.configmap
        return MigSettings(strategy=self.strategy, config_name=name, namespace=namespace)

    @property
    def node_count(self) -> int:
        return sum(len(g.names) for g in self.nodes)

    def as_dict(self) -> dict[str, Any]:
        """The inventory file's content (inventory.v1.schema.json)."""
        namespace, name = self.configmap
        return {
            "version": "v1",
            "cluster": self.cluster,
            "strategy": self.strategy,
            "configMap": {"name": name, "namespace": namespace},
            "labels": list(self.labels),
            **({"gpuOperator": self._operator()} if self.operator.gpu_cluster else {}),
            "nodes": [
                {"names": list(g.names), "labels": dict(g.labels), **({"gpus": g.gpus} if g.gpus else {})}
                for g in self.nodes
            ],
        }

    def _operator(self) -> dict[str, Any]:
        return {"gpuCluster": self.operator.gpu_cluster, "clusterPolicies": list(self.operator.policies)}


def group_nodes(
    nodes: Iterable[tuple[str, Mapping[str, str], str | None]], keys: Sequence[str]
) -> tuple[InventoryNodes, ...]:
    """(name, labels, gpus annotation) per node -> groups of alike nodes, keeping only `keys`; sorted, so
    the file changes only when the cluster does."""
    groups: dict[tuple[tuple[tuple[str, str], ...], str | None], list[str]] = {}
    wanted = set(keys)
    for name, labels, gpus in nodes:
        kept = tuple(sorted((k, v) for k, v in labels.items() if k in wanted))
        groups.setdefault((kept, gpus), []).append(name)
    return tuple(
        InventoryNodes(tuple(sorted(names)), kept, gpus) for (kept, gpus), names in sorted(groups.items(), key=str)
    )


# ------------------------------------------------------------------------------------------ reading
def _located(doc: Document | None, problems: Iterable[Problem]) -> list[Problem]:
    out = []
    for p in problems:
        loc = doc.locate(p.path) if doc is not None else None
        out.append(p.at(loc.line, loc.column) if loc else p)
    return out


def _read_doc(text: bytes, cluster: str, file: str, out: list[FleetProblem]) -> Document | None:
    try:
        return read_first(text)
    except MigError as exc:
        out.extend(FleetProblem(cluster, file, p) for p in exc.problems)
        return None


def _schema_checked(
    text: bytes,
    schema: str,
    cluster: str,
    file: str,
    out: list[FleetProblem],
    shown: Callable[[object], object] = lambda value: value,
) -> Document | None:
    """The file read and checked against its published schema; None (problems in `out`) when it fails."""
    doc = _read_doc(text, cluster, file, out)
    if doc is None:
        return None
    found = schema_problems(shown(doc.value), schema)
    out.extend(FleetProblem(cluster, file, p) for p in _located(doc, found))
    return None if found else doc


def parse_fleet(read: Reader, out: list[FleetProblem]) -> FleetFile | None:
    """fleet.yaml, with the rules a schema cannot say (unique names, directories)."""
    text = read(FLEET_FILE)
    if text is None:
        out.append(FleetProblem("", FLEET_FILE, Problem("", "file-missing", f"no {FLEET_FILE} at the fleet's root")))
        return None
    doc = _schema_checked(text, FLEET_SCHEMA, "", FLEET_FILE, out)
    if doc is None:
        return None
    raw: Mapping[str, Any] = doc.value  # type: ignore[assignment]
    clusters: list[FleetCluster] = []
    seen: dict[str, str] = {}
    for i, item in enumerate(raw["clusters"]):
        path = index_path("clusters", i)
        name = item["name"]
        where = item.get("path") or f"clusters/{name}"
        if name in seen:
            problem = Problem(key_path(path, "name"), "duplicate-cluster", f"cluster {name!r} is also {seen[name]}")
            out.extend(FleetProblem(name, FLEET_FILE, p) for p in _located(doc, [problem]))
            continue
        seen[name] = path
        clusters.append(FleetCluster(name, int(item.get("wave", 0)), where.strip("/")))
    return FleetFile(str(raw.get("sharedConfig") or CONFIG_FILE), tuple(clusters))


def _names_checked(value: object) -> object:
    """The inventory as the schema needs to see it: where every group's names are non-empty strings
    (what the schema asks of each item), only the first of each, so a cluster of thousands of nodes is
    not walked name by name by the validator; anything else is left whole for the schema to name."""
    if not isinstance(value, Mapping) or not isinstance(value.get("nodes"), list):
        return value
    groups = []
    for g in value["nodes"]:
        names = g.get("names") if isinstance(g, Mapping) else None
        if isinstance(names, list) and names and all(isinstance(n, str) and n for n in names):
            g = {**g, "names": names[:1]}
        groups.append(g)
    return {**value, "nodes": groups}


def parse_inventory(text: bytes, cluster: str, file: str, out: list[FleetProblem]) -> Inventory | None:
    doc = _schema_checked(text, INVENTORY_SCHEMA, cluster, file, out, _names_checked)
    if doc is None:
        return None
    raw: Mapping[str, Any] = doc.value  # type: ignore[assignment]
    if raw["cluster"] != cluster:
        problem = Problem(
            "cluster",
            "inventory-of-another-cluster",
            f"this inventory was recorded of cluster {raw['cluster']!r}, not {cluster!r}: "
            f"run `migops inventory --cluster {cluster}` against {cluster}",
        )
        out.extend(FleetProblem(cluster, file, p) for p in _located(doc, [problem]))
        return None
    cm = raw.get("configMap") or {}
    nodes = tuple(
        InventoryNodes(tuple(g["names"]), tuple(sorted(g.get("labels", {}).items())), g.get("gpus"))
        for g in raw["nodes"]
    )
    operator = raw.get("gpuOperator") or {}
    return Inventory(
        cluster,
        as_strategy(raw.get("strategy")),
        (cm.get("namespace") or "gpu-operator", cm.get("name") or "default-mig-parted-config"),
        tuple(raw.get("labels") or ()),
        nodes,
        GpuOperator(tuple(operator.get("clusterPolicies") or ()), operator.get("gpuCluster")),
    )


# ------------------------------------------------------------------------------------------ one cluster
@dataclass(frozen=True)
class ClusterVerdict:
    """What the cluster's reconciler would say of the commit, judged on its inventory."""

    cluster: FleetCluster
    problems: tuple[FleetProblem, ...]
    assignments: int = 0  # read from nodes.yaml (0 when it does not load)
    nodes: int = 0  # in the inventory
    desired: DesiredState | None = None  # node -> config, when the commit is valid for the cluster
    ref: str | None = None  # the revision its MigSync follows

    @property
    def valid(self) -> bool:
        return not any(p.severity == "error" for p in self.problems)


class _Files:
    """One cluster's files, read once, each parsed once for locating problems."""

    def __init__(self, read: Reader, cluster: FleetCluster) -> None:
        self.read, self.cluster = read, cluster
        self._text: dict[str, bytes | None] = {}
        self._docs: dict[str, Document | None] = {}

    def path(self, name: str) -> str:
        return f"{self.cluster.path}/{name}"

    def text(self, file: str) -> bytes | None:
        if file not in self._text:
            self._text[file] = self.read(file)
        return self._text[file]

    def doc(self, file: str) -> Document | None:
        if file not in self._docs:
            text = self.text(file)
            try:
                self._docs[file] = None if text is None else read_first(text)
            except MigError:
                self._docs[file] = None
        return self._docs[file]

    def problems(self, found: Iterable[RepoProblem]) -> list[FleetProblem]:
        return [
            FleetProblem(self.cluster.name, p.file, q) for p in found for q in _located(self.doc(p.file), [p.problem])
        ]

    def at(self, file: str, problems: Iterable[Problem]) -> list[FleetProblem]:
        return [FleetProblem(self.cluster.name, file, p) for p in _located(self.doc(file), problems)]


def check_cluster(
    read: Reader, cluster: FleetCluster, shared: MigPartedConfig | None, shared_file: str, cache: FitCache
) -> ClusterVerdict:
    """One cluster: its files load as the reconciler loads them, carry the shared configs unchanged, and
    every assignment fits the nodes its inventory recorded."""
    files = _Files(read, cluster)
    out: list[FleetProblem] = []
    ref = _check_migsync(files, out)
    cfg, nodes = files.path(CONFIG_FILE), files.path(NODES_FILE)
    try:
        spec: RepoSpec | None = load_repo({cfg: files.text(cfg), nodes: files.text(nodes)}, cluster.path)
    except RepoError as exc:
        out.extend(files.problems(exc.problems))
        spec = None
    if spec is not None and shared is not None:
        out.extend(files.at(cfg, _shared_drift(spec.config, shared, shared_file)))
    inv_file = files.path(INVENTORY_FILE)
    raw = files.text(inv_file)
    if raw is None:
        problem = Problem("", "inventory-missing", f"no {inv_file}: run `migops inventory --cluster {cluster.name}`")
        out.append(FleetProblem(cluster.name, inv_file, problem))
        return ClusterVerdict(cluster, tuple(out), 0, 0, None, ref)
    inventory = parse_inventory(raw, cluster.name, inv_file, out)
    if spec is None or inventory is None:
        return ClusterVerdict(cluster, tuple(out), 0, inventory.node_count if inventory else 0, None, ref)
    out.extend(files.at(nodes, _unrecorded_labels(spec, inventory, inv_file)))
    out.extend(files.at(inv_file, _both_stacks(inventory)))
    desired = None
    try:
        desired = resolve(spec, inventory.node_objects(), inventory.settings(), cache)
        out.extend(files.problems(desired.warnings))
    except RepoError as exc:
        out.extend(files.problems(exc.problems))
    return ClusterVerdict(cluster, tuple(out), len(spec.nodes.assignments), inventory.node_count, desired, ref)


def _shared_drift(mine: MigPartedConfig, shared: MigPartedConfig, shared_file: str) -> list[Problem]:
    """Every shared config is in the cluster's config.yaml, unchanged (the same on the GPUs)."""
    out = []
    names = set(mine.names())
    for name in shared.names():
        path = key_path("mig-configs", name)
        if name not in names:
            out.append(
                Problem("mig-configs", "shared-config-missing", f"config {name!r} of {shared_file} is missing here")
            )
        elif mine.digest(name) != shared.digest(name):
            out.append(
                Problem(
                    path,
                    "shared-config-differs",
                    f"config {name!r} differs from the one in {shared_file}: every cluster carries the shared "
                    f"configs unchanged (copy it from {shared_file}, or give this cluster's own a name of its own)",
                )
            )
    return out


def _selector_keys(spec: RepoSpec) -> dict[str, str]:
    """Label key -> the first nodeSelector path that reads it."""
    keys: dict[str, str] = {}
    for a in spec.nodes.assignments:
        if a.selector is None:
            continue
        where = key_path(a.path, "nodeSelector")
        for k, _ in a.selector.match_labels:
            keys.setdefault(k, where)
        for r in a.selector.match_expressions:
            keys.setdefault(r.key, where)
    return keys


def _unrecorded_labels(spec: RepoSpec, inventory: Inventory, inv_file: str) -> list[Problem]:
    recorded = set(inventory.labels) | set(GPU_LABELS)
    return [
        Problem(
            path,
            "label-not-in-inventory",
            f"the selector reads label {key!r}, which {inv_file} does not record, so whether it matches the right "
            f"nodes cannot be checked: run `migops inventory --cluster {inventory.cluster} --label {key}`",
        )
        for key, path in _selector_keys(spec).items()
        if key not in recorded
    ]


def _both_stacks(inventory: Inventory) -> list[Problem]:
    conflict = inventory.operator.conflict
    return [Problem("gpuOperator", "gpu-operator-both-stacks", conflict, "warning")] if conflict else []


def _check_migsync(files: _Files, out: list[FleetProblem]) -> str | None:
    """sync/migsync.yaml: a MigSync following this directory; returns the ref it follows."""
    file = files.path(MIGSYNC_FILE)
    text = files.text(file)
    if text is None:
        problem = Problem("", "migsync-missing", f"no {file}: the MigSync the GitOps tool applies to the cluster")
        out.append(FleetProblem(files.cluster.name, file, problem))
        return None
    doc = _read_doc(text, files.cluster.name, file, out)
    if doc is None:
        return None
    obj: Mapping[str, Any] = doc.value if isinstance(doc.value, Mapping) else {}
    raw_spec = obj.get("spec")
    spec: Mapping[str, Any] = raw_spec if isinstance(raw_spec, Mapping) else {}
    found: list[Problem] = []
    if obj.get("apiVersion") != API_VERSION or obj.get("kind") != KIND:
        found.append(Problem("kind", "not-a-migsync", f"must be a {KIND} ({API_VERSION})"))
    path = str(spec.get("path") or "").strip("/").removeprefix("./")
    if path != files.cluster.path:
        found.append(
            Problem(
                "spec.path",
                "migsync-path",
                f"the MigSync follows {path or 'the root'!r}, not the cluster's directory {files.cluster.path!r}",
            )
        )
    ref = spec.get("ref")
    if not (isinstance(ref, str) and _SHA.match(ref)):
        found.append(
            Problem(
                "spec.ref",
                "ref-not-pinned",
                f"ref {ref!r} is not a commit SHA: the cluster's reconciler would take every commit as soon as it "
                "polls, not at its wave's turn (`migops fleet pin REV` writes the pins)",
                "warning",
            )
        )
    out.extend(files.at(file, found))
    return ref if isinstance(ref, str) else None


# ------------------------------------------------------------------------------------------ the fleet
@dataclass(frozen=True)
class FleetVerdict:
    fleet: FleetFile | None
    problems: tuple[FleetProblem, ...]  # of the fleet as a whole (fleet.yaml, the shared config.yaml)
    clusters: tuple[ClusterVerdict, ...]

    @property
    def valid(self) -> bool:
        return not any(p.severity == "error" for p in self.problems) and all(c.valid for c in self.clusters)


def _shared(read: Reader, file: str, out: list[FleetProblem]) -> MigPartedConfig | None:
    text = read(file)
    if text is None:
        return None  # no shared configs: each cluster's config.yaml is its own
    try:
        return parse_config(text.decode("utf-8", errors="replace"))
    except MigError as exc:
        out.extend(FleetProblem("", file, p) for p in exc.problems)
        return None


def check_fleet(read: Reader, cache: FitCache | None = None) -> FleetVerdict:
    """Every cluster of the fleet, as its reconciler would judge the commit."""
    out: list[FleetProblem] = []
    fleet = parse_fleet(read, out)
    if fleet is None:
        return FleetVerdict(None, tuple(out), ())
    shared = _shared(read, fleet.shared_config, out)
    cache = cache or FitCache()
    verdicts = tuple(check_cluster(read, c, shared, fleet.shared_config, cache) for c in fleet.clusters)
    return FleetVerdict(fleet, tuple(out), verdicts)


def is_fleet_root(read: Reader) -> bool:
    return read(FLEET_FILE) is not None


# ------------------------------------------------------------------------------------------ diff
@dataclass(frozen=True)
class NodeConfigChange:
    node: str
    before: str | None  # the config it would get at the base revision; None: none
    after: str | None


def cluster_changes(before: ClusterVerdict | None, after: ClusterVerdict) -> tuple[NodeConfigChange, ...]:
    """Nodes whose config changes from the base's verdict to this one's (both on the inventory now)."""
    if after.desired is None:
        return ()  # the commit is refused there: nothing changes
    old = {n: t.config for n, t in before.desired.targets.items()} if before and before.desired else {}
    new = {n: t.config for n, t in after.desired.targets.items()}
    return tuple(
        NodeConfigChange(n, old.get(n), new.get(n)) for n in sorted(set(old) | set(new)) if old.get(n) != new.get(n)
    )

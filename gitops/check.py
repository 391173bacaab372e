"""The config repo checked offline: a nodes.yaml, with the config.yaml beside it, without a cluster.

`migops validate` runs this on every nodes.yaml it is given or finds (by name, nodes.yaml / nodes.yml, or
by shape: a mapping with `version` and `assignments` and no `mig-configs`). It is the reconciler's own
loader (`repo.load_repo`: the schema, strategy, rollout, selectors, and every named config existing in
config.yaml), plus what can be known of the nodes without asking the cluster: an assignment whose
selector names a GPU model (GFD's `nvidia.com/gpu.product`, or migops's device-ID label) must fit that
model, and with `--gpu` every assigned config must fit a node with those GPUs. Problems are located at
their line and column in nodes.yaml.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from migops.api.migsync import CONFIG_FILE, NODES_FILE
from migops.api.names import DEVICE_ID_LABEL, GPU_PRODUCT_LABEL
from migops.gitops.repo import Assignment, RepoError, RepoSpec, load_repo, nodes_file_too_large
from migops.mig.catalogue import GpuModel, UnknownGpuError, catalogue
from migops.mig.fit import NodeGpus, fit
from migops.mig.problems import MigError, Problem, key_path
from migops.mig.strategy import Strategy
from migops.mig.yamlsafe import Document, read_first

NAMES = (NODES_FILE, "nodes.yml")


def is_nodes_file(name: str, doc: object) -> bool:
    """nodes.yaml by its name, or by its shape (version + assignments, no mig-configs)."""
    if Path(name).name in NAMES:
        return True
    return isinstance(doc, Mapping) and "version" in doc and "assignments" in doc and "mig-configs" not in doc


@dataclass(frozen=True)
class NodesCheck:
    """The verdict on one nodes.yaml."""

    file: str
    config_file: str  # the config.yaml it was checked against
    assignments: int  # how many the file holds (0 when it does not parse)
    problems: tuple[Problem, ...]  # located in `file`

    @property
    def valid(self) -> bool:
        return not any(p.severity == "error" for p in self.problems)


def _models(a: Assignment) -> list[str]:
    """The GPU models an assignment's selector names (matchLabels or an In expression)."""
    if a.selector is None:
        return []
    names = [v for k, v in a.selector.match_labels if k in (GPU_PRODUCT_LABEL, DEVICE_ID_LABEL)]
    for r in a.selector.match_expressions:
        if r.key in (GPU_PRODUCT_LABEL, DEVICE_ID_LABEL) and r.operator == "In":
            names += r.values
    return names


def _fit(spec: RepoSpec, config: str, gpus: NodeGpus, strategy: Strategy | None) -> tuple[Problem, ...]:
    """Does `config` fit these GPUs (a model whose count is unknown, or a node's GPUs: --gpu)? The one
    answer the reconciler, the webhook and `migops validate` share (migops.mig.fit)."""
    return fit(spec.config, config, gpus, strategy).errors


def _written(doc: Document) -> int:
    """How many assignments the file holds, read before (or without) the checks that reject it."""
    value = doc.value
    assignments = value.get("assignments") if isinstance(value, Mapping) else None
    return len(assignments) if isinstance(assignments, list) else 0


def _located(doc: Document, problems: Sequence[Problem]) -> list[Problem]:
    out = []
    for p in problems:
        loc = doc.locate(p.path)
        out.append(p.at(loc.line, loc.column) if loc else p)
    return out


def check_nodes(
    file: str,
    text: bytes,
    config_text: bytes | None,
    config_file: str,
    gpus: Sequence[GpuModel] = (),
    strategy: Strategy | None = None,
) -> NodesCheck:
    """Check one nodes.yaml against its config.yaml (None: not there)."""
    too_large = nodes_file_too_large(file, len(text))
    if too_large is not None:  # the reconciler's verdict, before any reading
        return NodesCheck(file, config_file, 0, (too_large,))
    try:
        doc = read_first(text)
    except MigError as exc:
        return NodesCheck(file, config_file, 0, exc.problems)
    try:
        spec = load_repo({CONFIG_FILE: config_text, NODES_FILE: text}, "")
    except RepoError as exc:
        return NodesCheck(
            file, config_file, _written(doc), tuple(_located(doc, _refused(exc, config_text, config_file)))
        )
    problems = [p.problem for p in spec.warnings if p.file == NODES_FILE]
    strategy = strategy or spec.nodes.strategy
    for a in spec.nodes.assignments:
        problems += _assignment_fit(spec, a, gpus, strategy, config_file)
    if gpus and spec.nodes.default is not None:
        for p in _fit(spec, spec.nodes.default, NodeGpus(tuple(gpus), True), strategy):
            problems.append(
                Problem(
                    "default",
                    "does-not-fit",
                    f"config {spec.nodes.default!r} cannot be applied "
                    f"to a node with these GPUs (--gpu): {config_file}: {p}",
                )
            )
    return NodesCheck(file, config_file, len(spec.nodes.assignments), tuple(_located(doc, problems)))


def _refused(exc: RepoError, config_text: bytes | None, config_file: str) -> list[Problem]:
    """The loader's problems in nodes.yaml, and why the config names went unchecked when they did."""
    mine = [p.problem for p in exc.problems if p.file == NODES_FILE]
    if config_text is None:
        mine.append(
            Problem(
                "",
                "config-file-missing",
                f"no {config_file} beside it: the config names are "
                "not checked (the reconciler reads both from one directory)",
            )
        )
    elif any(p.file == CONFIG_FILE and p.severity == "error" for p in exc.problems):
        mine.append(
            Problem(
                "",
                "config-file-invalid",
                f"{config_file} is invalid (`migops validate "
                f"{config_file}` shows why): the config names are not checked",
            )
        )
    return mine


def _assignment_fit(
    spec: RepoSpec, a: Assignment, gpus: Sequence[GpuModel], strategy: Strategy | None, config_file: str
) -> list[Problem]:
    """Whether the assignment's config fits the GPUs given (--gpu), else the models its selector names."""
    found: tuple[Problem, ...] = ()
    problems: list[Problem] = []
    if gpus:
        found = _fit(spec, a.config, NodeGpus(tuple(gpus), True), strategy)
        on = f"a node with {', '.join(dict.fromkeys(g.name for g in gpus))} (--gpu)"
    else:
        for name in _models(a):
            try:
                model = catalogue().resolve(name.split("-MIG-")[0])
            except UnknownGpuError:
                problems.append(
                    Problem(
                        a.path,
                        "unknown-gpu-model",
                        f"the selector names {name!r}, which is no GPU migops knows (see `migops gpus`)",
                        "warning",
                    )
                )
                continue
            found = _fit(spec, a.config, NodeGpus((model,), False), strategy)
            on = f"{model.name} (the selector's {name})"
            if found:
                break
    where = key_path(a.path, "config")
    for p in found:
        problems.append(
            Problem(where, "does-not-fit", f"config {a.config!r} cannot be applied to {on}: {config_file}: {p}")
        )
    return problems

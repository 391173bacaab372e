"""The three deciders of "may this node use this config", each called the way production calls it, and
the comparison of their answers (tests/verdicts).

- the webhook: `webhook.nodelabels.validate` (a Node's nvidia.com/mig.config set to the config) and
  `webhook.configmaps.validate` (the ConfigMap in force rewritten while the node selects the config),
  on a `Snapshot` built as the informers build it;
- gitops' desired state, which the reconciler applies: `gitops.desired.resolve` on a repository whose
  nodes.yaml assigns the config to the node;
- `migops validate`: `migops.cli.mig.check` on the file, with `--gpu` for the node's GPUs.

An answer is (accepted, the rules of its errors). Nothing here decides a rule.
"""

from __future__ import annotations

import importlib.util
import json
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from migops.api.names import (
    CONFIGMAP_KEY,
    DEVICE_ID_LABEL,
    GPU_COUNT_LABEL,
    GPU_PRODUCT_LABEL,
    GPUS_ANNOTATION,
    MIG_CONFIG_LABEL,
)
from migops.api.objects import MigSettings, NodeFacts, node_gpus
from migops.cli.mig import check
from migops.gitops.desired import UNASSIGNED, FitCache, resolve
from migops.gitops.repo import RepoError, load_repo
from migops.mig.catalogue import catalogue
from migops.mig.gfd import single_product
from migops.mig.sources import read_file
from migops.webhook import configmaps, nodelabels
from migops.webhook.admission import Request
from migops.webhook.nodeindex import NodeIndexer
from migops.webhook.state import MigView, Snapshot

HERE = Path(__file__).resolve().parent
CONFORMANCE = HERE.parent / "mig" / "conformance"
H100, A100 = "0x233010DE", "0x20B010DE"
CM_NS, CM_NAME = "gpu-operator", "default-mig-parted-config"
NODE = "gpu-node"
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")

# Node kinds: (labels, annotations). Exact GPU lists, and one whose GPU count GFD does not tell.
NODE_KINDS: dict[str, tuple[dict[str, str], dict[str, str]]] = {
    "8xH100": ({DEVICE_ID_LABEL: H100, GPU_COUNT_LABEL: "8"}, {}),
    "8xA100": ({DEVICE_ID_LABEL: A100, GPU_COUNT_LABEL: "8"}, {}),
    "A100 (GFD single: model only)": (
        {GPU_PRODUCT_LABEL: single_product(catalogue().resolve(A100), "1g.5gb"), GPU_COUNT_LABEL: "7"},
        {},
    ),
    "H100+A100": ({}, {GPUS_ANNOTATION: f"{H100},{A100}"}),
}


@dataclass(frozen=True)
class Answer:
    accepted: bool
    rules: frozenset[str]

    def __str__(self) -> str:
        return "accepted" if self.accepted else f"denied {sorted(self.rules)}"


@dataclass(frozen=True)
class Case:
    """One question: config `name` of `text` on a node of `kind` under `strategy`."""

    source: str  # where the text comes from (corpus id or file)
    text: str
    path: Path  # the text on disk, for `migops validate`
    name: str
    kind: str
    strategy: str

    def node(self, labelled: bool) -> dict[str, Any]:
        labels, annotations = NODE_KINDS[self.kind]
        labels = {**labels, **({MIG_CONFIG_LABEL: self.name} if labelled else {})}
        return {"metadata": {"name": NODE, "labels": labels, "annotations": dict(annotations)}}


def _configmap(text: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": CM_NAME, "namespace": CM_NS},
        "data": {CONFIGMAP_KEY: text},
    }


def _request(kind: str, obj: dict, old: dict, namespace: str = "") -> Request:
    name = obj["metadata"]["name"]
    return Request("uid", kind, "", "UPDATE", name, namespace, obj, old, False, {})


def _denial(verdict: Any) -> Answer:
    return Answer(verdict.allowed, frozenset(verdict.rules))


# ------------------------------------------------------------------------------------------ deciders
def webhook_node(case: Case) -> Answer:
    """A Node's nvidia.com/mig.config set to the config, the ConfigMap in force holding the text."""
    indexer = NodeIndexer([NodeFacts.from_obj(case.node(False))])
    snap = Snapshot(MigView(MigSettings(strategy=case.strategy), _configmap(case.text)), indexer.summary, indexer.index)
    return _denial(nodelabels.validate(_request("Node", case.node(True), case.node(False)), snap))


def webhook_configmap(case: Case) -> Answer:
    """The ConfigMap in force written with the text while the node selects the config."""
    indexer = NodeIndexer([NodeFacts.from_obj(case.node(True))])
    snap = Snapshot(MigView(MigSettings(strategy=case.strategy), _configmap(case.text)), indexer.summary, indexer.index)
    cm = _configmap(case.text)
    return _denial(configmaps.validate(_request("ConfigMap", cm, _configmap(case.text), CM_NS), snap))


_FITS = FitCache()  # remembers, decides nothing


def gitops(case: Case) -> Answer:
    """nodes.yaml assigns the config to the node; the reconciler applies what `resolve` returns."""
    nodes_yaml = f"version: v1\nassignments:\n  - nodes: [{NODE}]\n    config: {json.dumps(case.name)}\n"
    try:
        spec = load_repo({"c/config.yaml": case.text.encode(), "c/nodes.yaml": nodes_yaml.encode()}, "c", "rev")
        resolve(spec, {NODE: case.node(False)}, MigSettings(strategy=case.strategy), _FITS)
    except RepoError as exc:
        # The question is this config on this node: the errors of the file's other configs (no node takes
        # them, so they are judged as the MIG ConfigMap's content, as webhook_configmap judges them) are
        # another question.
        errors = [p for p in exc.problems if p.severity == "error" and UNASSIGNED not in p.problem.message]
        if not errors:
            return Answer(True, frozenset())
        return Answer(False, frozenset(c.rule for p in errors for c in (p.causes or (p.problem,))))
    return Answer(True, frozenset())


def cli(case: Case, *, on_node: bool = True) -> Answer | None:
    """`migops validate FILE -c NAME --strategy S --gpu ...` (the node's GPUs); None when the node's
    GPU count is unknown (--gpu names each GPU). on_node=False: no --gpu, no --strategy (the catalogue)."""
    gpus = node_gpus(case.node(False))
    if on_node and (gpus is None or not gpus.exact):
        return None
    run = check(
        [str(case.path)], list(gpus.gpus) if on_node and gpus else [], case.strategy if on_node else None, case.name
    )
    (checked,) = run.checked
    rules = {p.rule for p in checked.problems if p.severity == "error"}
    for report in checked.reports:
        rules |= {p.rule for p in report.errors}
    return Answer(not rules, frozenset(rules))


DECIDERS: dict[str, Callable[[Case], Answer | None]] = {
    "webhook (Node label)": webhook_node,
    "gitops/reconciler": gitops,
    "migops validate": cli,
}


# ------------------------------------------------------------------------------------------ corpus
def texts(tmp: Path) -> Iterator[tuple[str, str, Path, list[str]]]:
    """(source, text, file, config names) for the conformance corpus inputs migops accepts as a bare
    config, then tests/verdicts/multi_model.yaml."""
    spec = importlib.util.spec_from_file_location("conformance_generate", CONFORMANCE / "generate.py")
    generate = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(generate)  # type: ignore[union-attr]
    corpus = json.loads((CONFORMANCE / "corpus.json").read_text(encoding="utf-8"))
    sources = [(e["id"], generate.input_bytes(e)) for e in corpus]
    sources.append(("multi_model.yaml", (HERE / "multi_model.yaml").read_bytes()))
    for i, (source, data) in enumerate(sources):
        contents = read_file(data)
        if contents.manifests or len(contents.sources) != 1 or contents.sources[0].config is None:
            continue
        config = contents.sources[0].config
        # Names a node label and nodes.yaml can both hold (a config named "" is selectable by neither).
        names = [n for n in dict.fromkeys(config.names()) if n and _LABEL_VALUE.match(n) and len(n) <= 63]
        if not names:
            continue
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            continue
        path = tmp / f"{i:04d}.yaml"
        path.write_bytes(data)
        yield source, text, path, names


def disagreements(
    case: Case, deciders: Mapping[str, Callable[[Case], Answer | None]] = DECIDERS
) -> tuple[dict[str, Answer], list[str]]:
    """Every decider's answer, and a line per decider that answers otherwise than the first."""
    answers = {name: found for name, decide in deciders.items() if (found := decide(case)) is not None}
    first_name, first = next(iter(answers.items()))
    where = f"{case.source}: config {case.name!r} on {case.kind} under {case.strategy}"
    return answers, [
        f"{where}: {first_name} {first}, {name} {answer}" for name, answer in answers.items() if answer != first
    ]

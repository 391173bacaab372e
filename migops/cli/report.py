"""How `migops validate` shows its verdicts: for a person (text), for programs (json), and for CI
(GitHub Actions workflow commands, GitLab's Code Quality report, SARIF 2.1.0 for code scanning).

Every problem is shown at `file:line:col`, the place its path points at in the file (for a config inside
a ConfigMap, the line within the whole file).
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace

from migops.cli.outputs import document
from migops.mig.catalogue import GpuModel, catalogue
from migops.mig.gfd import advertise
from migops.mig.problems import Problem
from migops.mig.sources import SkippedObject
from migops.mig.text import listed
from migops.mig.validate import STRATEGIES, ConfigReport, Strategy


@dataclass(frozen=True)
class Checked:
    """The verdict on one config source: a bare config file, or a MIG ConfigMap in a manifest stream."""

    file: str  # as given on the command line or found in a directory; "<stdin>" for -
    object: str | None  # e.g. "ConfigMap gpu-operator/default-mig-parted-config"; None for a bare file
    line: int | None  # where the object starts
    parsed: bool  # mig-parted's own parser would read it (the reports below exist only then)
    problems: tuple[Problem, ...]  # about the source as a whole (parse errors, no configs, reading notes)
    reports: tuple[ConfigReport, ...] = ()
    kind: str = "mig-config"  # or "nodes": a config repo's nodes.yaml (gitops.check), object names its config.yaml;
    # or "cluster": a file of one cluster of a fleet repo (gitops.fleet), object names the cluster ("fleet": the
    # fleet's own files)
    assignments: int = 0  # nodes, cluster: how many were read
    nodes: int = 0  # cluster: the nodes its inventory records
    unselected: str | None = None  # the config `-c` selects, when this source has none of that name

    @property
    def source(self) -> str:
        if self.kind == "nodes":
            return f"{self.file}: nodes.yaml"
        if self.kind == "cluster":
            return f"{self.file}: {'fleet' if self.object == 'fleet' else f'cluster {self.object}'}"
        if self.object is None:
            return self.file
        return f"{self.file}:{self.line}: {self.object}" if self.line else f"{self.file}: {self.object}"

    @property
    def valid(self) -> bool:
        return (
            self.parsed and not any(p.severity == "error" for p in self.problems) and all(r.valid for r in self.reports)
        )

    def all_problems(self) -> list[tuple[str | None, Problem]]:
        """(config name or None, problem) for every problem of this source."""
        out: list[tuple[str | None, Problem]] = [(None, p) for p in self.problems]
        out += [(r.name, p) for r in self.reports for p in r.problems]
        return out


@dataclass(frozen=True)
class ValidationRun:
    """Everything one `migops validate` found, and how it was asked."""

    checked: tuple[Checked, ...]
    skipped: tuple[tuple[str, SkippedObject], ...]  # (file, object)
    files: int
    node: tuple[GpuModel, ...] = ()
    strategy: Strategy | None = None
    ignored_files: tuple[str, ...] = field(default=())  # found in a directory, holding no MIG config

    @property
    def valid(self) -> bool:
        return all(c.valid for c in self.checked)


def where(file: str, p: Problem) -> str:
    if p.line is None:
        return file
    return f"{file}:{p.line}:{p.column}" if p.column else f"{file}:{p.line}"


def problem_line(file: str, p: Problem) -> str:
    return f"{where(file, p)}: {p.severity}: {p}"


# ---------------------------------------------------------------------------------------------- text


def _runs(items: Sequence[str]) -> list[tuple[int, int, str]]:
    """Consecutive equal items as (first index, last index, item)."""
    runs: list[tuple[int, int, str]] = []
    for i, item in enumerate(items):
        if runs and runs[-1][2] == item:
            runs[-1] = (runs[-1][0], i, item)
        else:
            runs.append((i, i, item))
    return runs


def node_text(node: Sequence[GpuModel]) -> str:
    return ", ".join(f"{b - a + 1} x {label}" for a, b, label in _runs([g.label() for g in node]))


def _gpu_state(r) -> str:  # noqa: ANN001
    if r.mig_enabled is None:
        return "not covered"
    if not r.mig_enabled:
        return "MIG disabled"
    if r.layout is None:
        return "invalid geometry"
    counts: dict[str, int] = {}
    for d in r.mig_devices:
        counts[d] = counts.get(d, 0) + 1
    return " + ".join(f"{c}x {d}" for d, c in counts.items()) or "MIG enabled, no instances"


def _summary(report: ConfigReport) -> str:
    return "; ".join(
        f"GPU {a}: {s}" if a == b else f"GPU {a}-{b}: {s}" for a, b, s in _runs([_gpu_state(r) for r in report.gpus])
    )


def _fits_text(report: ConfigReport) -> str:
    if len(report.fits) == len(catalogue().gpus):
        return "every GPU model"
    return ", ".join(dict.fromkeys(g.name for g in report.fits))


_ON_MODELS = re.compile(r"^on (?P<models>[^:]+?)(?: and (?P<more>\d+) more)?: (?P<rest>.*)$", re.S)
_STEM_END = re.compile(r" \(|; |: ")


def merge_across_families(problems: Sequence[Problem]) -> list[Problem]:
    """Catalogue mode: one problem per path and rule, where the core reports it once per GPU family (each
    family's own detail, such as the profiles it has, makes the messages differ). The merged line keeps
    what the messages share, names the models, and says where each one's detail is (--gpu, -o json)."""
    groups: dict[tuple[str, str, str, int | None, int | None], list[tuple[Problem, re.Match[str]]]] = {}
    order: list[Problem | tuple[str, str, str, int | None, int | None]] = []
    for p in problems:
        match = _ON_MODELS.match(p.message)
        if match is None:
            order.append(p)
            continue
        key = (p.path, p.rule, p.severity, p.line, p.column)
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append((p, match))
    out: list[Problem] = []
    for item in order:
        if isinstance(item, Problem):
            out.append(item)
            continue
        found = groups[item]
        if len(found) == 1:
            out.append(found[0][0])
            continue
        models = [m for _, match in found for m in match["models"].split(", ")]
        more = sum(int(match["more"] or 0) for _, match in found)
        stem = os.path.commonprefix([match["rest"] for _, match in found])
        if stem != found[0][1]["rest"]:
            # back to the last clause boundary outside parentheses: what every family's message says
            cut = [
                m.start()
                for m in _STEM_END.finditer(stem)
                if stem.count("(", 0, m.start()) == stem.count(")", 0, m.start())
            ]
            stem = stem[: cut[-1]] if cut else stem.rstrip()
        shown = ", ".join(models[:6])
        hidden = len(models) - 6 + more if len(models) > 6 else more
        named = shown + (f" and {hidden} more" if hidden else "")
        message = f"on {named} ({len(found)} GPU families): {stem} (each family's detail: --gpu MODEL or -o json)"
        out.append(replace(found[0][0], message=message))
    return out


def _whole(c: Checked) -> str:
    """The summary's word on the source as a whole, and why when it is invalid."""
    if c.unselected is not None:
        return f"; the file itself is INVALID: it has no config {c.unselected!r} (-c)"
    errors = sum(p.severity == "error" for p in c.problems)
    return f"; the file itself is INVALID ({errors} error(s) above)" if errors else ""


def text(run: ValidationRun, out=None) -> None:  # noqa: ANN001
    out = out or sys.stdout
    for c in run.checked:
        out.writelines(line + "\n" for line in _source_text(run, c))
    out.writelines(line + "\n" for line in _run_text(run))


def _source_text(run: ValidationRun, c: Checked) -> Iterator[str]:
    """The lines about one checked source: its verdict and problems, then each config's."""
    node = run.node
    if c.kind == "cluster":
        said = (
            f", {c.assignments} assignment(s) checked on the {c.nodes} node(s) of its inventory"
            if c.assignments
            else ""
        )
        yield f"{c.source}{said}: {'valid' if c.valid else 'INVALID'}"
    elif c.kind == "nodes":
        against = f" on a node with {node_text(node)}" if node else ""
        yield (
            f"{c.source}: {c.assignments} assignment(s) checked against {c.object}{against}: "
            f"{'valid' if c.valid else 'INVALID'}"
        )
    elif not c.parsed:
        yield f"{c.source}: INVALID"
    else:
        where_text = f" on a node with {node_text(node)}" if node else " against the GPU catalogue"
        strategy = f", MIG strategy {run.strategy}" if run.strategy else ""
        yield f"{c.source}: {len(c.reports)} config(s) checked{where_text}{strategy}"
    for p in c.problems:
        yield f"  {problem_line(c.file, p)}"
    if c.kind not in ("cluster", "nodes") and c.parsed:
        yield from _configs_text(run, c)


def _configs_text(run: ValidationRun, c: Checked) -> Iterator[str]:
    """A config source's configs, one line each with their problems (and what a valid one advertises
    under the strategy), then the count of valid and invalid."""
    node = run.node
    width = max((len(r.name) for r in c.reports), default=0)
    for r in c.reports:
        mark = "valid  " if r.valid else "INVALID"
        detail = _summary(r) if node else (f"fits: {_fits_text(r)}" if r.fits else "")
        yield f"  {mark} {r.name.ljust(width)}  {detail}".rstrip()
        for p in r.problems if node else merge_across_families(r.problems):
            yield f"      {problem_line(c.file, p)}"
        if node and r.valid and run.strategy:
            ad = advertise(r.gpus, run.strategy)
            shown = ", ".join(f"{k}={v}" for k, v in ad.resources.items()) or "nothing"
            yield f"      advertises ({run.strategy}): {shown}"
    bad = sum(not r.valid for r in c.reports)
    yield f"{len(c.reports) - bad} valid, {bad} invalid{_whole(c)}"


def _run_text(run: ValidationRun) -> Iterator[str]:
    """After the sources: the objects skipped, and the totals where there is more than one source."""
    if run.skipped:
        shown = listed(
            (f"{s.kind} {s.name or f'{f}:{s.line}'}" + (f" ({s.reason})" if s.reason else "") for f, s in run.skipped),
            8,
        )
        yield f"{len(run.skipped)} object(s) skipped, holding no MIG config: {shown}"
    if len(run.checked) != 1 or run.files != 1 or run.ignored_files:
        configs = sum(len(c.reports) for c in run.checked)
        bad = sum(not c.valid for c in run.checked)
        ignored = f"; {len(run.ignored_files)} file(s) without a MIG config ignored" if run.ignored_files else ""
        nodes = sum(c.kind in ("nodes", "cluster") for c in run.checked)
        clusters = len({c.object for c in run.checked if c.kind == "cluster" and c.object != "fleet"})
        repo = f", {nodes - sum(c.kind == 'cluster' for c in run.checked)} nodes.yaml" if nodes else ""
        repo += f", {clusters} cluster(s) of a fleet" if clusters else ""
        yield (
            f"total: {run.files} file(s), {len(run.checked) - nodes} MIG config source(s){repo}, {configs} config(s); "
            f"{len(run.checked) - bad} source(s) valid, {bad} invalid{ignored}"
        )


# ---------------------------------------------------------------------------------------------- json


def _advertises(report: ConfigReport, strategies: Sequence[Strategy]) -> dict[str, object]:
    out: dict[str, object] = {}
    for s in strategies:
        ad = advertise(report.gpus, s)
        out[s] = {"resources": ad.resources, "labels": ad.labels, "invalid_reason": ad.invalid_reason}
    return out


def as_json(run: ValidationRun) -> dict[str, object]:
    strategies: tuple[Strategy, ...] = (run.strategy,) if run.strategy else STRATEGIES
    node = run.node
    return document(
        "validate",
        {
            "valid": run.valid,
            "strategy": run.strategy,
            "node": [g.device_id for g in node],
            "sources": [
                {
                    "kind": c.kind,
                    **({"cluster": c.object} if c.kind == "cluster" else {}),
                    "file": c.file,
                    "object": c.object,
                    "line": c.line,
                    "parsed": c.parsed,
                    "valid": c.valid,
                    "problems": [p.as_dict() for p in c.problems],
                    "configs": [
                        {
                            "name": r.name,
                            "valid": r.valid,
                            "problems": [p.as_dict() for p in r.problems],
                            **(
                                {"gpus": [g.as_dict() for g in r.gpus]}
                                if node
                                else {"fits": [g.device_id for g in r.fits]}
                            ),
                            **({"advertises": _advertises(r, strategies)} if node and r.valid else {}),
                        }
                        for r in c.reports
                    ],
                }
                for c in run.checked
            ],
            "skipped": [
                {"file": f, "kind": s.kind, "name": s.name, "line": s.line, "reason": s.reason} for f, s in run.skipped
            ],
            "ignored_files": list(run.ignored_files),
        },
    )


def emit_json(doc: object, out=None) -> None:  # noqa: ANN001
    out = out or sys.stdout
    json.dump(doc, out, indent=2)
    out.write("\n")


# -------------------------------------------------------------------------------------------- github


def _escape_data(s: str) -> str:
    return s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(s: str) -> str:
    return _escape_data(s).replace(":", "%3A").replace(",", "%2C")


def _message(name: str | None, p: Problem) -> str:
    where_ = p.path or "(document)"
    return f"{where_}: {p.message}" + (f" (config {name})" if name and not p.path.startswith("mig-configs") else "")


def github(run: ValidationRun, out=None) -> None:  # noqa: ANN001
    """GitHub Actions workflow commands: one ::error / ::warning per problem, on its file and line, so the
    pull request's diff shows it where it is written; then one plain summary line."""
    out = out or sys.stdout
    for c in run.checked:
        for name, p in c.all_problems():
            props = [f"file={_escape_property(c.file)}"]
            if p.line is not None:
                props.append(f"line={p.line}")
                if p.column:
                    props.append(f"col={p.column}")
            props.append(f"title={_escape_property('migops ' + p.rule)}")
            out.write(f"::{p.severity} {','.join(props)}::{_escape_data(_message(name, p))}\n")
    bad = sum(not c.valid for c in run.checked)
    errors = sum(p.severity == "error" for c in run.checked for _, p in c.all_problems())
    warnings = sum(p.severity == "warning" for c in run.checked for _, p in c.all_problems())
    out.write(
        f"migops validate: {len(run.checked)} MIG config source(s) in {run.files} file(s): "
        f"{len(run.checked) - bad} valid, {bad} invalid ({errors} error(s), {warnings} warning(s)); "
        f"{len(run.skipped)} object(s) skipped\n"
    )


# -------------------------------------------------------------------------------------------- gitlab


def gitlab(run: ValidationRun) -> list[dict[str, object]]:
    """GitLab's Code Quality report (the subset of the Code Climate format its merge request widget reads):
    one issue per problem, errors `major` and warnings `minor`, with a fingerprint that stays the same
    when lines above the problem move."""
    import hashlib

    issues: list[dict[str, object]] = []
    for c in run.checked:
        for name, p in c.all_problems():
            key = "\0".join((c.file, c.object or "", name or "", p.path, p.rule, p.message))
            issues.append(
                {
                    "description": _message(name, p),
                    "check_name": f"migops/{p.rule}",
                    "fingerprint": hashlib.sha256(key.encode()).hexdigest()[:32],
                    "severity": "major" if p.severity == "error" else "minor",
                    "location": {"path": _uri(c.file), "lines": {"begin": p.line or 1}},
                }
            )
    return issues


# --------------------------------------------------------------------------------------------- sarif

SARIF_SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"


def sarif(run: ValidationRun, version: str) -> dict[str, object]:
    """SARIF 2.1.0: one run of the tool `migops`, a rule per rule id seen, a result per problem with its
    physical location (file, line, column in Unicode code points) and logical location (the path)."""
    rules: dict[str, int] = {}
    results = []
    for c in run.checked:
        for name, p in c.all_problems():
            index = rules.setdefault(p.rule, len(rules))
            region: dict[str, int] = {}
            if p.line is not None:
                region["startLine"] = p.line
                if p.column:
                    region["startColumn"] = p.column
            physical: dict[str, object] = {"artifactLocation": {"uri": _uri(c.file)}}
            if region:
                physical["region"] = region
            location: dict[str, object] = {"physicalLocation": physical}
            if p.path:
                location["logicalLocations"] = [{"fullyQualifiedName": p.path, "kind": "object"}]
            result: dict[str, object] = {
                "ruleId": p.rule,
                "ruleIndex": index,
                "level": "error" if p.severity == "error" else "warning",
                "message": {"text": _message(name, p)},
                "locations": [location],
            }
            properties = {k: v for k, v in (("config", name), ("object", c.object)) if v}
            if properties:
                result["properties"] = properties
            results.append(result)
    return {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "migops",
                        "version": version,
                        "rules": [
                            {
                                "id": rule,
                                "name": rule,
                                "shortDescription": {"text": f"migops rule {rule} (see docs/config-rules.md)"},
                            }
                            for rule in rules
                        ],
                    }
                },
                "columnKind": "unicodeCodePoints",
                "results": results,
            }
        ],
    }


def _uri(file: str) -> str:
    """A relative URI for a file path as given (GitHub resolves it against the repository root)."""
    from urllib.parse import quote

    path = file.replace("\\", "/")
    while path.startswith("./"):
        path = path[2:]
    return quote(path, safe="/-._~")

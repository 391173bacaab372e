"""Turning the MIG core's Problems into the lines of a denial or a warning, and naming nodes briefly."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from migops.api.objects import NodeFacts
from migops.mig.problems import Problem
from migops.mig.text import listed

Finding = tuple[str, str]  # (rule, text): one line of a denial
Warning_ = tuple[str, str, str]  # (rule, where, text): merged into short warnings


def text(problem: Problem) -> str:
    return f"{problem.path}: {problem.message}" if problem.path else problem.message


def split(problems: Iterable[Problem], context: str = "") -> tuple[list[Finding], list[Warning_]]:
    """Errors as denial lines (with `context`, e.g. which nodes), warnings as warning items."""
    errors: list[Finding] = []
    warnings: list[Warning_] = []
    for p in problems:
        if p.severity == "error":
            errors.append((p.rule, text(p) + (f" ({context})" if context else "")))
        else:
            warnings.append((p.rule, p.path, p.message))
    return errors, warnings


def node_names(nodes: Sequence[NodeFacts], limit: int = 5) -> str:
    """The first `limit` names and how many there are: reads only those of a lazy state.NodeSample."""
    count = len(nodes)
    return f"node{'s' if count != 1 else ''} {listed((n.name for n in nodes), limit, total=count)}"

"""The parts meet in the API server, not in each other's modules, and name labels through one module.

Read from the source with `ast` (imports inside functions count too):
- webhook/, agent/ and gitops/ import none of webhook/, reconciler/, agent/, gitops/ but themselves;
  reconciler/ imports gitops/ (the config repository is what it applies: gitops is its source library,
  as Flux's source-controller library is the kustomize-controller's) and suggest/ (its proposals), and
  neither webhook/ nor agent/. suggest/ may import what it needs (agent/'s GPU state types, gitops/).
  What they share lives in migops.api (names, object views, the MigSync API) beneath them all;
- migops.kube imports only migops.api, mig and logs; migops.api only migops.mig; migops.mig only itself;
  migops.sandbox (untrusted selectors in a bounded child, shared by the webhook and suggest) only api and mig;
- no "nvidia.com/..." or "migops.io/..." label, annotation, resource or API name is spelled as a string
  literal outside api/ and mig/ (where each is defined once): every other module imports the constant.
  Prose (messages, help, docstrings) that mentions a name is not a definition and is not flagged.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PARTS = ("webhook", "reconciler", "agent", "gitops")
# Which other parts each part may import (beside migops.api, kube, logs, mig, certs, ...).
ALLOWED = {"webhook": set(), "agent": set(), "gitops": set(), "reconciler": {"gitops"}}
# Where label names are defined; tests, benchmarks and docs spell them out on purpose (fixtures).
DEFINED_IN = ("api", "mig")
NOT_CODE = {"tests", "bench", "docs", "examples", "manifests", "charts", "hack", "build", "dist"}
_NAME = re.compile(r"(nvidia\.com|migops\.io)/[A-Za-z0-9._/-]*")
_QUOTED = re.compile(r"['\"](nvidia\.com|migops\.io)/")


def _sources(folder: str) -> list[Path]:
    return sorted(p for p in (ROOT / folder).rglob("*.py") if "__pycache__" not in p.parts)


def _imported(tree: ast.AST) -> set[str]:
    """The migops.<top> packages a module imports."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] if node.module != "migops" else [f"migops.{a.name}" for a in node.names]
        else:
            continue
        found.update(n.split(".")[1] for n in names if n.startswith("migops.") and n.count(".") >= 1)
    return found


def _literals(tree: ast.AST) -> list[tuple[int, str]]:
    """String constants that are a name (or a name's prefix), or hold one quoted (a CEL expression);
    docstrings and bare string statements aside."""
    prose = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
    return [
        (n.lineno, n.value)
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant)
        and isinstance(n.value, str)
        and id(n) not in prose
        and (_NAME.fullmatch(n.value) is not None or _QUOTED.search(n.value) is not None)
    ]


def test_the_parts_do_not_import_each_other() -> None:
    wrong = []
    for part in PARTS:
        others = set(PARTS) - {part} - ALLOWED[part]
        for path in _sources(part):
            for top in sorted(_imported(ast.parse(path.read_text())) & others):
                wrong.append(f"{path.relative_to(ROOT)} imports migops.{top}")
    assert wrong == []


def test_the_shared_layers_import_only_what_is_beneath_them() -> None:
    wrong = []
    layers = (("kube", {"kube", "api", "mig", "logs"}), ("api", {"api", "mig"}), ("mig", {"mig"}))
    for folder, may in (*layers, ("sandbox", {"sandbox", "api", "mig"})):
        for path in _sources(folder):
            for top in sorted(_imported(ast.parse(path.read_text())) - may):
                wrong.append(f"{path.relative_to(ROOT)} imports migops.{top}")
    assert wrong == []


def test_no_label_name_is_spelled_outside_api_and_mig() -> None:
    tops = [p for p in ROOT.iterdir() if p.is_dir() and (p / "__init__.py").exists()]
    folders = [p.name for p in tops if p.name not in NOT_CODE and p.name not in DEFINED_IN] + ["migops"]
    found, read = [], 0
    for folder in sorted(set(folders)):
        for path in _sources(folder):
            if path.is_symlink() or any(part.is_symlink() for part in path.parents if ROOT in part.parents):
                continue  # migops/<folder> links to the folders checked (or allowed) themselves
            read += 1
            for line, text in _literals(ast.parse(path.read_text())):
                found.append(f"{path.relative_to(ROOT)}:{line}: {text[:60]!r}")
    assert found == []
    assert {"webhook", "reconciler", "agent", "local", "migops"} <= set(folders) and read > 100


def test_each_name_is_defined_once() -> None:
    """No two module-level constants of api/ and mig/ hold the same label or annotation name (an event
    reporter, `*_CONTROLLER`, may share a spelling with a label: migops.io/webhook is both)."""
    where: dict[str, list[str]] = defaultdict(list)
    for folder in DEFINED_IN:
        for path in _sources(folder):
            for node in ast.parse(path.read_text()).body:
                targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
                if any(isinstance(t, ast.Name) and t.id.endswith("_CONTROLLER") for t in targets):
                    continue
                if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Constant):
                    value = node.value.value
                    if isinstance(value, str) and _NAME.fullmatch(value):
                        where[value].append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert {v: w for v, w in where.items() if len(w) > 1} == {}
    assert "nvidia.com/mig.config" in where and "migops.io/managed-by" in where  # the scan reads them


def test_the_checks_see_what_they_look_for() -> None:
    """The detectors flag what they must (so the tests above could fail) and pass prose."""
    code = ast.parse(
        '"""nvidia.com/mig.config in a docstring"""\n'
        'A = "nvidia.com/mig.config"\n'
        'B = f"nvidia.com/mig-{x}"\n'
        "C = \"k.startsWith('nvidia.com/mig-')\"\n"
        'D = f"nvidia.com/mig.config was changed by hand: {x}"\n'
        "from migops.reconciler import status\n"
        "def f():\n    import migops.gitops.repo\n"
    )
    assert sorted(line for line, _ in _literals(code)) == [2, 3, 4]
    assert _imported(code) == {"reconciler", "gitops"}

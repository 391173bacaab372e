"""The reconciler's shape, checked on its source: the state is a value the steps return,
never attributes they set on the controller; no class holds more than 12 attributes, no function runs
over 60 lines; its modules import each other one way only (no cycle, nothing imported late or under
TYPE_CHECKING to dodge one). tests/packaging/test_structure.py checks what every product folder shares."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import types
from pathlib import Path

import pytest
from source_checks import assigned, assignment_targets, chain_root, cycles

from migops.reconciler import state as sync_state
from migops.reconciler import steps
from migops.reconciler.ports import Ports

RECONCILER = Path(__file__).resolve().parents[2] / "reconciler"
PACKAGE = "migops.reconciler"
MAX_ATTRIBUTES = 12
MAX_LINES = 60


def _modules(root: Path = RECONCILER) -> dict[str, ast.Module]:
    return {p.stem: ast.parse(p.read_text(), str(p)) for p in sorted(root.glob("*.py"))}


def long_functions(root: Path = RECONCILER) -> list[str]:
    return [
        f"{name}.py:{n.name} ({n.end_lineno - n.lineno + 1} lines)"
        for name, tree in _modules(root).items()
        for n in ast.walk(tree)
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
        and n.end_lineno is not None
        and n.end_lineno - n.lineno + 1 > MAX_LINES
    ]


def attributes(cls: ast.ClassDef) -> set[str]:
    """Fields declared in the class body, and every `self.<name> = ...` in its methods."""
    found = {b.target.id for b in cls.body if isinstance(b, ast.AnnAssign) and isinstance(b.target, ast.Name)}
    for node in ast.walk(cls):
        targets = assignment_targets(node)
        for target in targets:
            for e in ast.walk(target):
                if isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and e.value.id == "self":
                    found.add(e.attr)
    return found


def big_classes(root: Path = RECONCILER) -> list[str]:
    return [
        f"{name}.py:{n.name} ({len(attributes(n))} attributes)"
        for name, tree in _modules(root).items()
        for n in ast.walk(tree)
        if isinstance(n, ast.ClassDef) and len(attributes(n)) > MAX_ATTRIBUTES
    ]


def _imported(node: ast.Import | ast.ImportFrom) -> list[str]:
    """The reconciler's modules an import statement names."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    elif node.module == PACKAGE:
        names = [f"{PACKAGE}.{a.name}" for a in node.names]
    else:
        names = [node.module or ""]
    return [n.removeprefix(PACKAGE + ".").split(".")[0] for n in names if n.startswith(PACKAGE + ".")]


def imports(root: Path = RECONCILER) -> dict[str, set[str]]:
    """Module -> the reconciler's modules it imports at its top level."""
    return {
        name: {m for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom) for m in _imported(n)}
        for name, tree in _modules(root).items()
    }


def late_imports(root: Path = RECONCILER) -> list[str]:
    """Imports of the reconciler's own modules inside functions, and TYPE_CHECKING blocks."""
    found = []
    for name, tree in _modules(root).items():
        for fn in ast.walk(tree):
            if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                found += [
                    f"{name}.py:{fn.name} imports {m}"
                    for n in ast.walk(fn)
                    if isinstance(n, ast.Import | ast.ImportFrom)
                    for m in _imported(n)
                ]
            if isinstance(fn, ast.If) and "TYPE_CHECKING" in ast.unparse(fn.test):
                found.append(f"{name}.py:{fn.lineno} has a TYPE_CHECKING block")
    return found


def step_assignments(root: Path = RECONCILER) -> list[str]:
    """What the steps assign inside their arguments other than the sync's `run`: `state.x = ...`,
    `ports.x.y |= ...`, `ports.x[k] = ...` (the state is a value: a step returns a new one; the ports
    stay what they are)."""
    tree = _modules(root)["steps"]
    found = []
    for fn in (n for n in tree.body if isinstance(n, ast.FunctionDef)):
        params = {a.arg for a in fn.args.args} - {"run"}
        for node in ast.walk(fn):
            targets = assignment_targets(node)
            for e in (a for target in targets for a in assigned(target)):
                if chain_root(e) in params:
                    found.append(f"steps.py:{fn.name}:{node.lineno} assigns {ast.unparse(e)}")
    return found


def test_no_function_of_the_reconciler_runs_over_60_lines() -> None:
    assert long_functions() == []


def test_no_class_of_the_reconciler_holds_more_than_12_attributes() -> None:
    assert big_classes() == []


def test_the_reconcilers_modules_import_each_other_one_way() -> None:
    graph = imports()
    assert "controller" in graph and graph["controller"] >= {"steps", "summary", "diff", "loop"}
    assert cycles(graph) == []
    assert late_imports() == []
    # Only the start-up knows the controller; the steps, summary, diff and loop get values and ports.
    assert {m for m, deps in graph.items() if "controller" in deps} <= {"main"}


def test_steps_take_state_run_ports_and_never_assign_to_the_controller() -> None:
    for step in steps.SYNC:
        assert list(inspect.signature(step).parameters) == ["state", "run", "ports"], step.__name__
    assert step_assignments() == []
    assert "Reconciler" not in (RECONCILER / "steps.py").read_text()


def aliased_names(root: Path = RECONCILER) -> list[str]:
    """`from migops.x import name as other` where `name` is no module: a name renamed on import
    (to dodge a step's name, say). A module imported under a short name (`status as st`) is not one."""
    found = []
    for name, tree in _modules(root).items():
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom) or not (node.module or "").startswith("migops"):
                continue
            for alias in node.names:
                if alias.asname and alias.asname != alias.name:
                    value = getattr(importlib.import_module(node.module or ""), alias.name, None)
                    if not isinstance(value, types.ModuleType):
                        found.append(f"{name}.py imports {alias.name} as {alias.asname}")
    return found


def test_no_name_is_renamed_on_import() -> None:
    assert aliased_names() == []


def test_the_ports_are_edges_only() -> None:
    """What lasts between syncs is in the state; the ports are the cluster, the repository, Events,
    metrics and status -- and the fit verdicts, a pure function's memo that any thread may share."""
    fields = {f.name for f in dataclasses.fields(Ports)}
    assert fields == {"options", "cluster", "writer", "revisions", "fit_cache", "events", "metrics", "status"}


def test_the_state_is_a_frozen_value() -> None:
    for cls in (
        sync_state.SyncState,
        sync_state.RecordState,
        sync_state.FetchVerdict,
        sync_state.NodeMemory,
        sync_state.SyncCache,
        sync_state.Seen,
    ):
        assert dataclasses.fields(cls) and cls.__dataclass_params__.frozen, cls  # type: ignore[attr-defined]
    state = sync_state.SyncState()
    with pytest.raises(dataclasses.FrozenInstanceError):
        state.last_applied = "x"  # type: ignore[misc]


def test_the_checks_find_what_they_look_for(tmp_path: Path) -> None:
    """Each check fails on code that breaks its rule (so an empty answer above means something)."""
    (tmp_path / "steps.py").write_text(
        "def apply(state, run, ports):\n    ports.memory = 1\n    state.x += 1\n    run.writes = 1\n"
        "    ports.memory.acknowledged |= {1}\n    state.nodes[1] = 2\n    run.wave.nodes[1] = 2\n"
        + "def long():\n"
        + "    x = 1\n" * MAX_LINES
    )
    (tmp_path / "controller.py").write_text(
        "from migops.reconciler import steps\n"
        "class Big:\n    def __init__(self):\n" + "".join(f"        self.a{i} = {i}\n" for i in range(13))
    )
    (tmp_path / "summary.py").write_text(
        "from typing import TYPE_CHECKING\nfrom migops.reconciler.controller import Big\n"
        "if TYPE_CHECKING:\n    pass\n"
        "def f():\n    from migops.reconciler import steps\n"
    )
    assert long_functions(tmp_path) == [f"steps.py:long ({MAX_LINES + 1} lines)"]
    assert big_classes(tmp_path) == ["controller.py:Big (13 attributes)"]
    assert step_assignments(tmp_path) == [
        "steps.py:apply:2 assigns ports.memory",
        "steps.py:apply:3 assigns state.x",
        "steps.py:apply:5 assigns ports.memory.acknowledged",
        "steps.py:apply:6 assigns state.nodes[1]",
    ]
    assert imports(tmp_path) == {"controller": {"steps"}, "steps": set(), "summary": {"controller"}}
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]
    assert late_imports(tmp_path) == ["summary.py:3 has a TYPE_CHECKING block", "summary.py:f imports steps"]
    (tmp_path / "plan.py").write_text(
        "from migops.gitops.desired import resolve as resolve_desired\nfrom migops.reconciler import status as st\n"
    )
    assert aliased_names(tmp_path) == ["plan.py imports resolve as resolve_desired"]

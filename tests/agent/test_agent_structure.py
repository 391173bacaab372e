"""The agent's shape, checked on its source, as tests/reconciler/test_reconciler_structure.py checks the
reconciler's: its state is a frozen value with the drift phase an enum (the states of docs/agent.md's
diagram), the flow is steps of one signature that assign only to their run value, one function writes
the node's state label, and no function of agent/ or `migops agent` runs over 60 lines."""

from __future__ import annotations

import ast
import dataclasses
import enum
import inspect
import re
from pathlib import Path

import pytest

from migops.agent import state as agent_state
from migops.agent import steps

ROOT = Path(__file__).resolve().parents[2]
AGENT = ROOT / "agent"
CLI = ROOT / "migops" / "cli" / "agent.py"
MAX_LINES = 60
MAX_ATTRIBUTES = 12
STATE_LABEL = "MIG_CONFIG_STATE_LABEL"
WRITER = ("report.py", "tell")  # the one function that writes the state label


def _sources(root: Path) -> dict[str, ast.Module]:
    paths = sorted(root.glob("*.py")) + ([CLI] if root == AGENT else [])
    return {p.name: ast.parse(p.read_text(), str(p)) for p in paths}


def _functions(tree: ast.Module) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]


def long_functions(root: Path = AGENT) -> list[str]:
    return [
        f"{name}:{fn.name} ({fn.end_lineno - fn.lineno + 1} lines)"
        for name, tree in _sources(root).items()
        for fn in _functions(tree)
        if fn.end_lineno is not None and fn.end_lineno - fn.lineno + 1 > MAX_LINES
    ]


def big_classes(root: Path = AGENT) -> list[str]:
    found = []
    for name, tree in _sources(root).items():
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            fields = {b.target.id for b in cls.body if isinstance(b, ast.AnnAssign) and isinstance(b.target, ast.Name)}
            fields |= {
                t.attr
                for n in ast.walk(cls)
                if isinstance(n, ast.Assign | ast.AnnAssign | ast.AugAssign)
                for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"
            }
            if len(fields) > MAX_ATTRIBUTES:
                found.append(f"{name}:{cls.name} ({len(fields)} attributes)")
    return found


def state_label_writers(root: Path = AGENT) -> list[str]:
    """Functions that name the state label or call a `set_state`: only `report.tell` may."""
    found = []
    for name, tree in _sources(root).items():
        for fn in (f for f in tree.body if isinstance(f, ast.FunctionDef | ast.ClassDef)):
            for node in ast.walk(fn):
                names_label = isinstance(node, ast.Name) and node.id == STATE_LABEL
                sets_state = isinstance(node, ast.Attribute) and node.attr == "set_state"
                if (names_label or sets_state) and (name, fn.name) != WRITER:
                    found.append(f"{name}:{fn.name}:{node.lineno}")
    return found


def step_assignments(root: Path = AGENT) -> list[str]:
    """Attributes the flow's steps assign on their arguments other than `run` (`state.x = ...`,
    `ports.x = ...`): the state is a value the loop replaces; the ports stay what they are."""
    found = []
    tree = _sources(root)["steps.py"]
    for fn in (n for n in tree.body if isinstance(n, ast.FunctionDef)):
        params = {a.arg for a in fn.args.args} - {"run"}
        for node in ast.walk(fn):
            if not isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
                continue
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                for e in ast.walk(target):
                    if isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and e.value.id in params:
                        found.append(f"steps.py:{fn.name}:{node.lineno} assigns {ast.unparse(e)}")
    return found


def diagram_phases(text: str) -> set[str]:
    """The states the drift diagram of docs/agent.md names (`A --what--> B` lines; `any` is every one)."""
    block = text.split("### Drift phases", 1)[1].split("```", 2)[1]
    edges = [re.match(r"^\s*(\S+)\s+--.*-+>\s*(\S+)\s*$", line) for line in block.splitlines()]
    return {phase for m in edges if m for phase in m.groups()} - {"any"}


def test_no_function_of_the_agent_runs_over_60_lines() -> None:
    assert long_functions() == []


def test_no_class_of_the_agent_holds_more_than_12_attributes() -> None:
    assert big_classes() == []


def test_one_function_writes_the_state_label() -> None:
    assert state_label_writers() == []
    assert "def set_state" not in (AGENT / "kube.py").read_text()


def test_the_flow_is_steps_of_one_signature_that_assign_only_their_run() -> None:
    assert len(steps.FLOW) >= 8
    for step in steps.FLOW:
        assert list(inspect.signature(step).parameters) == ["state", "run", "ports"], step.__name__
    assert step_assignments() == []


def test_the_state_is_a_frozen_value_and_drift_an_enum_of_the_documented_phases() -> None:
    for cls in (agent_state.AgentState, agent_state.DriftState, agent_state.RunOutcome, agent_state.ConfigRequest):
        assert dataclasses.fields(cls) and cls.__dataclass_params__.frozen, cls  # type: ignore[attr-defined]
    with pytest.raises(dataclasses.FrozenInstanceError):
        agent_state.AgentState().failures = 1  # type: ignore[misc]
    phases = agent_state.DriftPhase
    assert issubclass(phases, enum.Enum)
    assert {p.value for p in phases} == {"in-sync", "drifted-reported", "repairing", "held"}
    assert {f.name for f in dataclasses.fields(agent_state.DriftState)}.isdisjoint({"holding", "repairing"})
    assert diagram_phases((ROOT / "docs" / "agent.md").read_text()) == {p.value for p in phases}


def test_the_checks_find_what_they_look_for(tmp_path: Path) -> None:
    """Each check fails on code that breaks its rule (so an empty answer above means something)."""
    (tmp_path / "steps.py").write_text(
        "def pause(state, run, ports):\n    ports.node = 1\n    state.x += 1\n    run.paused = True\n"
        "def long():\n" + "    x = 1\n" * MAX_LINES
    )
    (tmp_path / "flow.py").write_text(
        "from migops.api.names import MIG_CONFIG_STATE_LABEL\n"
        "class Big:\n    def __init__(self):\n"
        + "".join(f"        self.a{i} = {i}\n" for i in range(13))
        + "    def fail(self, kube):\n        kube.set_state('failed')\n"
        + "def pend(kube):\n    kube.apply({MIG_CONFIG_STATE_LABEL: 'pending'})\n"
    )
    (tmp_path / "report.py").write_text("def tell(kube, s):\n    kube.apply({MIG_CONFIG_STATE_LABEL: s})\n")
    assert long_functions(tmp_path) == [f"steps.py:long ({MAX_LINES + 1} lines)"]
    assert big_classes(tmp_path) == ["flow.py:Big (13 attributes)"]
    assert step_assignments(tmp_path) == ["steps.py:pause:2 assigns ports.node", "steps.py:pause:3 assigns state.x"]
    assert state_label_writers(tmp_path) == ["flow.py:Big:18", "flow.py:pend:20"]
    text = "### Drift phases\n\n```\nin-sync --x--> held\nany --y--> repairing\n```\n"
    assert diagram_phases(text) == {"in-sync", "held", "repairing"}

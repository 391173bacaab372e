"""Every product folder in the reconciler's shape, checked on its source: no function runs over 60 lines;
a folder's modules import each other one way (no cycle, counting the imports made inside functions and
under TYPE_CHECKING: an import made late to start faster is fine, one made late to hide a cycle is not);
where a folder has steps (a tuple of functions in its steps.py), each takes (state, run, ports), assigns
only to its run value, and the state it takes is a frozen value throughout; no two product classes share
a name. tests/reconciler/test_reconciler_structure.py and tests/agent/test_agent_structure.py hold what
is particular to those two.

Everything is read with `ast` from the files beside this test, nothing imported: the checks judge any
checkout of the tree, an older one included.
"""

from __future__ import annotations

import ast
import functools
from collections import defaultdict
from pathlib import Path

from source_checks import assigned, assignment_targets, chain_root, cycles

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = (
    "mig",
    "api",
    "kube",
    "logs",
    "certs",
    "webhook",
    "gitops",
    "reconciler",
    "agent",
    "suggest",
    "sandbox",
    "migops/cli",
)
MAX_LINES = 60
STEP_PARAMETERS = ["state", "run", "ports"]
# Bases that make a class a value without being a dataclass.
VALUE_BASES = {"Enum", "StrEnum", "IntEnum", "NamedTuple"}

Sources = dict[str, ast.Module]  # module name within its folder ("state", "sub.mod") -> its tree


def sources(folder: Path) -> Sources:
    return {
        ".".join(p.relative_to(folder).with_suffix("").parts): ast.parse(p.read_text(), str(p))
        for p in sorted(folder.rglob("*.py"))
        if "__pycache__" not in p.parts
    }


@functools.cache
def product(root: Path = ROOT) -> dict[str, Sources]:
    """The product folders present under `root`, by name (read once per root: the checks only read them)."""
    return {name: sources(root / name) for name in PRODUCT if (root / name).is_dir()}


def _functions(tree: ast.AST) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]


def long_functions(folders: dict[str, Sources]) -> list[str]:
    return [
        f"{folder}/{module}:{fn.name} ({fn.end_lineno - fn.lineno + 1} lines)"
        for folder, modules in folders.items()
        for module, tree in modules.items()
        for fn in _functions(tree)
        if fn.end_lineno is not None and fn.end_lineno - fn.lineno + 1 > MAX_LINES
    ]


def _package(folder: str) -> str:
    return "migops." + folder.removeprefix("migops/").replace("/", ".")


def imports(folder: str, modules: Sources) -> dict[str, set[str]]:
    """Module -> the modules of its own folder it imports, wherever the import statement is."""
    package = _package(folder)
    graph: dict[str, set[str]] = {}
    for name, tree in modules.items():
        found: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                named = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                named = [f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            for full in named:
                if full.startswith(package + "."):
                    parts = full.removeprefix(package + ".").split(".")
                    found |= {".".join(parts[:i]) for i in range(1, len(parts) + 1)} & modules.keys()
        graph[name] = found - {name, "__init__"}
    return graph


def import_cycles(folders: dict[str, Sources]) -> list[str]:
    return [f"{folder}: {' -> '.join(c)}" for folder, mods in folders.items() for c in cycles(imports(folder, mods))]


def steps(tree: ast.Module) -> list[ast.FunctionDef]:
    """The steps of a steps.py: functions of the module listed in one of its module-level tuples."""
    defined = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    found: dict[str, ast.FunctionDef] = {}
    for node in tree.body:
        value = node.value if isinstance(node, ast.Assign | ast.AnnAssign) else None
        if isinstance(value, ast.Tuple) and value.elts and all(isinstance(e, ast.Name) for e in value.elts):
            names = [e.id for e in value.elts if isinstance(e, ast.Name)]
            if all(n in defined for n in names):
                found.update((n, defined[n]) for n in names)
    return list(found.values())


def step_signatures(folders: dict[str, Sources]) -> list[str]:
    return [
        f"{folder}/steps:{fn.name} takes {[a.arg for a in fn.args.args]}"
        for folder, mods in folders.items()
        if "steps" in mods
        for fn in steps(mods["steps"])
        if [a.arg for a in fn.args.args] != STEP_PARAMETERS
    ]


def step_assignments(folders: dict[str, Sources]) -> list[str]:
    """What the functions of a steps.py assign inside their arguments other than `run`: `state.x = ...`,
    `ports.x.y |= ...`, `ports.x[k] = ...` (the state is a value a step returns; the ports stay what they
    are)."""
    found = []
    for folder, mods in folders.items():
        tree = mods.get("steps")
        for fn in (n for n in (tree.body if tree else ()) if isinstance(n, ast.FunctionDef)):
            params = {a.arg for a in fn.args.args} - {"run"}
            for node in ast.walk(fn):
                for e in (a for target in assignment_targets(node) for a in assigned(target)):
                    if chain_root(e) in params:
                        found.append(f"{folder}/steps:{fn.name}:{node.lineno} assigns {ast.unparse(e)}")
    return found


def _classes(folders: dict[str, Sources]) -> dict[str, list[tuple[str, ast.ClassDef]]]:
    """Class name -> (folder/module, definition) of every class the product defines, nested ones too."""
    found: dict[str, list[tuple[str, ast.ClassDef]]] = defaultdict(list)
    for folder, mods in folders.items():
        for module, tree in mods.items():
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef):
                    found[node.name].append((f"{folder}/{module}", node))
    return found


def duplicate_classes(folders: dict[str, Sources]) -> dict[str, list[str]]:
    return {name: [w for w, _ in defs] for name, defs in _classes(folders).items() if len(defs) > 1}


def _frozen(cls: ast.ClassDef) -> bool | None:
    """True for a frozen dataclass or an enum or named tuple, False for another dataclass, None else."""
    if {ast.unparse(b).rsplit(".", 1)[-1] for b in cls.bases} & VALUE_BASES:
        return True
    for d in cls.decorator_list:
        call = d if isinstance(d, ast.Call) else None
        name = ast.unparse(call.func if call else d).rsplit(".", 1)[-1]
        if name == "dataclass":
            return any(k.arg == "frozen" and ast.unparse(k.value) == "True" for k in (call.keywords if call else ()))
    return None


def state_classes(folders: dict[str, Sources]) -> dict[str, str]:
    """The classes the steps' `state` names, and those their fields name in turn: name -> what is wrong
    with it as a value ("" for a frozen value; a dataclass without frozen=True, or a class that is no
    dataclass, enum or named tuple)."""
    classes = {name: defs[0] for name, defs in _classes(folders).items()}
    todo = [
        ast.unparse(fn.args.args[0].annotation)
        for mods in folders.values()
        if "steps" in mods
        for fn in steps(mods["steps"])
        if fn.args.args and fn.args.args[0].arg == "state" and fn.args.args[0].annotation is not None
    ]
    verdicts: dict[str, str] = {}
    while todo:
        name = todo.pop()
        if name in verdicts or name not in classes:
            continue
        where, cls = classes[name]
        frozen = _frozen(cls)
        verdicts[name] = (
            "" if frozen else f"{where}:{name} is {'a mutable dataclass' if frozen is False else 'no value'}"
        )
        for field in (b for b in cls.body if isinstance(b, ast.AnnAssign)) if frozen else ():
            todo += [n.id for n in ast.walk(field.annotation) if isinstance(n, ast.Name)]
            todo += [
                n.value for n in ast.walk(field.annotation) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            ]
    return verdicts


def mutable_state(folders: dict[str, Sources]) -> list[str]:
    return sorted(wrong for wrong in state_classes(folders).values() if wrong)


def test_every_product_folder_is_read() -> None:
    folders = product()
    assert set(folders) == set(PRODUCT)
    assert all(mods for mods in folders.values())


def test_no_product_function_runs_over_60_lines() -> None:
    assert long_functions(product()) == []


def test_each_folders_modules_import_each_other_one_way() -> None:
    folders = product()
    assert import_cycles(folders) == []
    assert imports("reconciler", folders["reconciler"])["controller"] >= {"steps", "loop"}  # the scan reads them


def test_steps_take_state_run_ports_and_assign_only_their_run() -> None:
    folders = product()
    assert {f for f, mods in folders.items() if "steps" in mods and steps(mods["steps"])} >= {"reconciler", "agent"}
    assert step_signatures(folders) == []
    assert step_assignments(folders) == []


def test_the_state_steps_take_is_frozen_throughout() -> None:
    folders = product()
    assert mutable_state(folders) == []
    assert {"SyncState", "NodeMemory", "AgentState", "DriftState", "DriftPhase"} <= state_classes(folders).keys()


def test_no_two_product_classes_share_a_name() -> None:
    assert duplicate_classes(product()) == {}


def test_the_checks_find_what_they_look_for(tmp_path: Path) -> None:
    """Each check fails on code that breaks its rule (so an empty answer above means something)."""
    (tmp_path / "agent").mkdir()
    (tmp_path / "agent" / "steps.py").write_text(
        "from migops.agent import flow\n"
        "def pause(state: AgentState, run, ports):\n    ports.node = 1\n    state.x += 1\n    run.paused = True\n"
        "def wait(state, ports):\n    pass\n"
        "FLOW = (pause, wait)\n"
        "def long():\n" + "    x = 1\n" * MAX_LINES
    )
    (tmp_path / "agent" / "flow.py").write_text(
        "from dataclasses import dataclass\n"
        "def later():\n    from migops.agent.steps import FLOW\n"
        "@dataclass(frozen=True)\nclass AgentState:\n    drift: 'Drift'\n    run: Outcome | None\n"
        "@dataclass\nclass Drift:\n    held: bool\n"
        "class Outcome:\n    pass\n"
        "class Ledger:\n    pass\n"
    )
    (tmp_path / "mig").mkdir()
    (tmp_path / "mig" / "problems.py").write_text("class Ledger:\n    pass\n")
    folders = product(tmp_path)
    assert set(folders) == {"agent", "mig"}
    assert long_functions(folders) == [f"agent/steps:long ({MAX_LINES + 1} lines)"]
    assert import_cycles(folders) == ["agent: flow -> steps -> flow"]
    assert step_signatures(folders) == ["agent/steps:wait takes ['state', 'ports']"]
    assert step_assignments(folders) == [
        "agent/steps:pause:3 assigns ports.node",
        "agent/steps:pause:4 assigns state.x",
    ]
    assert mutable_state(folders) == ["agent/flow:Drift is a mutable dataclass", "agent/flow:Outcome is no value"]
    assert duplicate_classes(folders) == {"Ledger": ["mig/problems", "agent/flow"]}

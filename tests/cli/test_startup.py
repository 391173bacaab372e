"""Start-up: the MIG commands import only what they use. `migops validate` runs in pre-commit hooks and PR
checks on every call; importing the Kubernetes client alone would cost more than the start-up budget. Each command runs in
a fresh interpreter, which reports the modules it loaded; the times are bench/cli_startup.py's."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from migops import cli

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = str(ROOT / "examples" / "nvidia-default-config.yaml")
H100 = "0x233010DE"

# What the cluster-facing commands need and the MIG commands never do (top-level package names).
SERVER_SIDE = ("kubernetes", "urllib3", "requests", "websocket", "flask", "werkzeug", "gunicorn", "prometheus_client")
SERVER_SIDE += ("cryptography", "jsonschema", "pynvml", "migops.webhook", "migops.reconciler", "migops.agent")
# What only the other command groups use: a MIG command line registers its own group alone (migops.cli.COMMANDS).
OTHER_GROUPS = ("migops.kube", "migops.logs", "migops.local", "logging", "subprocess")
OTHER_GROUPS += tuple(f"migops.cli.{g}" for g in ("agent", "reconcile", "suggest", "sim", "webhook"))
MIG_CORE = ("migops.mig.validate", "migops.mig.catalogue", "yaml")
# Standard-library modules a MIG command does without: the catalogue's data is read by path, the output
# schemas and the distribution's version only where shown (SARIF, --version), ~30 ms each.
PACKAGE_DATA = ("importlib.resources", "importlib.metadata", "zipfile", "tempfile", "email")

# Run `migops ARGS` as the console script does, then write the loaded modules' names to a file.
PROBE = """
import json, sys
from migops.cli import main
out, args = sys.argv[1], sys.argv[2:]
try:
    code = main(args)
except SystemExit as exc:
    code = exc.code
with open(out, "w") as f:
    json.dump({"code": code, "modules": sorted(sys.modules)}, f)
"""


def loaded(tmp_path: Path, *args: str) -> tuple[int, set[str]]:
    out = tmp_path / "modules.json"
    subprocess.run(
        [sys.executable, "-c", PROBE, str(out), *args], check=True, capture_output=True, timeout=60, cwd=ROOT
    )
    found = json.loads(out.read_text())
    return found["code"], set(found["modules"])


def _present(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return [n for n in names if n in modules or any(m.startswith(n + ".") for m in modules)]


@pytest.mark.parametrize(
    "args",
    [
        ("validate", DEFAULT),
        ("validate", "--gpu", H100, "--strategy", "single", "-o", "json", DEFAULT),
        ("plan", "--gpu", H100, "-c", "all-1g.10gb", DEFAULT),
        ("gpus",),
        ("--version",),
    ],
    ids=["validate", "validate-node-json", "plan", "gpus", "version"],
)
def test_mig_commands_load_no_cluster_client(tmp_path: Path, args: tuple[str, ...]) -> None:
    code, modules = loaded(tmp_path, *args)
    assert code in (0, 1)  # ran (valid or not), no usage error
    assert _present(modules, SERVER_SIDE) == []
    assert _present(modules, OTHER_GROUPS) == []
    if args[0] != "--version":
        assert _present(modules, PACKAGE_DATA) == []


def test_version_loads_no_mig_core(tmp_path: Path) -> None:
    """`migops --version` (and the parser every command builds) loads the MIG core only when a MIG
    command runs."""
    code, modules = loaded(tmp_path, "--version")
    assert code == 0
    assert _present(modules, MIG_CORE) == []
    assert _present(modules, ("migops.cli.mig", "migops.mig", *OTHER_GROUPS)) == []
    _, validating = loaded(tmp_path, "validate", DEFAULT)
    assert _present(validating, MIG_CORE) == list(MIG_CORE)  # the probe sees what a command loads


def _commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (sub,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def test_command_table_matches_the_groups() -> None:
    """migops.cli.COMMANDS names every command the groups register, in --help's order, and a command line
    that registers one group gets the same command, arguments and help as the whole tree."""
    full = _commands(cli.build_parser())
    assert list(full) == list(cli.COMMANDS)
    for name, group in cli.COMMANDS.items():
        alone = _commands(cli.build_parser(cli.groups_needed([name, "--help"])))
        assert cli.groups_needed([name]) == [group]
        assert name in alone and set(alone) <= {n for n, g in cli.COMMANDS.items() if g == group}
        assert alone[name].format_help() == full[name].format_help()


@pytest.mark.parametrize(
    ("argv", "groups"),
    [
        (["--version"], []),
        ([], None),
        (["--help"], None),
        (["-h", "validate"], None),
        (["--version", "validate"], None),
        (["nonsense"], None),
        (["plan", "x"], ["mig"]),
        (["certs", "--help"], ["webhook"]),
    ],
)
def test_groups_needed(argv: list[str], groups: list[str] | None) -> None:
    """Only a leading command narrows the tree; help, errors and anything else see every command."""
    assert cli.groups_needed(argv) == groups

"""What a person meets when a command line is wrong or a name is mistyped: the command's own usage and
the nearest name, counts that match the file, a reason for every INVALID, and a description on every
command's --help."""

from __future__ import annotations

import argparse
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from migops.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = str(ROOT / "examples" / "nvidia-default-config.yaml")
EXAMPLE = ROOT / "examples" / "config-repo"
TOP_USAGE = "usage: migops [-h]"


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """Exit status, stdout, stderr of `migops ARGS`, argparse's own exits included."""
    try:
        code = main(list(args))
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], str]]:
    """(command path, its one-line help in the parent's listing) for every command and subcommand."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            for name, sub in action.choices.items():
                yield (*path, name), helps.get(name, "")
                yield from commands(sub, (*path, name))


def test_every_command_and_subcommand_has_a_description(capsys: pytest.CaptureFixture[str]) -> None:
    found = list(commands(build_parser()))
    assert len(found) >= 25, found  # the tree is walked, not just its top
    assert ("local", "image") in [p for p, _ in found] and ("local", "deploy") in [p for p, _ in found]
    missing = []
    for path, summary in found:
        code, out, _ = run(capsys, *path, "--help")
        assert code == 0, path
        # argparse prints the description between the usage and the first list of arguments
        body = out.split("\n\n")
        described = len(body) > 2 and not body[1].startswith(("positional arguments:", "options:"))
        if not summary or not described:
            missing.append(" ".join(path))
    assert missing == []


def test_top_level_help_lists_every_command_with_its_summary(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--help")
    assert code == 0
    for path, summary in commands(build_parser()):
        if len(path) == 1:
            assert path[0] in out and summary.split()[0] in out, path
    code, out, _ = run(capsys, "local", "--help")
    for name in ("up", "image", "deploy", "down", "status", "env"):
        assert f"    {name} " in out, name


@pytest.mark.parametrize(
    ("argv", "usage", "hint"),
    [
        (("validate", "--gpus", "0x233010DE", DEFAULT), "usage: migops validate", "did you mean --gpu?"),
        (("plan", "--gpu", "0x233010DE", "--strategie", "mixed", DEFAULT), "usage: migops plan", "--strategy?"),
        (("local", "up", "--nodez", "2"), "usage: migops local up", "did you mean --nodes?"),
        (("diff", "--repo", ".", "--no-server-dryrun"), "usage: migops diff", "did you mean --no-server-dry-run?"),
    ],
)
def test_an_unknown_flag_gets_the_commands_usage_and_the_nearest_flag(
    capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], usage: str, hint: str
) -> None:
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert err.startswith(usage) and TOP_USAGE not in err, err
    assert "unrecognized arguments: " in err and hint in err, err


def test_an_unknown_gpu_names_the_nearest_product_after_the_commands_usage(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "validate", "--gpu", "NVIDIA-H100-80GB-HBM4", DEFAULT)
    assert code == 2
    assert err.startswith("usage: migops validate") and TOP_USAGE not in err
    assert "migops validate: unknown GPU 'NVIDIA-H100-80GB-HBM4'" in err
    assert "did you mean 'NVIDIA-H100-80GB-HBM3'?" in err
    code, _, err = run(capsys, "local", "up", "--gpu", "NVIDIA-A100-SXM4-40BG")
    assert code == 2 and "migops local up: unknown GPU" in err and "did you mean 'NVIDIA-A100-SXM4-40GB'?" in err


def test_a_mistyped_config_name_says_why_nothing_was_checked(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "validate", DEFAULT, "-c", "all-balancd")
    assert code == 1
    lines = out.rstrip().splitlines()
    assert "[config-not-found]" in lines[1] and "did you mean 'all-balanced'?" in lines[1]
    assert "and 73 more" in lines[1], lines[1]  # 8 of the file's 81 names, not all of them
    assert lines[-1] == "0 valid, 0 invalid; the file itself is INVALID: it has no config 'all-balancd' (-c)"
    code, out, _ = run(capsys, "plan", "--gpu", "0x233010DE", "-c", "all-balancd", DEFAULT)
    assert code == 1 and "did you mean 'all-balanced'?" in out


def test_a_nodes_file_with_a_mistyped_config_counts_its_assignments(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(EXAMPLE, repo)
    nodes = repo / "nodes.yaml"
    nodes.write_text(nodes.read_text().replace("config: all-balanced", "config: all-balancd", 1))
    code, out, _ = run(capsys, "validate", str(nodes))
    assert code == 1
    assert f"{nodes}: nodes.yaml: 2 assignment(s) checked against {repo}/config.yaml: INVALID" in out
    assert "config 'all-balancd' is not in config.yaml" in out and "did you mean 'all-balanced'?" in out


def test_local_up_refuses_a_repo_path_that_names_no_directory(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MIGOPS_HOME", str(tmp_path / "home"))
    (tmp_path / "file.yaml").write_text("version: v1\n")
    for given, why in ((tmp_path / "missing", "no such directory"), (tmp_path / "file.yaml", "not a directory")):
        code, out, err = run(capsys, "local", "up", "--repo", str(given))
        assert code == 2 and out == "", err
        assert f"migops local up: --repo {given}: {why}: give a git repository" in err
    assert not (tmp_path / "home").exists()  # refused before anything started

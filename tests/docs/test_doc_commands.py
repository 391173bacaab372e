"""Every shell block of the README and the user docs is run, and shows what it prints; a block that needs
what the tests do not have (a real cluster, a GPU, root, a registry) says so with a marker and is parsed
instead. The markers and the normalisation of output are in tests/docs/docblocks.py."""

from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from docblocks import ROOT, Block, blocks, commands, console_steps, matches, split_words, user_pages

from migops.cli import build_parser

VENV_BIN = Path(sys.executable).parent
MAKE_TARGETS = set(re.findall(r"^([a-z][a-z0-9-]*):", (ROOT / "Makefile").read_text(), re.M))
STEP_TIMEOUT = 600


def _runnable(page: Path) -> list[Block]:
    return [b for b in blocks(page) if b.needs is None]


def _pages_that_run() -> list[object]:
    params = []
    for page in user_pages():
        run = _runnable(page)
        if not run:
            continue
        local = any("migops local" in b.text or "kubectl" in b.text for b in run)
        marks = [pytest.mark.cluster] if local else []
        params.append(pytest.param(page, marks=marks, id=str(page.relative_to(ROOT))))
    return params


def parse_problem(words: list[str]) -> str | None:
    """Why a command line of a marked block would not run as written, as far as can be told without
    running it: migops's own parser, the Makefile's targets."""
    if words[0] == "sudo":
        words = words[1:]
    if words[0] == "migops":
        stderr = io.StringIO()
        try:
            with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
                build_parser().parse_args(words[1:])
        except SystemExit as exc:
            if exc.code:
                return f"migops refuses {' '.join(words)}: {stderr.getvalue().strip()}"
        return None
    if words[0] == "make":
        unknown = [t for t in words[1:] if "=" not in t and not t.startswith("-") and t not in MAKE_TARGETS]
        return f"no make target {unknown}" if unknown else None
    return None


def test_every_block_is_run_or_says_what_it_needs() -> None:
    every = [b for page in user_pages() for b in blocks(page)]
    assert len(every) > 30
    run = [b for b in every if b.needs is None]
    assert len(run) >= 8, "the blocks that can run here do"
    for b in every:
        if b.cwd is not None:
            assert (ROOT / b.cwd).is_dir(), f"{b.where}: no directory {b.cwd}"
        assert commands(b), f"{b.where}: a shell block without a command"


def test_blocks_that_are_not_run_are_parsed() -> None:
    problems = []
    for page in user_pages():
        for b in blocks(page):
            if b.needs is None:
                continue
            for line in commands(b):
                for words in split_words(line):
                    why = parse_problem(words)
                    if why:
                        problems.append(f"{b.where}: {why}")
    assert problems == []


def test_the_parse_check_catches_an_unknown_flag_and_target() -> None:
    assert parse_problem(["migops", "validate", "--gpus", "x", "f.yaml"]) is not None
    assert parse_problem(["migops", "validate", "--gpu", "0x233010DE", "f.yaml"]) is None
    assert parse_problem(["make", "no-such-target"]) is not None
    assert parse_problem(["make", "demo"]) is None


class Shell:
    """Commands run one after another in one environment: what a block exports, the next one has."""

    def __init__(self, home: Path) -> None:
        self.env_file = home / "doc-test.env"
        env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "COLUMNS", "MIGOPS_HOME")}
        env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
        env["MIGOPS_HOME"] = str(home / "migops")
        self.env = env
        self.env_file.write_text("")

    def run(self, script: str, cwd: Path) -> subprocess.CompletedProcess[str]:
        wrapped = f'source {self.env_file}\n{script}\nstatus=$?\nexport -p > {self.env_file}\nexit "$status"\n'
        return subprocess.run(
            ["bash", "-c", wrapped],
            cwd=cwd,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=STEP_TIMEOUT,
        )


def _run_block(shell: Shell, b: Block) -> None:
    cwd = ROOT / (b.cwd or ".")
    if b.kind != "console":
        done = shell.run("set -eo pipefail\n" + b.text, cwd)
        assert done.returncode == 0, f"{b.where}: exit {done.returncode}\n{done.stdout}"
        return
    for command, shown in console_steps(b):
        done = shell.run(command, cwd)
        if not any(line.strip() for line in shown):
            continue
        assert matches(shown, done.stdout), (
            f"{b.where}: `{command}` printed (exit {done.returncode}):\n{done.stdout}\n--- the page shows:\n"
            + "\n".join(shown)
        )


@pytest.mark.parametrize("page", _pages_that_run())
def test_the_page_runs_as_written(page: Path, tmp_path: Path) -> None:
    shell = Shell(tmp_path)
    try:
        for b in _runnable(page):
            _run_block(shell, b)
    finally:
        shell.run("migops local down >/dev/null 2>&1 || true", ROOT)


def test_console_output_is_compared_with_the_normalisation() -> None:
    assert matches(["a", "...", "d"], "a\nb\nc\nd\n")
    assert matches(["a ... c"], "a b c\n")
    assert matches(["a", "..."], "a\n")
    assert not matches(["a", "d"], "a\nb\nd\n")
    assert not matches(["a"], "a\nb\n")

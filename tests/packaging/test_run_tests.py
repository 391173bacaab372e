"""hack/run_tests.py, the runner behind `make test`: its closing report decides CI's verdict."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def runner():
    spec = importlib.util.spec_from_file_location("run_tests", ROOT / "hack" / "run_tests.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["run_tests"] = module
    spec.loader.exec_module(module)
    yield module
    del sys.modules["run_tests"]


def _tier(runner, tmp_path: Path, body: str, name: str = "t"):
    suite = tmp_path / name
    suite.mkdir()
    (suite / "test_x.py").write_text(body)
    log = tmp_path / f"{name}.log"
    return runner.pytest(runner.Tier(name, (str(suite),)), ["-p", "no:cacheprovider"], log)


def test_a_tier_counts_what_its_pytest_ran(runner, tmp_path: Path) -> None:
    body = "import pytest\ndef test_a(): pass\ndef test_b(): assert False\n@pytest.mark.skip\ndef test_c(): pass\n"
    outcome = _tier(runner, tmp_path, body)
    assert outcome.counts == {"passed": 1, "failed": 1, "skipped": 1}
    assert outcome.returncode == 1
    assert outcome.cpu > 0  # wait4's rusage of the pytest process: at least its interpreter's start
    # -q drops the rules around pytest's last line: still counted.
    quiet = runner.pytest(
        runner.Tier("q", (str(tmp_path / "t"),)), ["-q", "-p", "no:cacheprovider"], tmp_path / "q.log"
    )
    assert quiet.counts == {"passed": 1, "failed": 1, "skipped": 1}


def test_the_report_fails_on_a_failed_build_a_failed_tier_or_a_tier_that_ran_nothing(runner, tmp_path, capsys):
    good = _tier(runner, tmp_path, "def test_a(): pass\n", "good")
    empty = _tier(runner, tmp_path, "X = 1\n", "empty")  # pytest's exit 5: no tests
    built = [runner.Outcome("b", returncode=0)] * (1 + len(runner.BACKGROUND_BUILDS))
    assert runner.report(built, [good, good]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "tests: 2 passed, 0 failed"
    assert empty.returncode == 5
    assert runner.report(built, [good, empty]) == 1
    assert runner.report([runner.Outcome("b", returncode=2, log="boom"), *built[1:]], [good, good]) == 1
    assert runner.report(built[:1], [good, good]) == 1  # the background builds stopped early
    assert runner.report(built, [good, runner.Outcome("real-node", log="not run")]) == 1  # a tier never ran


def test_a_tier_whose_build_failed_is_reported_not_run(runner) -> None:
    """Each tier waits for the builds it needs; one that failed (or never ran) leaves the tier unrun."""
    run = runner.Run([])
    for step in runner.BACKGROUND_BUILDS:
        run.built[step.name].set()
    run.failed_builds.add(runner.ARGOCD.name)
    run.tier(runner.ARGO)
    assert run.tiers[runner.ARGO.name].returncode is None
    assert runner.ARGOCD.name in run.tiers[runner.ARGO.name].log


def test_every_test_directory_runs_in_exactly_one_tier(runner) -> None:
    """The tiers split tests/ by directory: each one named exists, none is in two, and the tier without
    paths (rest) leaves out every other tier's, so a new directory runs there."""
    named = [p for t in runner.TIERS for p in t.paths]
    assert len(named) == len(set(named)) and all((ROOT / p).is_dir() for p in named), named
    (rest,) = [t for t in runner.TIERS if not t.paths]
    assert runner.argv_of(rest, [])[-len(named) :] == [f"--ignore={p}" for p in named]
    for t in runner.TIERS:
        assert all(b in runner.BACKGROUND_BUILDS for b in t.needs), t


def test_after_a_stop_signal_no_tier_starts(runner, tmp_path: Path) -> None:
    """CI cancelling the job: the running tiers get SIGTERM (runner._stop) and none starts after it."""
    runner.STOPPING.set()
    try:
        out = _tier(runner, tmp_path, "def test_a(): pass\n")
        assert out.returncode is None and "stopped" in out.log
    finally:
        runner.STOPPING.clear()

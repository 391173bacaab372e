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
    return runner.pytest(runner.Tier(name, ()), [str(suite), "-p", "no:cacheprovider"], [], log)


def test_a_tier_counts_what_its_pytest_ran(runner, tmp_path: Path) -> None:
    body = "import pytest\ndef test_a(): pass\ndef test_b(): assert False\n@pytest.mark.skip\ndef test_c(): pass\n"
    outcome = _tier(runner, tmp_path, body)
    assert outcome.counts == {"passed": 1, "failed": 1, "skipped": 1}
    assert outcome.returncode == 1


def test_the_report_fails_on_a_failed_build_a_failed_tier_or_a_tier_that_ran_nothing(runner, tmp_path, capsys):
    good = _tier(runner, tmp_path, "def test_a(): pass\n", "good")
    empty = _tier(runner, tmp_path, "X = 1\n", "empty")  # pytest's exit 5: no tests
    built = runner.Outcome("b", returncode=0)
    assert runner.report([built], [good, good]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "tests: 2 passed, 0 failed"
    assert empty.returncode == 5
    assert runner.report([built], [good, empty]) == 1
    assert runner.report([runner.Outcome("b", returncode=2, log="boom")], [good, good]) == 1
    assert runner.report([built], [good]) == 1  # the background tiers never ran

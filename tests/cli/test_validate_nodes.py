"""`migops validate` on a config repo's nodes.yaml, offline: found by name or by shape, checked by the
reconciler's own loader (schema, strategy, rollout, selectors, config names in the config.yaml beside
it) and for fit where the selector names a GPU model (or --gpu is given); every problem at file:line:col."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from migops.cli import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "config-repo"
A100_40 = "0x20B010DE"


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out + err


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    dest = tmp_path / "repo"
    shutil.copytree(EXAMPLE, dest)
    return dest


def test_the_example_repo_checks_both_files(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run(capsys, "validate", str(EXAMPLE))
    assert code == 0, out
    assert f"{EXAMPLE}/nodes.yaml: nodes.yaml: 2 assignment(s) checked against {EXAMPLE}/config.yaml: valid" in out
    assert "without a MIG config ignored" not in out


def test_each_problem_at_its_line(capsys: pytest.CaptureFixture[str], repo: Path) -> None:
    (repo / "nodes.yaml").write_text(
        "version: v1\n"  # 1
        "strategy: mixd\n"  # 2
        "rollout:\n"  # 3
        "  maxUnavailable: 0\n"  # 4
        "assignments:\n"  # 5
        "  - nodeSelector:\n"  # 6
        "      matchLabels: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}\n"  # 7
        "    config: no-such-config\n"  # 8
        "  - nodeSelector: {}\n"  # 9
        "    config: all-balanced\n"
    )  # 10
    code, out = run(capsys, "validate", str(repo / "nodes.yaml"))
    assert code == 1, out
    nodes = f"{repo}/nodes.yaml"
    # at the key of the value in question, as every migops location
    assert f"{nodes}:2:1: error: strategy: strategy must be one of" in out
    assert f"{nodes}:4:3: error: rollout.maxUnavailable:" in out and "[invalid-max-unavailable]" in out
    assert f"{nodes}:9:5: error: assignments[1].nodeSelector:" in out and "[empty-selector]" in out
    # the names are checked once the file's structure is right
    (repo / "nodes.yaml").write_text("version: v1\nassignments:\n  - nodes: [gpu-1]\n    config: no-such-config\n")
    code, out = run(capsys, "validate", str(repo / "nodes.yaml"))
    assert code == 1
    assert f"{nodes}:4:5: error: assignments[0].config: config 'no-such-config' is not in config.yaml" in out


def test_a_selector_naming_a_model_must_fit_it(capsys: pytest.CaptureFixture[str], repo: Path) -> None:
    # h100-inference has H100 entries only: an A100 node would never report it applied
    (repo / "nodes.yaml").write_text(
        "version: v1\nassignments:\n"
        "  - nodeSelector:\n      matchLabels: {nvidia.com/gpu.product: NVIDIA-A100-SXM4-40GB}\n"
        "    config: h100-inference\n"
        "  - nodeSelector:\n      matchExpressions: [{key: nvidia.com/gpu.product, operator: In, "
        "values: [NVIDIA-H100-80GB-HBM3]}]\n"
        "    config: h100-inference\n"
    )
    code, out = run(capsys, "validate", str(repo / "nodes.yaml"))
    assert code == 1, out
    lines = [line for line in out.splitlines() if "error:" in line]
    assert len(lines) == 1, out
    assert (
        f"{repo}/nodes.yaml:5:5: error: assignments[0].config: config 'h100-inference' cannot be applied to "
        "A100-SXM4-40GB (the selector's NVIDIA-A100-SXM4-40GB)" in lines[0]
    )
    assert lines[0].endswith("[does-not-fit]")


def test_gpu_flag_checks_every_assignment(capsys: pytest.CaptureFixture[str], repo: Path) -> None:
    code, out = run(capsys, "validate", "--gpu", A100_40, str(repo / "nodes.yaml"))
    assert code == 0, out  # all-balanced has an A100-40GB entry
    code, out = run(capsys, "validate", "--gpu", "0x233010DE", "--gpu", A100_40, str(repo / "nodes.yaml"))
    assert code == 0, out  # one entry for each model
    code, out = run(capsys, "validate", "--gpu", "0x20B510DE", str(repo / "nodes.yaml"))  # A100 80GB PCIe: none
    assert code == 1, out
    lines = [line for line in out.splitlines() if "error:" in line]
    assert [line.split(": error: ")[0].rsplit("/", 1)[-1] for line in lines] == ["nodes.yaml:11:5", "nodes.yaml:14:5"]
    assert all("[gpu-not-covered] [does-not-fit]" in line for line in lines)


def test_found_by_shape_and_labels_checked(capsys: pytest.CaptureFixture[str], repo: Path) -> None:
    (repo / "nodes.yaml").rename(repo / "assign.yaml")
    (repo / "assign.yaml").write_text(
        "version: v1\nassignments:\n  - nodeSelector:\n      matchLabels: {'bad key!': x}\n    config: all-disabled\n"
    )
    code, out = run(capsys, "validate", "--skip-unrelated", str(repo / "assign.yaml"))
    assert code == 1, out
    assert (
        f"{repo}/assign.yaml:4:7: error: assignments[0].nodeSelector.matchLabels: 'bad key!' is not a valid "
        "label key" in out
    )
    assert "[schema-pattern]" in out


def test_without_config_yaml_beside_it(capsys: pytest.CaptureFixture[str], repo: Path) -> None:
    (repo / "config.yaml").unlink()
    code, out = run(capsys, "validate", str(repo / "nodes.yaml"))
    assert code == 1
    assert f"{repo}/nodes.yaml:3:1: error: (document): no {repo}/config.yaml beside it" in out  # lines 1-2: comments
    assert "[config-file-missing]" in out


def test_json_names_the_kind(capsys: pytest.CaptureFixture[str], repo: Path) -> None:
    code, out = run(capsys, "validate", "-o", "json", str(repo))
    assert code == 0, out
    kinds = {s["file"].rsplit("/", 1)[-1]: s["kind"] for s in json.loads(out)["sources"]}
    assert kinds == {"config.yaml": "mig-config", "nodes.yaml": "nodes"}


@pytest.mark.parametrize(
    "text, rule",
    [
        (
            "version: v1\nassignments:\n"
            + "".join(f"  - nodes: [gpu-{i}]\n    config: all-disabled\n" for i in range(1001)),
            "too-many-assignments",
        ),
        ("version: v1\nassignments: []\n" + "# padding\n" * 60_000, "nodes-file-too-large"),
    ],
    ids=["1001-assignments", "600-KB"],
)
def test_nodes_yaml_past_its_bounds_is_refused_by_validate_as_by_the_reconciler(
    capsys: pytest.CaptureFixture[str], repo: Path, text: str, rule: str
) -> None:
    """One verdict: `migops validate` and the reconciler's loader refuse the file with the same rule and
    words, naming the file and the bound."""
    from migops.gitops.repo import MAX_ASSIGNMENTS, MAX_NODES_FILE_BYTES, RepoError, load_repo

    (repo / "nodes.yaml").write_text(text)
    files = {n: (repo / n).read_bytes() for n in ("config.yaml", "nodes.yaml")}
    with pytest.raises(RepoError) as err:
        load_repo(files, "")
    (refused,) = [p for p in err.value.problems if p.severity == "error"]
    assert refused.problem.rule == rule
    bound = MAX_ASSIGNMENTS if rule == "too-many-assignments" else MAX_NODES_FILE_BYTES
    assert f"the bound is {bound}" in refused.problem.message
    code, out = run(capsys, "validate", str(repo / "nodes.yaml"))
    assert code == 1 and f"[{rule}]" in out, out
    assert refused.problem.message.replace("nodes.yaml is", f"{repo}/nodes.yaml is") in out, out

"""A fleet repo checked offline: every cluster judged by the reconciler's own loader and resolver on the
nodes its inventory recorded, each problem at file:line:col with the cluster's name; `fleet pin` and
`fleet diff` on a real git repository; the JSON outputs against their published schemas."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import jsonschema
import pytest
from gitrepo import run

from migops.cli import main
from migops.cli.outputs import json_schema
from migops.gitops.fleet import check_fleet, directory_reader

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "fleet"


@pytest.fixture
def fleet(tmp_path: Path) -> Path:
    root = tmp_path / "fleet"
    shutil.copytree(EXAMPLE, root)
    return root


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, (path, old)
    path.write_text(text.replace(old, new, 1))


def _validate(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(["validate", *args])
    return code, capsys.readouterr().out


def test_the_example_fleet_is_valid_and_each_cluster_gets_what_its_reconciler_would_give() -> None:
    verdict = check_fleet(directory_reader(EXAMPLE))
    assert verdict.valid, [str(p) for c in verdict.clusters for p in c.problems]
    targets = {
        c.cluster.name: {n: t.config for n, t in c.desired.targets.items()} for c in verdict.clusters if c.desired
    }
    assert targets == {
        "canary": {"canary-h100-1": "all-1g.10gb", "canary-h100-2": "all-1g.10gb"},
        "train": {
            "train-a100-1": "all-3g.40gb",
            "train-a100-2": "all-3g.40gb",
            "train-a100-3": "all-3g.40gb",
            "train-a100-4": "all-disabled",  # pool: shared: the default
        },
        "inference": {"infer-a30-1": "a30-4x1g", "infer-a30-2": "a30-4x1g", "infer-h100-1": "all-1g.10gb"},
    }
    assert [[c.name for c in wave] for wave in verdict.fleet.waves] == [["canary"], ["train", "inference"]]


def test_a_commit_wrong_for_one_non_canary_cluster_is_refused_with_its_name_and_place(
    fleet: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # all-3g.40gb fits the canary's H100s and train's A100s, not inference's A30s.
    _edit(fleet / "clusters/inference/nodes.yaml", "config: a30-4x1g", "config: all-3g.40gb")
    code, out = _validate(capsys, str(fleet))
    assert code == 1
    bad = [line for line in out.splitlines() if ": error: " in line]
    assert len(bad) == 1, out
    assert bad[0].startswith(
        f"  {fleet}/clusters/inference/nodes.yaml:8:5: error: assignments[0].config: cluster inference:"
    )
    assert "infer-a30-1, infer-a30-2 (4 x A30)" in bad[0] and bad[0].endswith("[does-not-fit-node]")
    assert (
        f"{fleet}/clusters/canary/nodes.yaml: cluster canary, 1 assignment(s) checked on the 2 node(s) of its inventory: valid"
        in out
    )
    assert (
        f"{fleet}/clusters/train/nodes.yaml: cluster train, 1 assignment(s) checked on the 4 node(s) of its inventory: valid"
        in out
    )


def test_a_shared_config_changed_in_one_cluster_is_drift(fleet: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _edit(fleet / "clusters/train/config.yaml", '"3g.40gb": 2', '"3g.40gb": 1')
    code, out = _validate(capsys, str(fleet))
    assert code == 1
    assert (
        f"{fleet}/clusters/train/config.yaml:15:3: error: mig-configs.\"all-3g.40gb\": cluster train: config "
        "'all-3g.40gb' differs from the one in config.yaml" in out
    )
    # A cluster's own addition is no drift (inference's a30-4x1g), and a shared config missing is.
    _edit(fleet / "clusters/canary/config.yaml", "  all-disabled:", "  all-off:")
    _edit(fleet / "clusters/canary/nodes.yaml", "default: all-disabled", "default: all-off")
    verdict = check_fleet(directory_reader(fleet))
    rules = {
        c.cluster.name: sorted(p.problem.rule for p in c.problems if p.severity == "error") for c in verdict.clusters
    }
    assert rules == {"canary": ["shared-config-missing"], "train": ["shared-config-differs"], "inference": []}


def test_what_the_inventory_cannot_answer_is_an_error_not_a_guess(fleet: Path) -> None:
    # A selector on a label the inventory did not record could match any node: it is not judged.
    _edit(fleet / "clusters/canary/nodes.yaml", "{nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}", "{zone: a}")
    # An inventory recorded of another cluster, and one the schema refuses.
    _edit(fleet / "clusters/train/inventory.yaml", "cluster: train", "cluster: canary")
    _edit(fleet / "clusters/inference/inventory.yaml", "  - names: [infer-h100-1]", "  - names: infer-h100-1")
    verdict = check_fleet(directory_reader(fleet))
    found = {
        c.cluster.name: [(p.file, p.problem.line, p.problem.rule) for p in c.problems if p.severity == "error"]
        for c in verdict.clusters
    }
    assert found["canary"] == [("clusters/canary/nodes.yaml", 6, "label-not-in-inventory")]
    assert found["train"] == [("clusters/train/inventory.yaml", 4, "inventory-of-another-cluster")]
    assert found["inference"] == [("clusters/inference/inventory.yaml", 11, "schema-type")]


def test_the_migsync_must_follow_the_clusters_own_directory(fleet: Path) -> None:
    _edit(fleet / "clusters/train/sync/migsync.yaml", "path: clusters/train", "path: clusters/canary")
    (fleet / "clusters/inference/sync/migsync.yaml").unlink()
    verdict = check_fleet(directory_reader(fleet))
    found = {c.cluster.name: [(p.file, p.problem.line, p.problem.rule) for p in c.problems] for c in verdict.clusters}
    assert found == {
        "canary": [],
        "train": [("clusters/train/sync/migsync.yaml", 12, "migsync-path")],
        "inference": [("clusters/inference/sync/migsync.yaml", None, "migsync-missing")],
    }


def test_fleet_yaml_is_schema_checked(fleet: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _edit(fleet / "fleet.yaml", "  - name: train\n    wave: 1", "  - name: Train_1\n    wave: -1")
    code, out = _validate(capsys, str(fleet / "fleet.yaml"))
    assert code == 1
    assert (
        f"{fleet}/fleet.yaml:9:5: error: clusters[1].name: 'Train_1' is not a valid name: lower-case letters, "
        "digits and '-' [schema-pattern]" in out
    )
    assert f"{fleet}/fleet.yaml:10:5: error: clusters[1].wave: -1 is less than the minimum of 0 [schema-minimum]" in out


def _repo(fleet: Path) -> str:
    run(["git", "init", "-q", "-b", "main"], cwd=fleet)
    run(["git", "add", "-A"], cwd=fleet)
    run(["git", "commit", "-q", "-m", "fleet"], cwd=fleet)
    return run(["git", "rev-parse", "HEAD"], cwd=fleet).strip()


def test_pin_writes_every_clusters_ref_and_keeps_the_rest_of_the_file(fleet: Path) -> None:
    sha = _repo(fleet)
    before = (fleet / "clusters/train/sync/migsync.yaml").read_text()
    assert main(["fleet", "pin", "HEAD", str(fleet)]) == 0
    for name in ("canary", "train", "inference"):
        verdict = check_fleet(directory_reader(fleet))
        assert {c.cluster.name: c.ref for c in verdict.clusters}[name] == sha
    after = (fleet / "clusters/train/sync/migsync.yaml").read_text()
    assert after == before.replace('"3f1c9a7e5b2d4c6e8a0b1c2d3e4f5a6b7c8d9e0f"', f'"{sha}"')
    assert not [p for c in check_fleet(directory_reader(fleet)).clusters for p in c.problems]  # no ref-not-pinned


def test_diff_shows_per_cluster_which_nodes_a_change_moves(fleet: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _repo(fleet)
    assert main(["fleet", "diff", str(fleet)]) == 0
    capsys.readouterr()
    _edit(fleet / "clusters/train/nodes.yaml", "config: all-3g.40gb", "config: all-1g.10gb")
    assert main(["fleet", "diff", str(fleet), "-o", "json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert list(jsonschema.Draft202012Validator(json_schema("fleet-diff")).iter_errors(doc)) == []
    changes = {c["cluster"]: c["changes"] for c in doc["clusters"]}
    assert changes == {
        "canary": [],
        "train": [{"node": f"train-a100-{i}", "before": "all-3g.40gb", "after": "all-1g.10gb"} for i in (1, 2, 3)],
        "inference": [],
    }
    _edit(fleet / "clusters/inference/nodes.yaml", "config: a30-4x1g", "config: all-3g.40gb")
    assert main(["fleet", "diff", str(fleet)]) == 3
    assert "cluster inference (wave 1): 0 of 3 node(s) change (INVALID)" in capsys.readouterr().out


def test_status_of_an_unreachable_cluster_is_not_in_sync(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: gone\n"
        "clusters: [{name: gone, cluster: {server: 'https://127.0.0.1:9', insecure-skip-tls-verify: true}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: gone, context: {cluster: gone, user: u}}]\n"
    )
    assert main(["fleet", "status", "--kubeconfig", str(kubeconfig), "-o", "json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert list(jsonschema.Draft202012Validator(json_schema("fleet-status")).iter_errors(doc)) == []
    (row,) = doc["clusters"]
    assert (row["cluster"], row["inSync"], row["reason"]) == ("gone", False, "Unreachable")

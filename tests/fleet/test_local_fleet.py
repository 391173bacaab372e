"""`migops local up --clusters 2` as a user runs it, with a fleet repo in real git: two control planes with
their own GPU models, webhook, agents and reconciler; `migops inventory` of each, `migops validate` of the
repo, `migops fleet status`; and the proof that a pinned MigSync is what carries a commit to a cluster:
a commit on the branch is not taken by a cluster until its MigSync names it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from gitrepo import run
from local_cli import down_on_exit, migops_local

pytestmark = pytest.mark.cluster

MIGOPS = Path(sys.executable).parent / "migops"
CONFIGS = """version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false
  all-1g.10gb:
    - device-filter: ["0x20B210DE", "0x233010DE"]
      devices: all
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}
  all-3g.40gb:
    - device-filter: ["0x20B210DE", "0x233010DE"]
      devices: all
      mig-enabled: true
      mig-devices: {"3g.40gb": 2}
"""


def _nodes(config: str) -> str:
    return f"version: v1\nstrategy: single\ndefault: {config}\n"


def _migsync(url: str, name: str, ref: str) -> str:
    return (
        "apiVersion: migops.io/v1alpha1\nkind: MigSync\nmetadata: {name: migops, namespace: migops-system}\n"
        f'spec:\n  url: {url}\n  ref: "{ref}"\n  path: clusters/{name}\n  interval: 2s\n'
    )


def _migops(*args: str, home: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **({"MIGOPS_HOME": str(home)} if home else {})}
    return subprocess.run([str(MIGOPS), *args], env=env, capture_output=True, text=True, timeout=120, check=False)


def _commit(repo: Path, message: str) -> str:
    run(["git", "add", "-A"], cwd=repo)
    run(["git", "commit", "-q", "-m", message], cwd=repo)
    return run(["git", "rev-parse", "HEAD"], cwd=repo).strip()


@pytest.fixture
def fleet_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "fleet-repo"
    repo.mkdir()
    run(["git", "init", "-q", "-b", "main"], cwd=repo)
    (repo / "fleet.yaml").write_text(
        "version: v1\nclusters:\n  - {name: canary, wave: 0}\n  - {name: cluster-1, wave: 1}\n"
    )
    (repo / "config.yaml").write_text(CONFIGS)
    for name, config in (("canary", "all-1g.10gb"), ("cluster-1", "all-3g.40gb")):
        (repo / "clusters" / name / "sync").mkdir(parents=True)
        (repo / "clusters" / name / "config.yaml").write_text(CONFIGS)
        (repo / "clusters" / name / "nodes.yaml").write_text(_nodes(config))
        (repo / "clusters" / name / "sync" / "migsync.yaml").write_text(_migsync(str(repo), name, "0" * 40))
    first = _commit(repo, "the fleet")
    assert _migops("fleet", "pin", first, str(repo)).returncode == 0
    _commit(repo, f"release {first[:12]}")
    return repo


@pytest.fixture
def fleet_home(tmp_path: Path) -> Iterator[Path]:
    home = tmp_path / "home"
    with down_on_exit(home):
        yield home
    down = migops_local(home, "down", timeout=180)
    assert down.returncode == 0, down.stderr
    assert not (home / "fleet").exists()


def _kubectl(kubeconfig: Path, context: str, *args: str) -> str:
    from migops.local.binaries import locate

    out = subprocess.run(
        [str(locate().kubectl), "--kubeconfig", str(kubeconfig), "--context", context, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def _status(kubeconfig: Path) -> tuple[int, dict]:
    found = _migops("fleet", "status", "--kubeconfig", str(kubeconfig), "-o", "json")
    return found.returncode, json.loads(found.stdout)


def _until(what: str, check, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(1)


def _labels(kubeconfig: Path, context: str) -> dict[str, str]:
    nodes = json.loads(_kubectl(kubeconfig, context, "get", "nodes", "-o", "json"))["items"]
    return {n["metadata"]["name"]: n["metadata"]["labels"].get("nvidia.com/mig.config") for n in nodes}


def test_two_local_clusters_inventory_validate_status_and_the_pin_that_carries_a_commit(
    fleet_repo: Path, fleet_home: Path
) -> None:
    pinned = yaml.safe_load((fleet_repo / "clusters/canary/sync/migsync.yaml").read_text())["spec"]["ref"]
    up = migops_local(
        fleet_home, "up", "--clusters", "2", "--nodes", "2", "--repo", str(fleet_repo), "--ref", pinned, timeout=600
    )
    assert up.returncode == 0, up.stderr
    kubeconfig = fleet_home / "fleet" / "kubeconfig"
    assert "canary up at https://127.0.0.1:" in up.stdout and "x NVIDIA-A100-SXM4-80GB" in up.stdout
    # Each cluster's reconciler follows its own directory at the pinned commit; the agents apply it.
    _until("both clusters in sync", lambda: _status(kubeconfig)[0] == 0, timeout=180)
    code, doc = _status(kubeconfig)
    assert [(r["cluster"], r["lastAppliedRevision"], r["nodes"]) for r in doc["clusters"]] == [
        ("canary", pinned, 2),
        ("cluster-1", pinned, 2),
    ]
    assert set(_labels(kubeconfig, "canary").values()) == {"all-1g.10gb"}
    assert set(_labels(kubeconfig, "cluster-1").values()) == {"all-3g.40gb"}

    # Each cluster's inventory, recorded from the cluster, then the whole fleet checked offline.
    for name in ("canary", "cluster-1"):
        out = fleet_repo / "clusters" / name / "inventory.yaml"
        found = _migops(
            "inventory", "--cluster", name, "--kubeconfig", str(kubeconfig), "--context", name, "-o", str(out)
        )
        assert found.returncode == 0, found.stderr
    inventory = yaml.safe_load((fleet_repo / "clusters/cluster-1/inventory.yaml").read_text())
    assert inventory["strategy"] == "single" and len(inventory["nodes"]) == 1
    # GFD names the product with its MIG geometry under `single`, as the reconciler reads it.
    assert inventory["nodes"][0]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB-MIG-3g.40gb"
    checked = _migops("validate", str(fleet_repo))
    assert checked.returncode == 0, checked.stdout

    # A commit on the branch: cluster-1's nodes move to all-1g.10gb. Its MigSync still names the pinned
    # commit, so its reconciler, polling every 2 s, does not take it.
    (fleet_repo / "clusters/cluster-1/nodes.yaml").write_text(_nodes("all-1g.10gb"))
    change = _commit(fleet_repo, "cluster-1: all-1g.10gb")
    time.sleep(8)
    code, doc = _status(kubeconfig)
    assert code == 0 and {r["lastAttemptedRevision"] for r in doc["clusters"]} == {pinned}
    assert set(_labels(kubeconfig, "cluster-1").values()) == {"all-3g.40gb"}

    # The pin moved for cluster-1 and applied to it (what the GitOps tool does at its wave's turn).
    assert _migops("fleet", "pin", change, str(fleet_repo), "--cluster", "cluster-1").returncode == 0
    _kubectl(
        kubeconfig,
        "cluster-1",
        "apply",
        "--server-side",
        "--force-conflicts",
        "-f",
        str(fleet_repo / "clusters/cluster-1/sync/migsync.yaml"),
    )
    _until("cluster-1 at the change", lambda: _status(kubeconfig)[0] == 0, timeout=180)
    assert set(_labels(kubeconfig, "cluster-1").values()) == {"all-1g.10gb"}
    assert {r["cluster"]: r["lastAppliedRevision"] for r in _status(kubeconfig)[1]["clusters"]} == {
        "canary": pinned,
        "cluster-1": change,
    }

"""`migops reconcile --once/--dry-run`, `migops diff`, `migops status` as a user runs them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from gitrepo import CONFIG_YAML, UNPLACEABLE, nodes_yaml
from local_cli import down_on_exit
from reconciler_harness import agent_reports, labels_of

from migops.api.names import MIG_CONFIG_LABEL

MIGOPS = Path(sys.executable).parent / "migops"


def _run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(MIGOPS), *args], capture_output=True, text=True, timeout=timeout, check=False)


def test_once_dry_run_diff_and_status(rplane, rapi, repo, gpu_nodes, tmp_path) -> None:
    names = gpu_nodes(3, pool="cli")
    nodes = nodes_yaml("  - nodeSelector: {matchLabels: {pool: cli}}\n    config: all-3g.40gb")
    repo.commit({"config.yaml": CONFIG_YAML, "nodes.yaml": nodes})
    common = [
        "--repo",
        repo.url,
        "--kubeconfig",
        str(rplane.admin_kubeconfig),
        "--name",
        "cli",
        "--cache-dir",
        str(tmp_path / "cache"),
    ]

    dry = _run("reconcile", *common, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert f"{names[0]}  all-disabled -> all-3g.40gb" in dry.stdout
    assert {labels_of(rapi, names)[n][MIG_CONFIG_LABEL] for n in names} == {"all-disabled"}  # wrote nothing

    diff = _run("diff", *common, "-o", "json")
    assert diff.returncode == 1, diff.stderr  # changes pending, like kubectl diff
    doc = json.loads(diff.stdout)
    assert doc["changed"] and {c["node"] for c in doc["labels"]} >= set(names) and doc["denied"] == []

    once = _run("reconcile", *common, "--once")
    assert once.returncode == 0, once.stderr
    assert once.stdout.startswith("migops reconcile: Applied: rolling out ")
    assert {labels_of(rapi, names)[n][MIG_CONFIG_LABEL] for n in names} == {"all-3g.40gb"}
    agent_reports(rapi, CONFIG_YAML, names)
    once = _run("reconcile", *common, "--once")
    assert once.returncode == 0 and "InSync" in once.stdout, once.stdout + once.stderr

    status = _run("status", "cli", "--kubeconfig", str(rplane.admin_kubeconfig), "--nodes")
    assert status.returncode == 0, status.stdout + status.stderr
    lines = status.stdout.splitlines()
    assert lines[0].split()[:5] == ["NAMESPACE", "NAME", "READY", "REASON", "NODES"]
    assert lines[1].split()[:5] == ["migops-system", "cli", "True", "ReconciliationSucceeded", "3/3"]
    assert any(line.startswith(names[0]) and "all-3g.40gb" in line and "InSync" in line for line in lines)

    # An unplaceable commit: exit 1, every problem printed, nothing applied.
    repo.commit({"config.yaml": UNPLACEABLE, "nodes.yaml": nodes.replace("all-3g.40gb", "too-many")})
    once = _run("reconcile", *common, "--once")
    assert once.returncode == 1
    assert "Invalid" in once.stderr and 'config.yaml: mig-configs.too-many[0].mig-devices."1g.10gb"' in once.stderr
    assert {labels_of(rapi, names)[n][MIG_CONFIG_LABEL] for n in names} == {"all-3g.40gb"}
    assert _run("diff", *common).returncode == 3
    status = _run("status", "cli", "--kubeconfig", str(rplane.admin_kubeconfig))
    assert status.returncode == 1 and "ValidationFailed" in status.stdout and "too-many" in status.stdout


def test_local_up_with_a_repo_runs_the_reconciler_and_down_stops_it(rplane, repo, tmp_path) -> None:
    import os
    import time

    from kubernetes import client as k8s
    from kubernetes import config

    from migops.local.process import find_by_argument

    repo.commit({"config.yaml": CONFIG_YAML, "nodes.yaml": nodes_yaml(default="all-3g.40gb")})
    home = tmp_path / "home"
    env = {**os.environ, "MIGOPS_HOME": str(home)}

    def local(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(MIGOPS), "local", *args], env=env, capture_output=True, text=True, timeout=180, check=False
        )

    with down_on_exit(home):
        try:
            up = local("up", "--nodes", "2", "--strategy", "mixed", "--repo", str(repo.path))
            assert up.returncode == 0, up.stderr
            assert f"reconciler: following {repo.path}" in up.stdout
            kubeconfig = home / "local" / "admin.kubeconfig"
            with config.new_client_from_config(config_file=str(kubeconfig)) as api:
                deadline = time.monotonic() + 60
                while True:
                    labels = {
                        n.metadata.labels.get("nvidia.com/mig.config") for n in k8s.CoreV1Api(api).list_node().items
                    }
                    if labels == {"all-3g.40gb"} or time.monotonic() > deadline:
                        break
                    time.sleep(0.3)
                assert labels == {"all-3g.40gb"}
            status = _run("status", "--kubeconfig", str(kubeconfig), timeout=60)
            assert "migops-system  migops" in status.stdout, status.stdout + status.stderr
        finally:
            down = local("down")
    assert down.returncode == 0, down.stderr
    assert not find_by_argument(f"--cache-dir={home / 'local' / 'reconciler-git'}")

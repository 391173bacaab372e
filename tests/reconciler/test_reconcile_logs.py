"""The reconciler's log with --log-format json: one object per line, naming its MigSync, and the revision
it is about on every line of a sync (its Events among them)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from gitrepo import CONFIG_YAML, nodes_yaml

MIGOPS = Path(sys.executable).parent / "migops"


def test_reconcile_once_logs_json(rplane, repo, gpu_nodes, tmp_path) -> None:
    (node,) = gpu_nodes(1, pool="logs")
    head = repo.commit(
        {
            "config.yaml": CONFIG_YAML,
            "nodes.yaml": nodes_yaml("  - nodeSelector: {matchLabels: {pool: logs}}\n    config: all-3g.40gb"),
        }
    )
    proc = subprocess.run(
        [
            str(MIGOPS),
            "reconcile",
            "--once",
            "--repo",
            repo.url,
            "--kubeconfig",
            str(rplane.admin_kubeconfig),
            "--name",
            "logs",
            "--cache-dir",
            str(tmp_path / "cache"),
            "--log-format",
            "json",
            "--log-level",
            "debug",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stderr.splitlines() if line.strip()]
    assert lines, "debug logs something"
    assert {d["component"] for d in lines} == {"reconciler"}
    assert {d["migsync"] for d in lines} == {"migops-system/logs"}
    assert all(d["level"] in ("debug", "info", "warning", "error") and d["message"] for d in lines)
    # Every line of the sync names the revision it is about, the pool's label writes too; its Events
    # are lines of their own.
    synced = [
        d for d in lines if d["logger"].startswith("migops.reconciler.") and d["logger"] != "migops.reconciler.main"
    ]
    assert synced and {d.get("revision") for d in synced} == {head}, synced
    events = [d for d in lines if d["logger"] == "migops.reconciler.recorder"]
    assert events and all(d["level"] in ("info", "warning") for d in events)
    assert any(d["message"].startswith("MigConfigAssigned: ") and node in d["message"] for d in events), events

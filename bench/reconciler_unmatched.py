"""A revert pushed right behind a nodes.yaml that names thousands of nodes not in the cluster: how long
until the reconciler has it in force.

A fresh control plane with 100 H100 x8 Nodes converged on config A; `migops reconcile` runs as its own
process (loop mode, /hook on loopback). A commit adds one assignment listing N node names the cluster
does not have (valid: they get their config when they join), its push hook is sent, and a revert of it
is pushed (and hooked) one second later. Measured:

  revert delay        : from the revert's hook until the MigSync's status names it as the last
                        attempted revision with AssignmentsMatched True
  MatchesNoNode Events: how many the reconciler recorded (the API server's Events on the MigSync)
  reconciler CPU s    : over that window

Usage: .venv/bin/python bench/reconciler_unmatched.py [N ...]   (default: 10000)
"""

from __future__ import annotations

import os
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from gitrepo import CONFIG_YAML, GitRepo, nodes_yaml
from kubernetes import client as k8s

from migops.local import cluster
from migops.local.binaries import locate
from migops.local.controlplane import ControlPlane
from migops.reconciler.status import install_crd
from reconciler import cpu_seconds, free_port, hook, reconciles, report, seed, start_reconciler, wait_for

NODES = 100
POOLS = "  - nodeSelector: {matchLabels: {pool: p}}\n    config: all-1g.10gb\n  - nodeSelector: {matchLabels: {pool: q}}\n    config: all-1g.10gb"


def status(api: k8s.ApiClient) -> dict:
    obj = k8s.CustomObjectsApi(api).get_namespaced_custom_object(
        "migops.io", "v1alpha1", "migops-system", "migsyncs", "bench"
    )
    return obj.get("status") or {}


def in_force(api: k8s.ApiClient, revision: str) -> bool:
    found = status(api)
    matched = [c for c in found.get("conditions") or () if c.get("type") == "AssignmentsMatched"]
    return found.get("lastAttemptedRevision") == revision and bool(matched) and matched[0]["status"] == "True"


def unmatched_events(api: k8s.ApiClient) -> int:
    events = k8s.CoreV1Api(api).list_namespaced_event("migops-system", field_selector="reason=MatchesNoNode")
    return sum((e.count or 1) for e in events.items)


def run(count: int) -> dict[str, float]:
    out: dict[str, float] = {}
    with (
        tempfile.TemporaryDirectory(prefix="migops-bench-") as tmp,
        ControlPlane(locate()) as plane,
        plane.api_client() as api,
    ):
        tmp_path = Path(tmp)
        cluster.seed(api, (), "mixed")
        k8s.CoreV1Api(api).create_namespace({"metadata": {"name": "migops-system"}})
        install_crd(api, field_manager="bench")
        seed(api, NODES)
        repo = GitRepo(tmp_path / "repo")
        repo.commit({"config.yaml": CONFIG_YAML, "nodes.yaml": nodes_yaml(POOLS)})
        port = free_port()
        proc = start_reconciler(repo.url, plane.admin_kubeconfig, tmp_path, port)
        try:
            wait_for(lambda: reconciles(port) >= 1, 300, "first sync")
            listed = "".join(f"      - joining-{i:05d}\n" for i in range(count))
            big = nodes_yaml(POOLS + f"\n  - config: all-3g.40gb\n    nodes:\n{listed}")
            out["nodes.yaml bytes"] = len(big.encode())
            repo.commit({"nodes.yaml": big})
            hook(port)
            time.sleep(1.0)
            revert = repo.commit({"nodes.yaml": nodes_yaml(POOLS)})
            cpu = cpu_seconds(proc.pid)
            began = time.monotonic()
            hook(port)
            out["revert delay s"] = wait_for(
                lambda: in_force(api, revert) or (time.sleep(0.2) or False), 1800, "revert"
            )
            out["reconciler CPU s over the delay"] = cpu_seconds(proc.pid) - cpu
            out["wall s"] = time.monotonic() - began
            time.sleep(2.0)
            out["MatchesNoNode Events"] = unmatched_events(api)
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(60)
    return out


def main(counts: list[int]) -> None:
    load = os.getloadavg()
    print(
        f"machine: {os.cpu_count()} CPUs, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at start", flush=True
    )
    report(counts, run, 34)
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at the end")


if __name__ == "__main__":
    from _signals import exit_on_signals

    exit_on_signals()
    main([int(a) for a in sys.argv[1:]] or [10000])

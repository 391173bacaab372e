"""The reconciler at scale, on a real kube-apiserver + etcd: rollout time, no-op syncs, writes per node, memory.

For each node count (default 2,000 and 10,000) a fresh control plane is seeded with that many H100 x8
Nodes already converged on config A (label, agent state `success`, digest of A), and `migops reconcile`
runs as its own process (loop mode, /hook and /metrics on loopback). Then:

  first sync    : how long until the reconciler has listed every node and found nothing to change
  no-op syncs   : POST /hook on an unchanged repo; duration (the reconciler's own histogram) and writes
  10% change    : a commit moving 10% of the nodes to config B; writes per changed / unchanged node
  100% change   : a commit changing every assignment (maxUnavailable 100%); time from the hook until
                  every label is written, with CPU seconds of the reconciler, kube-apiserver and etcd
                  (/proc/<pid>/stat) over that window, and the API server's own count of node PATCHes
  memory        : the reconciler's peak RSS (VmHWM) at the end

Usage: .venv/bin/python bench/reconciler.py [NODES ...]   (default: 2000 10000)
"""

from __future__ import annotations

import hashlib
import hmac
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from gitrepo import CONFIG_YAML, GitRepo, nodes_yaml  # noqa: E402
from kubernetes import client as k8s  # noqa: E402

from migops.api.names import MANAGED_BY_ANNOTATION  # noqa: E402
from migops.local import cluster  # noqa: E402
from migops.local.binaries import locate  # noqa: E402
from migops.local.cluster import plan_nodes  # noqa: E402
from migops.local.controlplane import ControlPlane  # noqa: E402
from migops.mig.catalogue import catalogue  # noqa: E402
from migops.mig.spec import parse_config  # noqa: E402
from migops.reconciler.status import install_crd  # noqa: E402

MIGOPS = Path(sys.executable).parent / "migops"
SECRET = b"bench-secret"
TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def metric(port: int, name: str, **labels: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            if all(f'{k}="{v}"' in line for k, v in labels.items()):
                total += float(line.rsplit(" ", 1)[1])
    return total


def apiserver_count(api: k8s.ApiClient, verb: str, resource: str) -> float:
    resp = api.call_api("/metrics", "GET", auth_settings=["BearerToken"], _preload_content=False)
    text = resp.data.decode()
    total = 0.0
    for line in text.splitlines():
        if (
            line.startswith("apiserver_request_total{")
            and any(f'verb="{v}"' in line for v in verb.split("|"))
            and f'resource="{resource}"' in line
        ):
            total += float(line.rsplit(" ", 1)[1])
    return total


def hook(port: int) -> None:
    body = b'{"ref":"refs/heads/main"}'
    sig = "sha256=" + hmac.new(SECRET, body, hashlib.sha256).hexdigest()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/hook", body, {"X-Hub-Signature-256": sig}, method="POST")
    urllib.request.urlopen(req, timeout=10).read()


def seed(api: k8s.ApiClient, count: int) -> list[str]:
    """`count` Nodes in one request each, converged on all-1g.10gb (as the agent leaves them)."""
    digest = parse_config(CONFIG_YAML).digest("all-1g.10gb")
    specs = plan_nodes(count, [catalogue().resolve("0x233010DE")], 8, "mixed")
    core = k8s.CoreV1Api(api)

    def create(i_spec: tuple[int, object]) -> str:
        i, spec = i_spec
        labels = {
            **spec.gfd_labels,
            **spec.operator_labels,
            "pool": "p" if i % 10 else "q",
            "nvidia.com/mig.config": "all-1g.10gb",
            "nvidia.com/mig.config.state": "success",
        }
        core.create_node(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": spec.name,
                    "labels": labels,
                    # managed by the MigSync "bench" (as after its first sync): an older
                    # cluster gets the annotation once, one write per node, at the first sync
                    "annotations": {
                        "migops.io/mig.config.digest": digest,
                        MANAGED_BY_ANNOTATION: "migops-system/bench",
                    },
                },
            },
            _preload_content=False,
        ).drain_conn()
        return spec.name

    with ThreadPoolExecutor(8) as pool:
        return list(pool.map(create, enumerate(specs)))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(check, timeout: float, what: str) -> float:
    began = time.monotonic()
    while not check():
        if time.monotonic() - began > timeout:
            raise TimeoutError(what)
        time.sleep(0.02)
    return time.monotonic() - began


def start_reconciler(repo_url: str, kubeconfig: Path, tmp: Path, port: int) -> subprocess.Popen:
    """`migops reconcile` of MigSync "bench", woken by the push hook on `port` (interval 1 h: only hooks
    sync), logging to <tmp>/reconciler.log; a session of its own, so killpg stops it."""
    (tmp / "secret").write_bytes(SECRET)
    return subprocess.Popen(
        [
            str(MIGOPS),
            "reconcile",
            "--repo",
            repo_url,
            "--ref",
            "main",
            "--name",
            "bench",
            "--kubeconfig",
            str(kubeconfig),
            "--no-leader-elect",
            "--http-address",
            f"127.0.0.1:{port}",
            "--hook-secret-file",
            str(tmp / "secret"),
            "--interval",
            "1h",
            "--cache-dir",
            str(tmp / "cache"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=open(tmp / "reconciler.log", "wb"),  # the child holds it
        start_new_session=True,
    )


def reconciles(port: int) -> float:
    """Syncs done so far (0 before the reconciler serves /metrics)."""
    try:
        return metric(port, "migops_reconcile_total")
    except OSError:
        return 0.0


def node_writes(port: int) -> float:
    """The reconciler's own count of Node writes that succeeded (listing 10,000 Nodes per poll would load
    the API server)."""
    return metric(port, "migops_api_writes_total", resource="nodes", result="ok")


def hook_until_written(port: int, count: int, timeout: float, what: str) -> float:
    """Send the push hook, then wait until the reconciler has written `count` more Nodes: seconds taken."""
    before = node_writes(port)
    began = time.monotonic()
    hook(port)
    wait_for(lambda: node_writes(port) - before >= count or (time.sleep(0.2) or False), timeout, what)
    return time.monotonic() - began


def report(counts: list[int], run, width: int) -> dict[int, dict[str, float]]:
    """run(count) for each count, its figures printed as they come."""
    results = {}
    for count in counts:
        print(f"{count} nodes:", flush=True)
        results[count] = run(count)
        for k, v in results[count].items():
            print(f"  {k:<{width}} {v:10.3f}", flush=True)
    return results


def run(count: int) -> dict[str, float]:
    out: dict[str, float] = {}
    with (
        tempfile.TemporaryDirectory(prefix="migops-bench-") as tmp,
        ControlPlane(locate()) as plane,
        plane.api_client() as api,
    ):
        tmp_path = Path(tmp)
        core = k8s.CoreV1Api(api)
        cluster.seed(api, (), "mixed")  # the GPU Operator's namespace and ClusterPolicy; nodes below
        core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "migops-system"}})
        install_crd(api, field_manager="bench")
        began = time.monotonic()
        names = seed(api, count)
        print(f"  seeded {len(names)} nodes in {time.monotonic() - began:.1f}s", flush=True)
        repo = GitRepo(tmp_path / "repo")
        two = "  - nodeSelector: {matchLabels: {pool: p}}\n    config: %s\n  - nodeSelector: {matchLabels: {pool: q}}\n    config: %s"
        repo.commit({"config.yaml": CONFIG_YAML, "nodes.yaml": nodes_yaml(two % ("all-1g.10gb", "all-1g.10gb"))})
        port = free_port()
        proc = start_reconciler(repo.url, plane.admin_kubeconfig, tmp_path, port)
        try:
            out["process start -> first sync done s"] = wait_for(lambda: reconciles(port) >= 1, 300, "first sync")
            out["first sync writes (ConfigMap)"] = metric(
                port, "migops_api_writes_total", resource="configmaps", result="ok"
            )
            out["first sync node writes"] = node_writes(port)

            # No-op syncs: a hook on an unchanged repo (fetch, resolve, plan, nothing to write).
            durations = []
            for _ in range(5):
                n, s, w = (
                    reconciles(port),
                    metric(port, "migops_reconcile_duration_seconds_sum"),
                    node_writes(port),
                )
                hook(port)
                wait_for(lambda: reconciles(port) > n, 60, "no-op sync")
                durations.append(metric(port, "migops_reconcile_duration_seconds_sum") - s)
                assert node_writes(port) == w
                time.sleep(0.3)
            durations.sort()
            out["no-op sync s (median of 5)"] = durations[2]
            out["no-op sync writes"] = 0.0

            # 10% of the nodes change (pool q): one write each, none for the 90%.
            before = node_writes(port)
            repo.commit({"nodes.yaml": nodes_yaml(two % ("all-1g.10gb", "all-3g.40gb"))})
            changed = sum(1 for i in range(count) if i % 10 == 0)
            hook(port)
            wait_for(
                lambda: node_writes(port) - before >= changed,
                120,
                "10%",
            )
            time.sleep(1.0)
            writes = node_writes(port) - before
            out["10% change: node writes per changed node"] = writes / changed
            out["10% change: node writes per unchanged node"] = (
                0.0 if writes == changed else (writes - changed) / (count - changed)
            )

            # Every assignment changes (maxUnavailable 100%): time from the hook to the last label written.
            pids = {name: ref.pid for name, ref in plane.processes.items()}
            before = node_writes(port)
            patches = apiserver_count(api, "PATCH|APPLY", "nodes")
            repo.commit({"nodes.yaml": nodes_yaml(two % ("five-1g-one-2g", "five-1g-one-2g"))})
            cpu0 = {"reconciler": cpu_seconds(proc.pid), **{k: cpu_seconds(v) for k, v in pids.items()}}
            t0 = time.monotonic()
            hook(port)
            wait_for(
                lambda: node_writes(port) - before >= count,
                600,
                "100% change",
            )
            took = time.monotonic() - t0
            cpu1 = {"reconciler": cpu_seconds(proc.pid), **{k: cpu_seconds(v) for k, v in pids.items()}}
            out["100% change: hook -> every label written s"] = took
            for k in cpu0:
                out[f"100% change: CPU s {k}"] = cpu1[k] - cpu0[k]
            time.sleep(1.0)
            out["100% change: node writes per node (reconciler)"] = (node_writes(port) - before) / count
            out["100% change: node PATCH/APPLY per node (API server's count)"] = (
                apiserver_count(api, "PATCH|APPLY", "nodes") - patches
            ) / count
            labels = {n.metadata.labels.get("nvidia.com/mig.config") for n in core.list_node().items}
            assert labels == {"five-1g-one-2g"}, labels
            out["reconciler peak RSS MiB"] = peak_rss_mib(proc.pid)
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(60)
    return out


def main(counts: list[int]) -> None:
    load = os.getloadavg()
    print(
        f"machine: {os.cpu_count()} CPUs, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at start", flush=True
    )
    results = report(counts, run, 58)
    if len(counts) > 1:
        a, b = counts[0], counts[-1]
        ra, rb = results[a]["reconciler peak RSS MiB"], results[b]["reconciler peak RSS MiB"]
        print(
            f"memory: {ra:.0f} MiB at {a}, {rb:.0f} MiB at {b}; {(rb - ra) / (b - a) * 1024:.1f} KiB per extra node "
            f"(ratio {rb / ra:.2f} for {b / a:.0f}x the nodes)"
        )
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at the end")


if __name__ == "__main__":
    from _signals import exit_on_signals  # bench/ is the script's own directory

    exit_on_signals()
    main([int(a) for a in sys.argv[1:]] or [2000, 10000])

"""Admission cost against the cluster's size (prints figures, no verdicts).

For each node count (default 100, 1,000 and 10,000) a fresh kube-apiserver + etcd is seeded with that
many GPU Nodes labelled as GPU Feature Discovery labels them (migops.local.cluster.plan_nodes: H100 and
A100 80GB x 8, alternating), every one carrying nvidia.com/mig.config as in a GPU Operator cluster, the
ClusterPolicy (mixed) and a MIG ConfigMap; then `migops webhook` (BENCH_WORKERS, default 1 as in
`migops local`) is started and registered, and:

1. sequential writes: 200 nodes moved to another config one PATCH at a time (reviewed by the webhook)
   against the same PATCHes of a scratch label (not sent to it), phases interleaved, 3 rounds; the
   median per write of each and their ratio; the same config writes with a do-nothing validating webhook
   registered in its place (bench/_trivial_server.py: the floor one webhook call costs here);
2. a reconciler rollout of every node (`migops reconcile`, maxUnavailable 100%, as the local stack runs it
   under its own identity): the time from the push hook until every label is written, and the webhook's
   own time per Node review meanwhile (p50/p99 from its histogram, mean from its sum/count), with its
   verdict cache hits; then the same rollout (back to another config) with no webhook registered;
3. the webhook worker's peak RSS (VmHWM) at the end.

Usage: .venv/bin/python bench/webhook_scale.py [NODES ...]   (default: 100 1000 10000)
"""

from __future__ import annotations

import os
import signal
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

import ssl  # noqa: E402

import urllib3  # noqa: E402
from gitrepo import CONFIG_YAML, GitRepo, nodes_yaml  # noqa: E402
from kubernetes import client as k8s  # noqa: E402

from migops.kube import ssa  # noqa: E402
from migops.local import cluster  # noqa: E402
from migops.local import webhook as local_webhook  # noqa: E402
from migops.local.binaries import locate  # noqa: E402
from migops.local.controlplane import ControlPlane  # noqa: E402
from migops.local.ports import free_ports  # noqa: E402
from migops.local.process import spawn, stop  # noqa: E402
from migops.mig.catalogue import catalogue  # noqa: E402
from migops.reconciler.status import install_crd  # noqa: E402
from migops.webhook.registration import configurations, register, unregister  # noqa: E402
from migops.webhook.state import DEFAULT_RECONCILER_USER  # noqa: E402
from reconciler import hook_until_written, peak_rss_mib, reconciles, report, start_reconciler, wait_for  # noqa: E402

WORKERS = int(os.environ.get("BENCH_WORKERS", "1"))
WRITES = int(os.environ.get("BENCH_WRITES", "200"))
MODELS = ("0x233010DE", "0x20B210DE")  # H100 SXM5 80GB, A100 SXM4 80GB: every config of CONFIG_YAML fits both
CONFIGS = ("all-1g.10gb", "all-3g.40gb")  # both fit both models (CONFIG_YAML)
CM_NAME, CM_NS = "default-mig-parted-config", "gpu-operator"


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def seed(api: k8s.ApiClient, count: int) -> list[str]:
    """`count` Nodes, one create each (8 at a time), every one on all-1g.10gb."""
    specs = cluster.plan_nodes(count, [catalogue().resolve(m) for m in MODELS], 8, "mixed")
    core = k8s.CoreV1Api(api)

    def create(spec: cluster.NodeSpec) -> str:
        labels = {**spec.gfd_labels, **spec.operator_labels, "nvidia.com/mig.config": CONFIGS[0]}
        core.create_node(
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": spec.name, "labels": labels}},
            _preload_content=False,
        ).drain_conn()
        return spec.name

    with ThreadPoolExecutor(8) as pool:
        return list(pool.map(create, specs))


class Webhook:
    """`migops webhook` on loopback, its /metrics read over TLS."""

    def __init__(self, plane: ControlPlane, tmp: Path, bundle: bytes, pem: Path, port: int) -> None:
        argv = local_webhook.command(
            cert=pem,
            key=pem,
            port=port,
            kubeconfig=plane.admin_kubeconfig,
            workers=WORKERS,
            threads=16,
            reconciler_users=(DEFAULT_RECONCILER_USER,),
        )
        self.log = tmp / "webhook.log"
        self.popen, self.ref, self.url = local_webhook.spawn_ready(argv, port, bundle, self.log, 600)
        self.pool = urllib3.HTTPSConnectionPool(
            "127.0.0.1", port, ssl_context=ssl.create_default_context(cadata=bundle.decode()), maxsize=1, timeout=30
        )

    def histogram(self, kind: str = "Node") -> tuple[dict[float, float], float, float]:
        """(cumulative count per bucket bound, count, sum) of validate reviews of `kind`."""
        buckets: dict[float, float] = {}
        count = total = 0.0
        for line in self.pool.request("GET", "/metrics").data.decode().splitlines():
            if 'endpoint="validate"' not in line or f'kind="{kind}"' not in line:
                continue
            value = float(line.split()[-1])
            if line.startswith("migops_webhook_request_duration_seconds_bucket{"):
                le = line.split('le="', 1)[1].split('"', 1)[0]
                bound = float("inf") if le == "+Inf" else float(le)
                buckets[bound] = buckets.get(bound, 0.0) + value
            elif line.startswith("migops_webhook_request_duration_seconds_count{"):
                count += value
            elif line.startswith("migops_webhook_request_duration_seconds_sum{"):
                total += value
        return buckets, count, total

    def cache(self) -> dict[str, float]:
        out = {}
        for line in self.pool.request("GET", "/metrics").data.decode().splitlines():
            if line.startswith("migops_webhook_verdict_cache_total{"):
                out[line.split('result="', 1)[1].split('"', 1)[0]] = float(line.split()[-1])
        return out

    def worker_pids(self) -> list[int]:
        found = []
        for task in Path(f"/proc/{self.popen.pid}/task").iterdir():
            found += [int(p) for p in (task / "children").read_text().split()]
        return found

    def stop(self) -> None:
        stop(self.ref, popen=self.popen)


def quantile(before: dict[float, float], after: dict[float, float], q: float) -> float:
    """The q-quantile (ms) of the observations between two histogram readings, interpolated in its bucket."""
    bounds = sorted(after)
    counts = [after[b] - before.get(b, 0.0) for b in bounds]
    total = counts[-1]
    if total <= 0:
        return float("nan")
    want = q * total
    lower, below = 0.0, 0.0
    for bound, cum in zip(bounds, counts):
        if cum >= want:
            if bound == float("inf"):
                return lower * 1e3
            return (lower + (bound - lower) * (want - below) / max(cum - below, 1e-9)) * 1e3
        lower, below = bound, cum
    return float("nan")


def timed_writes(core: k8s.CoreV1Api, names: list[str], body) -> list[float]:
    times = []
    for i, name in enumerate(names):
        started = time.perf_counter()
        core.patch_node(name, body(i), _preload_content=False).drain_conn()
        times.append((time.perf_counter() - started) * 1e3)
    return times


def sequential(
    api: k8s.ApiClient, hook_: Webhook, names: list[str], bundle: bytes, trivial_url: str
) -> dict[str, float]:
    core = k8s.CoreV1Api(api)
    sample = names[:: max(1, len(names) // WRITES)][:WRITES]
    flip = iter(range(10**9))
    current = {"config": 0}

    def config_body(i: int) -> dict:
        return {"metadata": {"labels": {"nvidia.com/mig.config": CONFIGS[(current["config"] + 1) % 2]}}}

    def scratch_body(i: int) -> dict:
        return {"metadata": {"labels": {"bench.example.com/scratch": str(next(flip))}}}

    def registration(kind: str) -> None:
        unregister(api)
        if kind == "migops":
            register(api, hook_.url, bundle, field_manager="bench")
        else:
            validating, _ = configurations({"url": f"{trivial_url}/echo"}, bundle)
            ssa.apply(api, validating, field_manager="bench", force=True)
        time.sleep(3.0)  # the API server picks a changed configuration up within a second or two

    sent: list[float] = []
    times: dict[str, list[float]] = {
        "config": [],
        "scratch": [],
        "config, do-nothing webhook": [],
        "scratch, do-nothing webhook": [],
    }
    for _ in range(3):
        for kind in ("migops", "do-nothing"):
            registration(kind)
            suffix = "" if kind == "migops" else ", do-nothing webhook"
            timed_writes(core, sample[:10], scratch_body)  # warm the connections
            times["scratch" + suffix] += timed_writes(core, sample, scratch_body)
            reviews = hook_.histogram()[1]
            times["config" + suffix] += timed_writes(core, sample, config_body)
            current["config"] += 1
            if kind == "migops":
                sent.append((hook_.histogram()[1] - reviews) / len(sample))
    registration("migops")
    med = {k: statistics.median(v) for k, v in times.items()}
    return {
        "config write ms (median)": med["config"],
        "scratch write ms (median)": med["scratch"],
        "ratio config / scratch": med["config"] / med["scratch"],
        "webhook Node reviews per config write": statistics.mean(sent),
        "do-nothing webhook: config write ms": med["config, do-nothing webhook"],
        "do-nothing webhook: ratio": med["config, do-nothing webhook"] / med["scratch, do-nothing webhook"],
    }


def rollout(
    plane: ControlPlane, api: k8s.ApiClient, hook_: Webhook, tmp: Path, count: int, bundle: bytes
) -> dict[str, float]:
    """The local stack's reconciler (its own identity), one commit moving every node to another config."""
    core = k8s.CoreV1Api(api)
    core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "migops-system"}})
    install_crd(api, field_manager="bench")
    repo = GitRepo(tmp / "repo")
    every = "  - nodeSelector: {matchLabels: {nvidia.com/gpu.present: 'true'}}\n    config: %s"
    current = {n.metadata.labels.get("nvidia.com/mig.config") for n in core.list_node().items}
    start = sorted(current)[0]
    repo.commit({"config.yaml": CONFIG_YAML, "nodes.yaml": nodes_yaml(every % start)})
    (port,) = free_ports(1)
    identity = plane.kubeconfig_for(DEFAULT_RECONCILER_USER, ("system:masters",))
    proc = start_reconciler(repo.url, identity, tmp, port)
    out: dict[str, float] = {}
    try:
        wait_for(lambda: reconciles(port) >= 1, 900, "first sync")
        target = "five-1g-one-2g"
        repo.commit({"nodes.yaml": nodes_yaml(every % target)})
        before, n0, s0 = hook_.histogram()
        cache0 = hook_.cache()
        out["rollout: hook -> every label written s"] = hook_until_written(port, count, 1800, "rollout")
        labels = {n.metadata.labels.get("nvidia.com/mig.config") for n in core.list_node(_request_timeout=120).items}
        assert labels == {target}, labels
        after, n1, s1 = hook_.histogram()
        cache1 = hook_.cache()
        out["rollout: Node reviews"] = n1 - n0
        out["rollout: webhook per Node review p50 ms"] = quantile(before, after, 0.5)
        out["rollout: webhook per Node review p99 ms"] = quantile(before, after, 0.99)
        out["rollout: webhook per Node review mean ms"] = (s1 - s0) / max(n1 - n0, 1) * 1e3
        hits = cache1.get("hit", 0) - cache0.get("hit", 0)
        misses = cache1.get("miss", 0) - cache0.get("miss", 0)
        out["rollout: verdict cache hits / reviews"] = hits / max(hits + misses, 1)
        # The same rollout with no webhook registered: what the webhook adds end to end.
        unregister(api)
        time.sleep(3.0)
        repo.commit({"nodes.yaml": nodes_yaml(every % CONFIGS[1])})
        out["rollout without the webhook s"] = hook_until_written(port, count, 1800, "rollout without the webhook")
        register(api, hook_.url, bundle, field_manager="bench")
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(60)
    return out


def run(count: int) -> dict[str, float]:
    with (
        tempfile.TemporaryDirectory(prefix="migops-bench-") as tmpdir,
        ControlPlane(locate()) as plane,
        plane.api_client() as api,
    ):
        tmp = Path(tmpdir)
        cluster.seed(api, (), "mixed")  # the GPU Operator's namespace and ClusterPolicy; nodes below
        ssa.apply(
            api,
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": CM_NAME, "namespace": CM_NS},
                "data": {"config.yaml": CONFIG_YAML},
            },
            field_manager="bench",
        )
        began = time.monotonic()
        names = seed(api, count)
        print(f"  seeded {len(names)} nodes in {time.monotonic() - began:.1f}s (load {loadavg()})", flush=True)
        pem, bundle = local_webhook.certificates(tmp / "certs")
        ours_port, trivial_port = free_ports(2)
        trivial = spawn(
            [
                sys.executable,
                str(ROOT / "bench" / "_trivial_server.py"),
                str(pem),
                str(trivial_port),
                str(WORKERS),
                "16",
            ],
            tmp / "trivial.log",
        )
        began = time.monotonic()
        webhook = Webhook(plane, tmp, bundle, pem, ours_port)
        print(f"  webhook ready (informers listed) in {time.monotonic() - began:.1f}s", flush=True)
        try:
            register(api, webhook.url, bundle, field_manager="bench")
            time.sleep(2.0)
            out = sequential(api, webhook, names, bundle, f"https://127.0.0.1:{trivial_port}")
            out.update(rollout(plane, api, webhook, tmp, count, bundle))
            out["webhook worker peak RSS MiB"] = max(peak_rss_mib(p) for p in webhook.worker_pids())
        finally:
            unregister(api)
            webhook.stop()
            stop(trivial[1], popen=trivial[0])
    return out


def main(counts: list[int]) -> None:
    print(
        f"machine: {os.cpu_count()} CPUs, load average {loadavg()} at start; webhook workers={WORKERS}; "
        f"{WRITES} sequential writes per phase and round",
        flush=True,
    )
    results = report(counts, run, 52)
    if len(counts) > 1:
        a, b = counts[0], counts[-1]
        ra, rb = results[a], results[b]
        print(
            f"ratio at {b} / ratio at {a}: {rb['ratio config / scratch'] / ra['ratio config / scratch']:.3f} "
            "(target <= 1.15)"
        )
        print(
            f"webhook p50 per Node review at {b} / at {a}: "
            f"{rb['rollout: webhook per Node review p50 ms'] / ra['rollout: webhook per Node review p50 ms']:.3f} "
            "(target <= 1.5)"
        )
        print(f"webhook peak RSS at {b}: {rb['webhook worker peak RSS MiB']:.0f} MiB (target < 300 MB per worker)")
    print(f"load average {loadavg()} at the end")


if __name__ == "__main__":
    from _signals import exit_on_signals  # bench/ is the script's own directory

    exit_on_signals()
    main([int(a) for a in sys.argv[1:]] or [100, 1000, 10000])

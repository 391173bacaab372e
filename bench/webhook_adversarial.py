"""The webhook under adversarial clients: memory and slow clients; prints figures.

A cache keyed by raw values would grow with every large distinct review and never shrink. Here one `migops webhook` worker (on a
control plane with 3 GPU nodes, the ClusterPolicy and NVIDIA's default MIG ConfigMap) is warmed with
ordinary reviews, its RSS read, and then sent BENCH_REVIEWS (10,000) distinct reviews directly over TLS,
as a client inside the cluster could without the NetworkPolicy, cycling through:
  - Nodes whose mig.config is 64 B to 4 MB (denied before any work: a label value is at most 63),
  - Nodes with distinct valid-length label values (63 characters, an unknown config: denied with a
    suggestion), a 200 KB migops.io/gpus annotation and a 50 KB managed-by annotation,
  - labelled MIG ConfigMaps with distinct valid configs (40 configs each, renamed per review: parsed
    and judged, every one new),
  - Pods requesting 20 distinct 1 KB MIG resource names,
  - ClusterPolicies with a distinct 100 KB migManager section,
  - badly typed reviews (lists where label values belong, a string for metadata: 400).
They are sent by two clients at once. The worker's RSS after the flood
and its peak (VmHWM) are printed beside the start. Target: within 50 MB of the start.

The ConfigMap-heavy set: BENCH_CM_REVIEWS distinct
labelled MIG ConfigMaps of 60 to 200 KB, every tenth of about 1 MiB, from two clients, on a fresh
worker. Each is parsed and judged in full (most of a second here), so the default is 1,500; the
target is the same +50 MB.

Slow clients: the webhook registered with the API server, 40 slow-body connections
kept open (each sends a POST header and then a byte every 5 s; when the worker cuts one after its read
deadline, it reconnects at once), and meanwhile, for BENCH_SLOW_SECONDS (30), fast reviews: direct
reviews of the MIG ConfigMap from two clients, and dry-run applies of it through the API server (refused
if the webhook does not answer: failurePolicy Fail). p50/p99 of both; target p99 <= 1 s.

Claims: one worker answers BENCH_NODE_REVIEWS (100) Node label reviews from one client, quiet, then
again while another client submits 20 adversarial ResourceClaims in a loop (tests/webhook/
adversarial_claims.py: the huge string, nested loops, many requests; judged by the worker's bounded
evaluator process); Node review p50/p99 of both and their ratio (target p99 <= 2x quiet), the worker's
RSS before and after (target within +50 MB), and what the claims were answered.

Usage: .venv/bin/python bench/webhook_adversarial.py   (BENCH_REVIEWS, default 10000; BENCH_CM_REVIEWS,
default 1500; BENCH_SLOW_SECONDS, default 30; BENCH_NODE_REVIEWS, default 100; BENCH_PHASES, default
"mixed,configmaps,slow,claims")
"""

from __future__ import annotations

import json
import os
import re
import ssl
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import _shapes  # bench/: the script's own directory is on sys.path
import _slow
import urllib3

from migops.kube import ssa
from migops.local import cluster
from migops.local import webhook as local_webhook
from migops.local.binaries import locate
from migops.local.controlplane import ControlPlane
from migops.local.ports import free_ports
from migops.local.process import stop
from migops.mig.catalogue import catalogue
from migops.webhook.registration import unregister

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CONFIG = (ROOT / "examples" / "nvidia-default-config.yaml").read_text()
REVIEWS = int(os.environ.get("BENCH_REVIEWS", "10000"))
CM_REVIEWS = int(os.environ.get("BENCH_CM_REVIEWS", "1500"))
SLOW_SECONDS = float(os.environ.get("BENCH_SLOW_SECONDS", "30"))
NODE_REVIEWS = int(os.environ.get("BENCH_NODE_REVIEWS", "100"))
PHASES = os.environ.get("BENCH_PHASES", "mixed,configmaps,slow,claims").split(",")
CM_NAME, CM_NS = "default-mig-parted-config", "gpu-operator"


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def review(kind: str, obj: dict, *, operation: str = "CREATE", old: dict | None = None, group: str = "") -> bytes:
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    return json.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": str(uuid.uuid4()),
                "kind": {"group": group, "version": "v1", "kind": kind},
                "resource": {"group": group, "version": "v1", "resource": kind.lower() + "s"},
                "name": meta.get("name", "x") if isinstance(meta.get("name"), str) else "x",
                "namespace": meta.get("namespace", ""),
                "operation": operation,
                "userInfo": {"username": f"mallory-{uuid.uuid4().hex[:8]}"},
                "object": obj,
                "oldObject": old,
                "dryRun": False,
            },
        }
    ).encode()


_CONFIG_NAMES = re.findall(r"^  ([A-Za-z0-9][-A-Za-z0-9_.]*):", DEFAULT_CONFIG, flags=re.M)


def renamed_config(i: int) -> str:
    """NVIDIA's default config, its first 40 configs kept and renamed: content no memo holds."""
    keep = set(_CONFIG_NAMES[:40])
    out, skipping = [], False
    for line in DEFAULT_CONFIG.splitlines(keepends=True):
        m = re.match(r"^  ([A-Za-z0-9][-A-Za-z0-9_.]*):", line)
        if m:
            skipping = m.group(1) not in keep
            if not skipping:
                line = f"  {m.group(1)}-a{i}:\n"
        if not skipping:
            out.append(line)
    return "".join(out)


def adversarial(i: int) -> bytes:
    tag = f"{i:06d}-{uuid.uuid4().hex}"
    kind = i % 6
    if kind == 0:
        size = (64, 1000, 100_000, 4 << 20)[(i // 6) % 4] if (i // 6) % 25 == 0 or (i // 6) % 4 < 3 else 100_000
        value = (tag * (size // len(tag) + 1))[:size]
        return review("Node", {"metadata": {"name": f"gpu-node-{i}", "labels": {"nvidia.com/mig.config": value}}})
    if kind == 1:
        labels = {
            "nvidia.com/mig.config": ("c" + tag)[:63],
            "nvidia.com/gpu.product": ("p" + tag)[:63],
            "nvidia.com/gpu.count": "8",
            "migops.io/gpu.device-id": "0x233010DE",
        }
        annotations = {
            "migops.io/gpus": ("0x233010DE," * 8)[:-1] + "," + tag * (200_000 // len(tag)),
            "migops.io/managed-by": "ns/" + tag * (50_000 // len(tag)),
        }
        node = {"metadata": {"name": f"gpu-node-{tag}"[:63], "labels": labels, "annotations": annotations}}
        old = {
            "metadata": {
                "name": node["metadata"]["name"],
                "labels": {"nvidia.com/mig.config": "all-disabled"},
                "annotations": {"migops.io/managed-by": "ns/" + tag * (50_000 // len(tag))},
            }
        }
        return review("Node", node, operation="UPDATE", old=old)
    if kind == 2:
        cm = {
            "metadata": {"name": f"adversarial-{i}", "namespace": CM_NS, "labels": {"migops.io/mig-config": "true"}},
            "data": {"config.yaml": renamed_config(i)},
        }
        return review("ConfigMap", cm)
    if kind == 3:
        resources = {f"nvidia.com/mig-{tag}-{j}-" + "x" * 1000: "1" for j in range(20)}
        pod = {
            "metadata": {"name": f"p-{i}", "namespace": "default"},
            "spec": {"containers": [{"name": "c", "resources": {"limits": resources}}]},
        }
        return review("Pod", pod)
    if kind == 4:
        policy = {
            "metadata": {"name": "cluster-policy"},
            "spec": {
                "mig": {"strategy": "mixed"},
                "migManager": {
                    "enabled": True,
                    "repository": "r",
                    "image": "i",
                    "version": "v",
                    "junk": tag * (100_000 // len(tag)),
                },
            },
        }
        return review("ClusterPolicy", policy, operation="UPDATE", old=policy, group="nvidia.com")
    bad = [
        {"metadata": {"name": "n", "labels": {"nvidia.com/mig.config": [tag]}}},
        {"metadata": tag},
        {"metadata": {"name": "n", "annotations": {"migops.io/gpus": {tag: tag}}}},
    ][(i // 6) % 3]
    return review("Node", bad)


def heavy_configmap(i: int) -> bytes:
    """A distinct labelled MIG ConfigMap of 60 to 200 KB (every tenth about 1 MiB): the ConfigMap-heavy set."""
    size = 1_000_000 if i % 10 == 9 else (60_000, 100_000, 140_000, 200_000)[i % 4]
    text = _shapes.distinct(configs=max(4, size // 120), seed=i + 1)
    if len(text) > size:
        text = text[: text.rfind("\n  ", 0, size)] + "\n"
    cm = {
        "metadata": {"name": f"heavy-{i}", "namespace": CM_NS, "labels": {"migops.io/mig-config": "true"}},
        "data": {"config.yaml": text},
    }
    return review("ConfigMap", cm)


def pool_for(port: int, bundle: bytes, read: float = 60) -> urllib3.HTTPSConnectionPool:
    return urllib3.HTTPSConnectionPool(
        "127.0.0.1",
        port,
        ssl_context=ssl.create_default_context(cadata=bundle.decode()),
        maxsize=1,
        timeout=urllib3.Timeout(connect=5, read=read),
        retries=False,
    )


def worker_pid(popen) -> int:
    (worker,) = [
        int(p) for task in Path(f"/proc/{popen.pid}/task").iterdir() for p in (task / "children").read_text().split()
    ]
    return worker


def two_clients(port: int, bundle: bytes, count: int, body: Callable[[int], bytes], worker: int) -> dict[int, int]:
    """`count` reviews, body(i), from two clients at once (each its own connection); statuses."""
    statuses: dict[int, int] = {}
    lock = threading.Lock()
    done = [0]
    began = time.monotonic()

    def client(first: int) -> None:
        pool = pool_for(port, bundle)
        for i in range(first, count, 2):
            try:
                code = pool.request(
                    "POST", "/validate", body=body(i), headers={"Content-Type": "application/json"}
                ).status
            except urllib3.exceptions.HTTPError as exc:
                code = -1
                print(f"  review {i}: {exc}", flush=True)
            with lock:
                statuses[code] = statuses.get(code, 0) + 1
                done[0] += 1
                if done[0] % max(1, count // 5) == 0:
                    print(
                        f"  {done[0]:6d} reviews: RSS {status_kib(worker, 'VmRSS') / 1024:7.1f} MiB "
                        f"({time.monotonic() - began:.0f}s)",
                        flush=True,
                    )

    threads = [threading.Thread(target=client, args=(first,)) for first in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return statuses


def memory_phase(
    name: str, plane: ControlPlane, tmpdir: Path, count: int, body: Callable[[int], bytes], warm: Callable[[int], bytes]
) -> None:
    """A fresh one-worker webhook, warmed with ordinary reviews, then `count` distinct ones from two clients."""
    pem, bundle = local_webhook.certificates(tmpdir / "certs")
    (port,) = free_ports(1)
    argv = local_webhook.command(cert=pem, key=pem, port=port, kubeconfig=plane.admin_kubeconfig, workers=1, threads=16)
    log = tmpdir / f"webhook-{name}.log"
    popen, ref, url = local_webhook.spawn_ready(argv, port, bundle, log, 120)
    try:
        worker = worker_pid(popen)
        pool = pool_for(port, bundle)
        # Warm: every kind of ordinary review, so the start figure includes what any worker loads.
        for i in range(60):
            ordinary = {"metadata": {"name": CM_NAME, "namespace": CM_NS}, "data": {"config.yaml": DEFAULT_CONFIG}}
            pool.request("POST", "/validate", body=review("ConfigMap", ordinary), headers={"Content-Type": JSON})
            pool.request("POST", "/validate", body=warm(i), headers={"Content-Type": JSON})
        time.sleep(1.0)
        start = status_kib(worker, "VmRSS")
        print(f"  start: RSS {start / 1024:.1f} MiB (after the warm-up)", flush=True)  # a cut-short run still says it
        began = time.monotonic()
        statuses = two_clients(port, bundle, count, body, worker)
        took = time.monotonic() - began
        time.sleep(1.0)
        end, peak = status_kib(worker, "VmRSS"), status_kib(worker, "VmHWM")
        log_bytes = log.stat().st_size
    finally:
        stop(ref, popen=popen)
    print(f"[{name}] HTTP statuses: {dict(sorted(statuses.items()))}  (no 5xx expected), {took:.0f} s")
    print(
        f"[{name}] worker RSS: start {start / 1024:.1f} MiB, after {count} distinct reviews from 2 clients "
        f"{end / 1024:.1f} MiB (+{(end - start) / 1024:.1f} MiB; target <= +50 MB), peak {peak / 1024:.1f} MiB"
    )
    print(f"[{name}] webhook log: {log_bytes} bytes (bad requests logged rate-limited)", flush=True)


JSON = "application/json"


def quantiles(times: list[float]) -> str:
    q = statistics.quantiles(times, n=100, method="inclusive") if len(times) > 1 else times * 99
    return f"p50 {statistics.median(times) * 1000:6.1f} ms  p99 {q[98] * 1000:6.1f} ms  max {max(times) * 1000:6.1f} ms"


def slow_phase(plane: ControlPlane, api) -> None:
    """The webhook registered; 40 slow-body connections kept open; fast reviews meanwhile."""
    from kubernetes import client as k8s

    hook = local_webhook.start(api, plane.workdir, plane.admin_kubeconfig, log=plane.logs / "webhook-slow.log")
    bundle = (hook.certs / "ca-bundle.crt").read_bytes()
    host, port = hook.url.removeprefix("https://").split(":")
    ctx = ssl.create_default_context(cadata=bundle.decode())
    cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": CM_NAME, "namespace": CM_NS},
        "data": {"config.yaml": DEFAULT_CONFIG},
    }
    body = review("ConfigMap", cm, operation="UPDATE", old=cm)
    direct: list[float] = []
    through: list[float] = []
    failed: list[str] = []
    lock = threading.Lock()
    try:
        with _slow.SlowClients(host, int(port), ctx, count=40, interval=5.0, reconnect=True) as slow:
            print(f"\n[slow] {slow.sending} slow-body connections open", flush=True)

            def direct_client() -> None:
                pool = pool_for(int(port), bundle, read=10)
                while time.monotonic() < until:
                    began = time.monotonic()
                    try:
                        code = pool.request("POST", "/validate", body=body, headers={"Content-Type": JSON}).status
                    except urllib3.exceptions.HTTPError as exc:
                        code = str(exc)
                    with lock:
                        direct.append(time.monotonic() - began)
                        if code != 200:
                            failed.append(f"direct: {code}")

            def api_client() -> None:
                i = 0
                while time.monotonic() < until:
                    i += 1
                    labelled = {**cm, "metadata": {**cm["metadata"], "labels": {"bench": str(i)}}}
                    began = time.monotonic()
                    try:
                        ssa.apply(api, labelled, field_manager="bench", dry_run=True, force=True)
                    except k8s.exceptions.ApiException as exc:
                        with lock:
                            failed.append(f"API server: {exc.status} {exc.reason}")
                    with lock:
                        through.append(time.monotonic() - began)

            threads = [threading.Thread(target=direct_client) for _ in range(2)] + [threading.Thread(target=api_client)]
            began = time.monotonic()
            until = began + SLOW_SECONDS
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            took = time.monotonic() - began
            open_at_end = slow.sending
        cut = [answer for _, answer in slow.cuts]
        after = sorted(t for t, _ in slow.cuts)
    finally:
        stop(hook.ref, popen=hook.popen)
        unregister(api)
    print(
        f"[slow] over {took:.0f} s: {len(direct)} direct reviews (2 clients), {len(through)} dry-run applies through the API server"
    )
    print(f"[slow] direct reviews:             {quantiles(direct)}  (target p99 <= 1 s)")
    print(f"[slow] through the API server:     {quantiles(through)}  (target p99 <= 1 s)")
    print(f"[slow] failed: {len(failed)} {failed[:5]}")
    answers = {a[:12].decode(errors="replace"): cut.count(a) for a in set(cut)}
    print(
        f"[slow] slow connections: {open_at_end} open at the end; {len(cut)} cut meanwhile, answered {answers}, "
        f"after {min(after, default=0):.1f}-{max(after, default=0):.1f} s from their first byte; {len(slow.failures)} failed to connect",
        flush=True,
    )


def _node_review(i: int) -> bytes:
    """A Node's nvidia.com/mig.config written: a new node name each time, so every review is a miss."""
    name = f"bench-node-{i}"
    labels = {"migops.io/gpu.device-id": "0x233010DE", "nvidia.com/gpu.count": "8"}
    old = {"metadata": {"name": name, "labels": {**labels, "nvidia.com/mig.config": "all-disabled"}}}
    new = {"metadata": {"name": name, "labels": {**labels, "nvidia.com/mig.config": "all-balanced"}}}
    return review("Node", new, operation="UPDATE", old=old)


def _node_latencies(pool: urllib3.HTTPSConnectionPool, first: int) -> list[float]:
    times = []
    for i in range(first, first + NODE_REVIEWS):
        began = time.perf_counter()
        answer = pool.request("POST", "/validate", body=_node_review(i), headers={"Content-Type": JSON})
        times.append(time.perf_counter() - began)
        assert answer.status == 200, answer.status
    return times


def claims_phase(tmpdir: Path, plane: ControlPlane) -> None:
    """Node reviews quiet, then beside 20 adversarial claims submitted in a loop."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "webhook"))
    from adversarial_claims import ADVERSARIAL

    pem, bundle = local_webhook.certificates(tmpdir / "certs-claims")
    (port,) = free_ports(1)
    argv = local_webhook.command(cert=pem, key=pem, port=port, kubeconfig=plane.admin_kubeconfig, workers=1, threads=16)
    popen, ref, url = local_webhook.spawn_ready(argv, port, bundle, tmpdir / "webhook-claims.log", 120)
    claims = [make(tag) for tag in range(7) for make in ADVERSARIAL][:20]
    answers: dict[str, int] = {}
    stop_event = threading.Event()
    try:
        worker = worker_pid(popen)
        pool = pool_for(port, bundle)
        _node_latencies(pool, 10**6)  # warm
        start = status_kib(worker, "VmRSS")
        quiet = _node_latencies(pool, 0)

        def submit() -> None:
            claimer = pool_for(port, bundle)
            i = 0
            while not stop_event.is_set():
                body = review("ResourceClaim", claims[i % len(claims)], group="resource.k8s.io")
                got = json.loads(claimer.request("POST", "/validate", body=body, headers={"Content-Type": JSON}).data)
                warnings = got["response"].get("warnings") or ["admitted"]
                key = re.sub(r"\d+", "N", warnings[0].split(": ", 1)[-1])[:70]
                answers[key] = answers.get(key, 0) + 1
                i += 1

        thread = threading.Thread(target=submit)
        thread.start()
        time.sleep(2.0)  # the loop under way (the evaluator started)
        loud = _node_latencies(pool, 10**5)
        stop_event.set()
        thread.join(30)
        end, peak = status_kib(worker, "VmRSS"), status_kib(worker, "VmHWM")
    finally:
        stop_event.set()
        stop(ref, popen=popen)
    q = statistics.quantiles(quiet, n=100, method="inclusive")[98]
    lq = statistics.quantiles(loud, n=100, method="inclusive")[98]
    print(f"[claims] {NODE_REVIEWS} Node reviews quiet:             {quantiles(quiet)}")
    print(f"[claims] {NODE_REVIEWS} Node reviews beside the claims: {quantiles(loud)}")
    print(f"[claims] p99 ratio beside/quiet {lq / q:.2f} (target <= 2)")
    print(
        f"[claims] worker RSS: start {start / 1024:.1f} MiB, after {end / 1024:.1f} MiB "
        f"(+{(end - start) / 1024:.1f} MiB; target <= +50 MB), peak {peak / 1024:.1f} MiB"
    )
    print(f"[claims] {sum(answers.values())} claims answered: {dict(sorted(answers.items()))}", flush=True)


def main() -> int:
    print(
        f"machine: {os.cpu_count()} CPUs, load average {loadavg()} at start; phases {PHASES}",
        flush=True,
    )
    with ControlPlane(locate()) as plane, plane.api_client() as api, tempfile.TemporaryDirectory() as tmp:
        tmpdir = Path(tmp)
        nodes = cluster.plan_nodes(
            3, [catalogue().resolve("0x233010DE"), catalogue().resolve("0x20B010DE")], 8, "mixed"
        )
        cluster.seed(api, nodes, "mixed")
        ssa.apply(
            api,
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": CM_NAME, "namespace": CM_NS},
                "data": {"config.yaml": DEFAULT_CONFIG},
            },
            field_manager="bench",
        )
        if "mixed" in PHASES:
            print(f"\n[mixed] {REVIEWS} distinct adversarial reviews (the six kinds above)", flush=True)
            memory_phase(
                "mixed",
                plane,
                tmpdir,
                REVIEWS,
                lambda i: adversarial(10 + i),
                lambda i: adversarial(i + 6 * 1000000 if i % 6 != 2 else i),
            )
        if "configmaps" in PHASES:
            print(
                f"\n[configmaps] {CM_REVIEWS} distinct labelled MIG ConfigMaps, 60-200 KB, every tenth ~1 MiB",
                flush=True,
            )
            memory_phase("configmaps", plane, tmpdir, CM_REVIEWS, heavy_configmap, lambda i: heavy_configmap(10**6 + i))
        if "slow" in PHASES:
            slow_phase(plane, api)
        if "claims" in PHASES:
            print("\n[claims] Node reviews beside 20 adversarial ResourceClaims in a loop", flush=True)
            claims_phase(tmpdir, plane)
    print(f"load average {loadavg()} at the end")
    return 0


if __name__ == "__main__":
    from _signals import exit_on_signals  # bench/ is the script's own directory

    exit_on_signals()
    sys.exit(main())

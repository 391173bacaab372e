"""Benchmark of the admission webhook (prints figures, no verdicts).

1. Direct load on POST /validate over TLS with keep-alive (vegeta, from hack/bench-tools.sh): an
   AdmissionReview of NVIDIA's default MIG ConfigMap (an UPDATE with object and oldObject, dryRun: the
   review Flux sends every interval). Throughput at saturation and p50/p99 at fixed rates, each pair
   (the same gunicorn configuration serving a trivial Flask route that returns a fixed allow, then the
   webhook) run back to back; the ratio per pair and the median of the pairs.
2. The first review of a new ConfigMap (a cache miss), default config, nodes of several GPU models:
   in-process with every memo emptied before each review (nothing remembered: the true first review),
   with where the time goes; then over HTTPS: a new ConfigMap whose 81 configs the webhook never saw
   (renamed per review), and the ConfigMap in force with one config changed to a new geometry.
3. Through the API server: median latency of updating the MIG ConfigMap with the webhook registered
   vs not, phases interleaved, as ratios, for (a) a content change (a new geometry every time: the
   case the webhook exists for), (b) a label change and (c) a Flux-style re-apply of the same object.
   For (a), where the time goes (the webhook's own time per call, from its metrics) and the same with
   the mutating webhook not registered (what the annotations cost), and with a do-nothing validating
   webhook registered instead (bench/_trivial_server.py: the least one webhook call costs here).
Everything runs on one host: control plane, webhook, load generator (so they share its cores);
the load average is printed with each figure. Environment: BENCH_WORKERS (2), BENCH_THREADS (16),
BENCH_DURATION (5s), BENCH_PAIRS (6), BENCH_UPDATES (60 per phase).
"""

from __future__ import annotations

import json
import os
import re
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

import urllib3  # noqa: E402
from kubernetes import client as k8s  # noqa: E402

from migops.kube import ssa  # noqa: E402
from migops.local import cluster  # noqa: E402
from migops.local import webhook as local_webhook  # noqa: E402
from migops.local.binaries import locate  # noqa: E402
from migops.local.controlplane import ControlPlane  # noqa: E402
from migops.local.ports import free_ports  # noqa: E402
from migops.local.process import spawn, stop  # noqa: E402
from migops.mig.catalogue import catalogue  # noqa: E402
from migops.webhook.registration import configurations, register, unregister  # noqa: E402

DEFAULT_CONFIG = (ROOT / "examples" / "nvidia-default-config.yaml").read_text()
WORKERS, THREADS = int(os.environ.get("BENCH_WORKERS", "2")), int(os.environ.get("BENCH_THREADS", "16"))
DURATION = os.environ.get("BENCH_DURATION", "5s")
PAIRS = int(os.environ.get("BENCH_PAIRS", "6"))
UPDATES = int(os.environ.get("BENCH_UPDATES", "60"))
MODELS = ("0x233010DE", "0x20B010DE", "0x20F110DE", "0x233510DE", "0x290110DE")  # H100, A100, A100 PCIe, H200, B200
CM_NAME, CM_NS = "default-mig-parted-config", "gpu-operator"


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def configmap(text: str, name: str = CM_NAME, labels: dict | None = None) -> dict:
    meta = {"name": name, "namespace": CM_NS, "resourceVersion": "1"}
    if labels:
        meta["labels"] = labels
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"config.yaml": text}}


def review_body(obj: dict, operation: str = "UPDATE", old: dict | None = None) -> bytes:
    return json.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": str(uuid.uuid4()),
                "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
                "resource": {"group": "", "version": "v1", "resource": "configmaps"},
                "name": obj["metadata"]["name"],
                "namespace": CM_NS,
                "operation": operation,
                "userInfo": {"username": "flux"},
                "object": obj,
                "oldObject": old if operation == "UPDATE" else None,
                "dryRun": True,
            },
        }
    ).encode()


def geometry(i: int) -> str:
    """The i-th of 1,785 distinct valid geometries for an 8-GPU H100/A100 node: 1g.10gb x (1..7) on
    a subset of the GPUs."""
    subset = [g for g in range(8) if (i % 255 + 1) >> g & 1]
    return (
        f"  bench-geometry:\n    - devices: {subset}\n      mig-enabled: true\n"
        f"      mig-devices: {{\"1g.10gb\": {1 + (i // 255) % 7}}}\n"
    )


def with_geometry(i: int) -> str:
    return DEFAULT_CONFIG.replace("mig-configs:\n", "mig-configs:\n" + geometry(i), 1)


def renamed(i: int) -> str:
    """The default config with every config renamed: content no memo of the webhook holds."""
    return re.sub(r"^  ([A-Za-z0-9][-A-Za-z0-9_.]*):", rf"  \1-r{i}:", DEFAULT_CONFIG, flags=re.M)


def quantiles(times: list[float]) -> str:
    q = statistics.quantiles(times, n=100) if len(times) > 1 else times * 99
    return f"p50 {statistics.median(times):6.2f} ms  p99 {q[98]:6.2f} ms"


# ------------------------------------------------------------------------------------------ 1. direct load
def vegeta(binary: str, url: str, body: Path, ca: Path, *, rate: int | None, duration: str = DURATION) -> dict:
    target = f"POST {url}\nContent-Type: application/json\n@{body}\n"
    # Up to 16 connections at a fixed rate, about what an API server keeps to one webhook; 8 busy ones
    # at saturation (two per core for the two server processes and vegeta).
    rate_args = [f"-rate={rate}/s", "-max-workers=16"] if rate else ["-rate=0", "-max-workers=8", "-workers=8"]
    attack = subprocess.run(
        [binary, "attack", f"-duration={duration}", f"-root-certs={ca}", "-keepalive=true", *rate_args],
        input=target.encode(),
        capture_output=True,
        check=True,
    )
    report = subprocess.run([binary, "report", "-type=json"], input=attack.stdout, capture_output=True, check=True)
    result = json.loads(report.stdout)
    result["load"] = loadavg()
    return result


def fmt(r: dict) -> str:
    lat = r["latencies"]
    ok = r["status_codes"].get("200", 0)
    return (
        f"{r['throughput']:6.0f}/s  p50 {lat['50th'] / 1e6:5.2f} ms  p99 {lat['99th'] / 1e6:6.2f} ms  "
        f"max {lat['max'] / 1e6:7.1f} ms  ({ok}/{r['requests']} HTTP 200; load {r['load']})"
    )


def direct_load(vegeta_bin: str, ours_url: str, trivial_url: str, body: Path, ca: Path) -> None:
    print(
        f"\n1. POST /validate, default-config review ({body.stat().st_size} bytes), TLS keep-alive; "
        f"pairs run back to back (trivial, then ours)"
    )
    for _ in range(2):  # warm both, and the verdict cache
        vegeta(vegeta_bin, f"{ours_url}/validate", body, ca, rate=200, duration="2s")
        vegeta(vegeta_bin, f"{trivial_url}/validate", body, ca, rate=200, duration="2s")
    ratios = []
    for i in range(PAIRS):
        # Back to back, the order alternating, so drift in the machine's load favours neither.
        order = ("trivial", "ours") if i % 2 == 0 else ("ours", "trivial")
        got = {
            name: vegeta(vegeta_bin, f"{trivial_url if name == 'trivial' else ours_url}/validate", body, ca, rate=None)
            for name in order
        }
        ratios.append(got["ours"]["throughput"] / got["trivial"]["throughput"])
        print(f"  saturation  trivial Flask allow {fmt(got['trivial'])}")
        print(f"  saturation  migops webhook      {fmt(got['ours'])}   ratio {ratios[-1]:.2f}")
    print(
        f"  ratio at saturation, migops / trivial: median {statistics.median(ratios):.2f} of {PAIRS} pairs "
        f"({', '.join(f'{r:.2f}' for r in ratios)})   (target >= 0.9)"
    )
    for rate in (500, 1000):
        p99 = {"trivial": [], "ours": []}
        for i in range(PAIRS):
            order = (("trivial", trivial_url), ("ours", ours_url))
            for name, url in order if i % 2 == 0 else order[::-1]:
                r = vegeta(vegeta_bin, f"{url}/validate", body, ca, rate=rate)
                p99[name].append(r["latencies"]["99th"] / 1e6)
                label = "trivial Flask allow" if name == "trivial" else "migops webhook"
                print(f"  {rate:4d}/s      {label:<19} {fmt(r)}")
        print(
            f"  {rate:4d}/s      p99 median of {PAIRS}: trivial {statistics.median(p99['trivial']):.2f} ms, "
            f"migops {statistics.median(p99['ours']):.2f} ms" + ("   (target <= 5 ms)" if rate == 500 else "")
        )
    print("  (ambition: >= 2,000 reviews/s on 2 cores)")


# ------------------------------------------------------------------------------------------ 2. first review
def first_review_in_process(api: k8s.ApiClient) -> None:
    """Every memo emptied before each review: the parts timed by wrapping the MIG calls."""
    import gc

    from migops.webhook import admission, annotate, checks, configmaps
    from migops.webhook.state import ClusterState

    state = ClusterState(api).start()
    try:
        if not state.wait_synced(60):
            raise RuntimeError(f"informers not synced: {state.errors()}")
        snap = state.snapshot()
    finally:
        state.stop()
    gc.collect()
    gc.freeze()  # as the webhook's workers do after loading
    spent: dict[str, float] = {}

    def timed(name: str, fn: Callable) -> Callable:
        def wrapper(*args, **kwargs):
            started = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[name] = spent.get(name, 0.0) + (time.perf_counter() - started) * 1e3

        return wrapper

    originals = {name: getattr(checks, name) for name in ("parse", "on_catalogue", "on_node")}
    parts: dict[str, list[float]] = {
        k: []
        for k in (
            "decode + envelope",
            "parse (MIG reader)",
            "catalogue validation (81 configs x every model)",
            "node validation (groups of selecting nodes)",
            "rule logic, messages, warnings",
            "mutation (annotations)",
            "response",
        )
    }
    totals = []
    try:
        for name, fn in originals.items():
            setattr(checks, name, timed(name, fn))
        for i in range(60):
            text = DEFAULT_CONFIG + f"\n# revision {i} {uuid.uuid4()}\n"
            body = review_body(configmap(text), old=configmap(text))
            checks.forget()
            spent.clear()
            t0 = time.perf_counter()
            req = admission.parse_review(admission.decode(body))
            t1 = time.perf_counter()
            verdict = configmaps.validate(req, snap)
            t2 = time.perf_counter()
            annotate.mutate(req, snap)
            t3 = time.perf_counter()
            verdict.body(req.uid)
            t4 = time.perf_counter()
            mig = spent.get("parse", 0) + spent.get("on_catalogue", 0) + spent.get("on_node", 0)
            if i < 5:
                continue  # warm-up
            totals.append((t4 - t0) * 1e3)
            parts["decode + envelope"].append((t1 - t0) * 1e3)
            parts["parse (MIG reader)"].append(spent.get("parse", 0))
            parts["catalogue validation (81 configs x every model)"].append(spent.get("on_catalogue", 0))
            parts["node validation (groups of selecting nodes)"].append(spent.get("on_node", 0))
            parts["rule logic, messages, warnings"].append((t2 - t1) * 1e3 - mig)
            parts["mutation (annotations)"].append((t3 - t2) * 1e3)
            parts["response"].append((t4 - t3) * 1e3)
    finally:
        for name, fn in originals.items():
            setattr(checks, name, fn)
        checks.forget()
    print(
        f"  in-process, nothing remembered (memos emptied before each), {len(totals)} reviews: "
        f"{quantiles(totals)}   (target < 30 ms; load {loadavg()})"
    )
    for name, values in parts.items():
        print(f"    {name:<50} median {statistics.median(values):6.2f} ms")


def first_review_https(port: int, bundle: bytes) -> None:
    pool = urllib3.HTTPSConnectionPool(
        "127.0.0.1", port, ssl_context=ssl.create_default_context(cadata=bundle.decode()), maxsize=1
    )

    def run(label: str, make: Callable[[int], bytes]) -> None:
        times = []
        for i in range(65):
            data = make(i)
            if i == 5:
                before = webhook_seconds(pool).get("validate", (0.0, 0.0))
            started = time.perf_counter()
            resp = pool.request("POST", "/validate", body=data, headers={"Content-Type": "application/json"})
            times.append((time.perf_counter() - started) * 1e3)
            assert resp.status == 200 and json.loads(resp.data)["response"]["allowed"], resp.data[:300]
        after = webhook_seconds(pool)["validate"]
        inside = (after[1] - before[1]) / (after[0] - before[0]) * 1e3
        print(
            f"  HTTPS, {label}, {len(times) - 5} reviews: {quantiles(times[5:])}; "
            f"mean inside the webhook {inside:.2f} ms   (load {loadavg()})"
        )

    run(
        "a new ConfigMap, every config unseen (renamed per review)",
        lambda i: review_body(
            configmap(renamed(i), name=f"bench-new-{i}", labels={"migops.io/mig-config": "true"}), operation="CREATE"
        ),
    )
    run(
        "the ConfigMap in force, one config changed to a new geometry",
        lambda i: review_body(configmap(with_geometry(1000 + i)), old=configmap(with_geometry(999 + i))),
    )


# ------------------------------------------------------------------------------------------ 3. API server
def webhook_seconds(pool: urllib3.HTTPSConnectionPool) -> dict[str, tuple[float, float]]:
    """(count, seconds) of reviews per endpoint, from the webhook's latency histogram."""
    out: dict[str, list[float]] = {}
    for line in pool.request("GET", "/metrics").data.decode().splitlines():
        for suffix, index in (("_count", 0), ("_sum", 1)):
            if line.startswith(f"migops_webhook_request_duration_seconds{suffix}{{"):
                endpoint = line.split('endpoint="', 1)[1].split('"', 1)[0]
                out.setdefault(endpoint, [0.0, 0.0])[index] += float(line.split()[-1])
    return {k: (v[0], v[1]) for k, v in out.items()}


def through_api_server(api: k8s.ApiClient, url: str, bundle: bytes, trivial_url: str) -> None:
    core = k8s.CoreV1Api(api)
    port = int(url.rsplit(":", 1)[1])
    pool = urllib3.HTTPSConnectionPool(
        "127.0.0.1", port, ssl_context=ssl.create_default_context(cadata=bundle.decode()), maxsize=1
    )
    counter = iter(range(10**9))

    def content_change() -> None:  # a new geometry every time: a cache miss for the content
        i = next(counter)
        core.patch_namespaced_config_map(CM_NAME, CM_NS, {"data": {"config.yaml": with_geometry(i)}})

    def label_change() -> None:
        core.patch_namespaced_config_map(CM_NAME, CM_NS, {"metadata": {"labels": {"bench": str(next(counter))}}})

    def timed_reapply() -> float:
        current = core.read_namespaced_config_map(CM_NAME, CM_NS)
        manifest = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": CM_NAME, "namespace": CM_NS},
            "data": {"config.yaml": current.data["config.yaml"]},
        }
        started = time.perf_counter()
        ssa.apply(api, manifest, field_manager="bench-flux", force=True)
        return (time.perf_counter() - started) * 1e3

    def registration(kind: str) -> None:
        if kind == "with webhook":
            register(api, url, bundle, field_manager="bench")
        elif kind in ("validating only", "do-nothing webhook"):
            unregister(api)
            target = url if kind == "validating only" else f"{trivial_url}/echo"
            validating, _ = configurations({"url": target}, bundle)
            ssa.apply(api, validating, field_manager="bench", force=True)
        else:
            unregister(api)
        time.sleep(3.0)  # the API server notices a changed configuration within seconds

    kinds: dict[str, Callable[[], float]] = {}

    def measured(write: Callable[[], None]) -> Callable[[], float]:
        def run() -> float:
            started = time.perf_counter()
            write()
            return (time.perf_counter() - started) * 1e3

        return run

    kinds["(a) content change, a new geometry"] = measured(content_change)
    kinds["(b) label change"] = measured(label_change)
    kinds["(c) re-apply of the same object (SSA)"] = timed_reapply
    phases = ("with webhook", "without webhook", "validating only", "do-nothing webhook")
    times = {(k, p): [] for k in kinds for p in phases}
    inside: dict[str, list[float]] = {"validate": [], "mutate": []}
    calls: dict[tuple[str, str], float] = {}
    print(
        "\n3. Through the API server: updates of the MIG ConfigMap in force, phases interleaved "
        f"({UPDATES} updates per kind and phase per round, 3 rounds)"
    )
    for _ in range(3):
        for phase in phases:
            registration(phase)
            for kind, run in kinds.items():
                for _ in range(3):
                    run()  # warm: connections, the API server's webhook client
                before = webhook_seconds(pool)
                for _ in range(UPDATES):
                    times[(kind, phase)].append(run())
                after = webhook_seconds(pool)
                for endpoint in ("validate", "mutate"):
                    n = after.get(endpoint, (0, 0))[0] - before.get(endpoint, (0, 0))[0]
                    calls[(kind, phase, endpoint)] = calls.get((kind, phase, endpoint), 0) + n
                    if phase == "with webhook" and kind.startswith("(a)") and n:
                        seconds = after[endpoint][1] - before[endpoint][1]
                        inside[endpoint].append(seconds / n * 1e3)
    unregister(api)
    print(f"  (load {loadavg()})")
    for kind in kinds:
        med = {p: statistics.median(times[(kind, p)]) for p in phases}
        sent = ", ".join(
            f"{e} {calls.get((kind, 'with webhook', e), 0) / (3 * UPDATES):.1f}" for e in ("mutate", "validate")
        )
        print(
            f"  {kind:<40} median with {med['with webhook']:6.2f} ms / without {med['without webhook']:6.2f} ms "
            f"= {med['with webhook'] / med['without webhook']:.2f}   (webhook calls per update: {sent})"
        )
        if kind.startswith("(a)"):
            only = med["validating only"]
            print(
                f"  {'':<40} validating webhook only: {only:6.2f} ms = {only / med['without webhook']:.2f} "
                f"(the annotating mutation costs {med['with webhook'] - only:+.2f} ms)"
            )
            floor = med["do-nothing webhook"]
            print(
                f"  {'':<40} a do-nothing validating webhook (same registration, answers allow at once): "
                f"{floor:6.2f} ms = {floor / med['without webhook']:.2f} (the least one webhook call costs here)"
            )
            extra = med["with webhook"] - med["without webhook"]
            v, m = statistics.median(inside["validate"]), statistics.median(inside["mutate"])
            print(
                f"  {'':<40} where the {extra:.2f} ms go: inside the webhook, validate {v:.2f} ms + mutate {m:.2f} ms; "
                f"the rest ({extra - v - m:.2f} ms) is two HTTPS calls and the API server's part (encoding the "
                "object twice, applying the patch)"
            )
    print("  (target <= 1.3)")


def main() -> int:
    vegeta_bin = subprocess.run(
        [str(ROOT / "hack" / "bench-tools.sh")], capture_output=True, text=True, check=True
    ).stdout.strip()
    print(
        f"machine: {os.cpu_count()} cores; load average at start {loadavg()}; gunicorn "
        f"(migops.webhook.worker.ThreadWorker) workers={WORKERS} threads={THREADS}; vegeta on the same machine"
    )
    with ControlPlane(locate()) as plane, plane.api_client() as api, tempfile.TemporaryDirectory() as tmp:
        tmpdir = Path(tmp)
        gpus = [catalogue().resolve(m) for m in MODELS]
        cluster.seed(api, cluster.plan_nodes(10, gpus, 8, "mixed"), "mixed")
        ssa.apply(
            api, configmap(DEFAULT_CONFIG) | {"metadata": {"name": CM_NAME, "namespace": CM_NS}}, field_manager="bench"
        )
        for i, config in ((1, "all-1g.10gb"), (2, "all-balanced"), (4, "all-1g.18gb")):
            ssa.apply(
                api,
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {"name": f"gpu-node-{i}", "labels": {"nvidia.com/mig.config": config}},
                },
                field_manager="gpu-operator",
                force=True,
            )
        pem, bundle = local_webhook.certificates(tmpdir / "certs")
        ca = tmpdir / "certs" / "ca-bundle.crt"
        ours_port, trivial_port = free_ports(2)
        ours_argv = local_webhook.command(
            cert=pem, key=pem, port=ours_port, kubeconfig=plane.admin_kubeconfig, workers=WORKERS, threads=THREADS
        )
        trivial_argv = [
            sys.executable,
            str(ROOT / "bench" / "_trivial_server.py"),
            str(pem),
            str(trivial_port),
            str(WORKERS),
            str(THREADS),
        ]
        ours_popen, ours_ref, ours_url = local_webhook.spawn_ready(
            ours_argv, ours_port, bundle, tmpdir / "webhook.log", 90
        )
        trivial = spawn(trivial_argv, tmpdir / "trivial.log")
        try:
            trivial_url = f"https://127.0.0.1:{trivial_port}"
            time.sleep(1.0)
            body = tmpdir / "review.json"
            body.write_bytes(review_body(configmap(DEFAULT_CONFIG), old=configmap(DEFAULT_CONFIG)))
            if os.environ.get("BENCH_SKIP_LOAD") != "1":
                direct_load(vegeta_bin, ours_url, trivial_url, body, ca)
            print(
                f"\n2. First review of a new ConfigMap (cache miss), default config, {len(MODELS)} GPU models "
                "on 10 nodes, 3 nodes selecting configs besides all-disabled"
            )
            first_review_in_process(api)
            first_review_https(ours_port, bundle)
            through_api_server(api, ours_url, bundle, trivial_url)
        finally:
            stop(ours_ref, popen=ours_popen)
            stop(trivial[1], popen=trivial[0])
    print(f"\nload average at end {loadavg()}")
    return 0


if __name__ == "__main__":
    from _signals import exit_on_signals  # bench/ is the script's own directory

    exit_on_signals()
    sys.exit(main())

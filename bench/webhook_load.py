"""Benchmark of the admission webhook (figures for issue 6; prints figures, no verdicts).

1. Direct load on POST /validate over TLS with keep-alive (vegeta, from hack/bench-tools.sh): an
   AdmissionReview of NVIDIA's default MIG ConfigMap (an UPDATE with object and oldObject, dryRun: the
   review Flux sends every interval). Throughput at saturation and p50/p99 at fixed rates, next to the
   same gunicorn configuration serving a trivial Flask route that returns a fixed allow (ratio).
2. The first review of a new ConfigMap (a cache miss: the content differs each time), default config,
   nodes of several GPU models in the cluster, some selecting configs: p50/p99 over HTTPS.
3. Through the API server: median latency of updating the MIG ConfigMap with the webhook registered
   vs not, measured in one run, interleaved, as a ratio.
Everything runs on this machine: control plane, webhook, load generator (so they share its cores).
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "webhook"))

from kubernetes import client as k8s  # noqa: E402

from migops.kube import ssa  # noqa: E402
from migops.local import cluster  # noqa: E402
from migops.local.binaries import locate  # noqa: E402
from migops.local.controlplane import ControlPlane  # noqa: E402
from migops.local.ports import free_ports  # noqa: E402
from migops.local.process import spawn, stop  # noqa: E402
from migops.local.webhook import _wait_ready  # noqa: E402
from migops.certs.rotation import DirectoryStore, rotate  # noqa: E402
from migops.mig.catalogue import catalogue  # noqa: E402
from migops.webhook.registration import register, unregister  # noqa: E402

DEFAULT_CONFIG = (ROOT / "examples" / "nvidia-default-config.yaml").read_text()
WORKERS, THREADS = int(os.environ.get("BENCH_WORKERS", "2")), int(os.environ.get("BENCH_THREADS", "16"))
DURATION = os.environ.get("BENCH_DURATION", "10s")
MODELS = ("0x233010DE", "0x20B010DE", "0x20F110DE", "0x233510DE", "0x290110DE")  # H100, A100, A100 PCIe, H200, B200


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def configmap(text: str) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "default-mig-parted-config",
            "namespace": "gpu-operator", "resourceVersion": "1"}, "data": {"config.yaml": text}}


def review_body(text: str) -> bytes:
    obj = configmap(text)
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": str(uuid.uuid4()), "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
        "resource": {"group": "", "version": "v1", "resource": "configmaps"}, "name": "default-mig-parted-config",
        "namespace": "gpu-operator", "operation": "UPDATE", "userInfo": {"username": "flux"},
        "object": obj, "oldObject": obj, "dryRun": True}}).encode()


def vegeta(binary: str, url: str, body: Path, ca: Path, *, rate: int | None, duration: str = DURATION) -> dict:
    target = f"POST {url}\nContent-Type: application/json\n@{body}\n"
    # At most 16 connections, as an API server keeps to one webhook: gthread needs a thread per
    # busy keep-alive connection (beyond that, requests wait; see docs/webhook.md).
    rate_args = [f"-rate={rate}/s", "-max-workers=16"] if rate else ["-rate=0", "-max-workers=8", "-workers=8"]
    attack = subprocess.run([binary, "attack", f"-duration={duration}", f"-root-certs={ca}", "-keepalive=true",
                             *rate_args], input=target.encode(), capture_output=True, check=True)
    report = subprocess.run([binary, "report", "-type=json"], input=attack.stdout, capture_output=True, check=True)
    return json.loads(report.stdout)


def fmt(r: dict) -> str:
    lat = r["latencies"]
    ok = r["status_codes"].get("200", 0)
    return (f"{r['throughput']:8.0f} req/s  p50 {lat['50th'] / 1e6:6.2f} ms  p99 {lat['99th'] / 1e6:6.2f} ms  "
            f"({ok}/{r['requests']} HTTP 200)")


def main() -> int:
    vegeta_bin = subprocess.run([str(ROOT / "hack" / "bench-tools.sh")], capture_output=True, text=True,
                                check=True).stdout.strip()
    print(f"machine: {os.cpu_count()} cores; load average at start {loadavg()}; gunicorn gthread "
          f"workers={WORKERS} threads={THREADS}; vegeta on the same machine")
    with ControlPlane(locate()) as plane, plane.api_client() as api, tempfile.TemporaryDirectory() as tmp:
        tmpdir = Path(tmp)
        gpus = [catalogue().resolve(m) for m in MODELS]
        cluster.seed(api, cluster.plan_nodes(10, gpus, 8, "mixed"), "mixed")
        ssa.apply(api, configmap(DEFAULT_CONFIG) | {"metadata": {"name": "default-mig-parted-config",
                  "namespace": "gpu-operator"}}, field_manager="bench")
        for i, config in ((1, "all-1g.10gb"), (2, "all-balanced"), (4, "all-1g.18gb")):
            ssa.apply(api, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"gpu-node-{i}", "labels": {
                "nvidia.com/mig.config": config}}}, field_manager="gpu-operator", force=True)
        store = DirectoryStore(tmpdir / "certs")
        bundle = rotate(store, dns_names=["localhost"], ip_addresses=["127.0.0.1"], publish=lambda b: None).material.bundle
        ca = tmpdir / "certs" / "ca-bundle.crt"
        ours_port, trivial_port = free_ports(2)
        pem = str(store.serving_file)
        ours_argv = [sys.executable, "-m", "migops", "webhook", f"--tls-cert={pem}", f"--tls-key={pem}",
                     f"--port={ours_port}", "--bind-address=127.0.0.1", f"--kubeconfig={plane.admin_kubeconfig}",
                     f"--workers={WORKERS}", f"--threads={THREADS}", "--log-level=warning"]
        trivial_argv = [sys.executable, str(ROOT / "bench" / "_trivial_server.py"), pem, str(trivial_port),
                        str(WORKERS), str(THREADS)]
        ours = spawn(ours_argv, tmpdir / "webhook.log")
        trivial = spawn(trivial_argv, tmpdir / "trivial.log")
        try:
            ours_url, trivial_url = f"https://127.0.0.1:{ours_port}", f"https://127.0.0.1:{trivial_port}"
            _wait_ready(ours_url, bundle, ours[0], ours[1], tmpdir / "webhook.log", 90)
            time.sleep(1.0)
            body = tmpdir / "review.json"
            body.write_bytes(review_body(DEFAULT_CONFIG))
            print(f"\n1. POST /validate, default-config review ({body.stat().st_size} bytes), TLS keep-alive")
            for _ in range(2):  # warm both, and the verdict cache
                vegeta(vegeta_bin, f"{ours_url}/validate", body, ca, rate=200, duration="2s")
                vegeta(vegeta_bin, f"{trivial_url}/validate", body, ca, rate=200, duration="2s")
            sat = {}
            for name, url in (("trivial Flask allow", trivial_url), ("migops webhook", ours_url),
                              ("trivial Flask allow", trivial_url), ("migops webhook", ours_url)):
                r = vegeta(vegeta_bin, f"{url}/validate", body, ca, rate=None)
                sat.setdefault(name, []).append(r)
                print(f"  saturation  {name:<20} {fmt(r)}")
            best = {k: max(r["throughput"] for r in v) for k, v in sat.items()}
            print(f"  ratio at saturation (best of 2 each): migops / trivial = "
                  f"{best['migops webhook'] / best['trivial Flask allow']:.2f}   (target >= 0.9)")
            for rate in (500, 1000):
                for name, url in (("trivial Flask allow", trivial_url), ("migops webhook", ours_url)):
                    print(f"  {rate:4d}/s      {name:<20} {fmt(vegeta(vegeta_bin, f'{url}/validate', body, ca, rate=rate))}")
            print("  (target: p99 <= 5 ms at 500/s; ambition >= 2,000 reviews/s on 2 cores)")

            print(f"\n2. First review of a new ConfigMap (cache miss), default config, {len(MODELS)} GPU models "
                  "on 10 nodes, 3 nodes selecting configs")
            import ssl

            import urllib3

            pool = urllib3.HTTPSConnectionPool("127.0.0.1", ours_port, ssl_context=ssl.create_default_context(
                cadata=bundle.decode()), maxsize=1)
            times = []
            for i in range(80):
                text = DEFAULT_CONFIG + f"\n# revision {i} {uuid.uuid4()}\n"
                data = review_body(text)
                started = time.perf_counter()
                resp = pool.request("POST", "/validate", body=data, headers={"Content-Type": "application/json"})
                times.append((time.perf_counter() - started) * 1e3)
                assert resp.status == 200 and json.loads(resp.data)["response"]["allowed"], resp.data[:300]
            times = times[5:]
            q = statistics.quantiles(times, n=100)
            print(f"  {len(times)} reviews: p50 {statistics.median(times):.1f} ms  p99 {q[98]:.1f} ms  (target < 30 ms)")

            print("\n3. Through the API server: update the MIG ConfigMap (a real write), webhook registered vs not")
            core = k8s.CoreV1Api(api)
            phases: dict[str, list[float]] = {"with webhook": [], "without webhook": []}
            n = 0
            for _ in range(3):
                for phase in ("with webhook", "without webhook"):
                    if phase == "with webhook":
                        register(api, ours_url, bundle, field_manager="bench")
                    else:
                        unregister(api)
                    time.sleep(3.0)  # the API server notices a changed configuration within seconds
                    for _ in range(60):
                        n += 1
                        started = time.perf_counter()
                        core.patch_namespaced_config_map("default-mig-parted-config", "gpu-operator",
                                                         {"metadata": {"labels": {"bench": str(n)}}})
                        phases[phase].append((time.perf_counter() - started) * 1e3)
            unregister(api)
            med = {k: statistics.median(v) for k, v in phases.items()}
            for k, v in phases.items():
                print(f"  {k:<16} median {med[k]:.2f} ms over {len(v)} updates")
            print(f"  ratio with / without = {med['with webhook'] / med['without webhook']:.2f}   (target <= 1.3)")
        finally:
            stop(ours[1], popen=ours[0])
            stop(trivial[1], popen=trivial[0])
    print(f"\nload average at end {loadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The webhook's memory under a flood of distinct adversarial reviews (issue 21 item 2; prints figures).

Once, 80 direct Node reviews with 4 MB nvidia.com/mig.config values grew a worker from 181 to 516 MiB,
never released: the verdict cache's keys held the raw values. Here one `migops webhook` worker (on a
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
The worker's RSS after the flood and its peak (VmHWM) are printed beside the start. Target: within 50 MB
of the start.

Usage: .venv/bin/python bench/webhook_adversarial.py   (BENCH_REVIEWS, default 10000)
"""

from __future__ import annotations

import json
import os
import re
import ssl
import sys
import tempfile
import time
import uuid
from pathlib import Path

import urllib3

from migops.kube import ssa
from migops.local import cluster
from migops.local import webhook as local_webhook
from migops.local.binaries import locate
from migops.local.controlplane import ControlPlane
from migops.local.ports import free_ports
from migops.local.process import stop
from migops.mig.catalogue import catalogue

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CONFIG = (ROOT / "examples" / "nvidia-default-config.yaml").read_text()
REVIEWS = int(os.environ.get("BENCH_REVIEWS", "10000"))
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


def main() -> int:
    print(
        f"machine: {os.cpu_count()} CPUs, load average {loadavg()} at start; {REVIEWS} distinct adversarial reviews",
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
        pem, bundle = local_webhook.certificates(tmpdir / "certs")
        (port,) = free_ports(1)
        argv = local_webhook.command(
            cert=pem, key=pem, port=port, kubeconfig=plane.admin_kubeconfig, workers=1, threads=16
        )
        popen, ref, url = local_webhook.spawn_ready(argv, port, bundle, tmpdir / "webhook.log", 120)
        try:
            (worker,) = [
                int(p)
                for task in Path(f"/proc/{popen.pid}/task").iterdir()
                for p in (task / "children").read_text().split()
            ]
            pool = urllib3.HTTPSConnectionPool(
                "127.0.0.1",
                port,
                ssl_context=ssl.create_default_context(cadata=bundle.decode()),
                maxsize=1,
                timeout=urllib3.Timeout(connect=5, read=60),
                retries=False,
            )

            def post(body: bytes) -> int:
                return pool.request("POST", "/validate", body=body, headers={"Content-Type": "application/json"}).status

            # Warm: every kind of ordinary review once, so the start figure includes what any worker loads.
            for i in range(60):
                post(
                    review(
                        "ConfigMap",
                        {"metadata": {"name": CM_NAME, "namespace": CM_NS}, "data": {"config.yaml": DEFAULT_CONFIG}},
                    )
                )
                post(adversarial(i + 6 * 1000000 if i % 6 != 2 else i))
            time.sleep(1.0)
            start = status_kib(worker, "VmRSS")
            statuses: dict[int, int] = {}
            began = time.monotonic()
            for i in range(REVIEWS):
                code = post(adversarial(10 + i))
                statuses[code] = statuses.get(code, 0) + 1
                if (i + 1) % 2000 == 0:
                    print(
                        f"  {i + 1:6d} reviews: RSS {status_kib(worker, 'VmRSS') / 1024:7.1f} MiB "
                        f"({time.monotonic() - began:.0f}s)",
                        flush=True,
                    )
            time.sleep(1.0)
            end, peak = status_kib(worker, "VmRSS"), status_kib(worker, "VmHWM")
            log_bytes = (tmpdir / "webhook.log").stat().st_size
        finally:
            stop(ref, popen=popen)
    print(f"HTTP statuses: {dict(sorted(statuses.items()))}  (no 5xx expected)")
    print(
        f"worker RSS: start {start / 1024:.1f} MiB, after {REVIEWS} adversarial reviews {end / 1024:.1f} MiB "
        f"(+{(end - start) / 1024:.1f} MiB; target <= +50 MB), peak {peak / 1024:.1f} MiB"
    )
    print(f"webhook log: {log_bytes} bytes for {REVIEWS} reviews (bad requests logged rate-limited)")
    print(f"load average {loadavg()} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())

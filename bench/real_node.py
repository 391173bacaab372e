"""How fast the real node runs a pod (binaries built, root, `make host-packages`).

Per run: realnode.start_cluster (control plane serving pods, kube-controller-manager, kube-scheduler,
containerd, kubelet, kube-proxy) until the Node is Ready; importing a busybox image; the `default`
ServiceAccount appearing (kube-controller-manager; no pod is admitted before); a 2-replica
Deployment until both replicas are Ready; stop + sweep until nothing is left. Prints each run and the
medians. Needs the machine's one real node: fails at once if another runs.
Usage: .venv/bin/python bench/real_node.py [RUNS]  (default 3)
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

from kubernetes import client as k8s

from migops.local import images, nodeclean, realnode
from migops.local.binaries import locate

IMAGE = "migops.local/bench-busybox:1"


def _deployment() -> dict:
    labels = {"app": "bench"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "bench"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "terminationGracePeriodSeconds": 1,
                    "containers": [
                        {"name": "main", "image": IMAGE, "imagePullPolicy": "Never", "command": ["sleep", "3600"]}
                    ],
                },
            },
        },
    }


def run_once(binaries, workdir: Path) -> dict[str, float]:
    t: dict[str, float] = {}
    began = time.monotonic()
    plane, node = realnode.start_cluster(binaries, workdir)
    t["cluster Ready"] = time.monotonic() - began
    try:
        mark = time.monotonic()
        node.load_image(images.busybox_archive(IMAGE))
        t["image import"] = time.monotonic() - mark
        with plane.api_client() as api:
            core, apps = k8s.CoreV1Api(api), k8s.AppsV1Api(api)
            deadline = time.monotonic() + 60
            mark = time.monotonic()
            while not _has_default_sa(core) and time.monotonic() < deadline:
                time.sleep(0.05)
            # kube-controller-manager's serviceaccount controller; ServiceAccount admission waits for it
            t["default ServiceAccount"] = time.monotonic() - mark
            mark = time.monotonic()
            apps.create_namespaced_deployment("default", _deployment())
            while (apps.read_namespaced_deployment("bench", "default").status.ready_replicas or 0) < 2:
                if time.monotonic() - mark > 120:
                    raise TimeoutError("the Deployment did not become Ready in 120 s")
                time.sleep(0.05)
            t["2 replicas Ready"] = time.monotonic() - mark
        t["first pod running from nothing"] = time.monotonic() - began
    finally:
        mark = time.monotonic()
        problems = realnode.stop_cluster(plane, node)
        t["stop + sweep"] = time.monotonic() - mark
    left = nodeclean.leftovers(node.layout.root, node.name)
    if problems or left:
        raise RuntimeError(f"left behind: {problems + left}")
    return t


def _has_default_sa(core: k8s.CoreV1Api) -> bool:
    try:
        core.read_namespaced_service_account("default", "default")
        return True
    except k8s.ApiException:
        return False


def main(runs: int = 3) -> None:
    binaries = locate(echo_build=True)
    results: list[dict[str, float]] = []
    for i in range(runs):
        with tempfile.TemporaryDirectory(prefix="migops-bench-node-") as tmp:
            results.append(run_once(binaries, Path(tmp)))
        print(f"run {i + 1}: " + ", ".join(f"{k} {v:.2f}s" for k, v in results[-1].items()), flush=True)
    print(f"median of {runs}: " + ", ".join(f"{k} {statistics.median(r[k] for r in results):.2f}s" for k in results[0]))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)

"""The product image and the in-cluster deployment (root, `make host-packages`, binaries built).

1. `migops local image`'s build (migops.local.image.build) twice: as the cache stands, then with
   nothing changed (the warm figure); `--cold` first moves the cache aside (base rootfs, dockerd data)
   for a cold figure and puts it back after. Prints each time, the base's share, and the image size.
2. `migops local deploy`'s code on a real-node cluster (realnode.start_cluster, seeded as `local up`
   seeds it): manifests/overlays/local until every workload is Available, RUNS times (a
   `kubectl delete -k` between runs). Needs the machine's one real node.
Usage: .venv/bin/python bench/deploy_image.py [--cold] [RUNS]  (default 2)
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from migops.local import agents, cluster, deploy, image, realnode
from migops.local.binaries import locate
from migops.mig.catalogue import catalogue


def builds(cold: bool) -> image.Built:
    cache = image.cache_dir()
    aside = cache.with_name(cache.name + ".bench-aside")
    if cold and cache.exists():
        cache.rename(aside)
    try:
        for label in ("as cached" if not cold else "cold", "unchanged"):
            built = image.build()
            print(
                f"image build ({label}): {built.base_seconds + built.build_seconds:6.1f}s "
                f"(base rootfs {built.base_seconds:.1f}s)  size {built.size / 2**20:.0f} MiB",
                flush=True,
            )
    finally:
        if cold and aside.exists():
            shutil.rmtree(cache, ignore_errors=True)
            aside.rename(cache)
    return built


def deploys(built: image.Built, runs: int) -> None:
    binaries = locate()
    with tempfile.TemporaryDirectory(prefix="bench-deploy-") as tmp:
        plane, node = realnode.start_cluster(binaries, Path(tmp))
        try:
            node.load_image(built.archive)
            with plane.api_client() as api:
                cluster.seed(api, [], "mixed")
                cluster.apply_real_node(
                    api, cluster.plan_node(node.name, catalogue().resolve("0x233010DE"), 2, "mixed")
                )
                agents.seed_mig_config(api)
                overlay = deploy.OVERLAYS / "local"
                times = []
                for i in range(runs):
                    seconds = deploy.deploy(
                        api, binaries.kubectl, plane.admin_kubeconfig, overlay=overlay, gpus="2x0x233010DE"
                    )
                    times.append(seconds)
                    print(f"deploy run {i + 1}: every workload Available after {seconds:.1f}s", flush=True)
                    subprocess.run(
                        [
                            str(binaries.kubectl),
                            f"--kubeconfig={plane.admin_kubeconfig}",
                            "delete",
                            "-k",
                            str(overlay),
                            "--wait",
                            "--timeout=180s",
                        ],
                        capture_output=True,
                        check=False,
                    )
                print(f"deploy median: {statistics.median(times):.1f}s over {runs} run(s)")
        finally:
            realnode.stop_cluster(plane, node)


def main(argv: list[str]) -> int:
    cold = "--cold" in argv
    runs = int(next((a for a in argv if a.isdigit()), "2"))
    began = time.monotonic()
    built = builds(cold)
    deploys(built, runs)
    print(f"total {time.monotonic() - began:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

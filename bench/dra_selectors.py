"""What judging a ResourceClaim's CEL selectors costs (migops.mig.dra, cel-python): the first claim in a
fresh process (every catalogue model's MIG devices built, every device evaluated), the same claim again
(cached), and a new selector on warm devices; for a claim naming a profile and one reading capacities
with quantity(). Best of 3 fresh interpreters, wall clock; the load average before and after (the
machine is shared). Prints figures, never a verdict.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

RUNS = 3

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
from migops.mig import dra
t1 = time.perf_counter()
expr = sys.argv[1]
def claim(e):
    return {"kind": "ResourceClaim", "metadata": {"name": "c", "namespace": "n"}, "spec": {"devices": {"requests": [
        {"name": "r", "exactly": {"deviceClassName": "mig.nvidia.com", "selectors": [{"cel": {"expression": e}}]}}]}}}
a = time.perf_counter(); dra.claim_requests(claim(expr)); b = time.perf_counter()
dra.claim_requests(claim(expr)); c = time.perf_counter()
dra.claim_requests(claim(expr + " && true")); d = time.perf_counter()
print(json.dumps({"import": t1 - t0, "cold": b - a, "cached": c - b, "new_selector": d - c}))
"""

CASES = {
    "profile ==": "device.attributes['gpu.nvidia.com'].profile == '3g.40gb'",
    "quantity/semver": "device.capacity['gpu.nvidia.com'].memory.isGreaterThan(quantity('30Gi')) && "
    "device.attributes['gpu.nvidia.com'].cudaComputeCapability.compareTo(semver('9.0.0')) >= 0",
    "productName": "device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA H100')",
}


def main() -> None:
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    for name, expr in CASES.items():
        best: dict[str, float] = {}
        for _ in range(RUNS):
            out = subprocess.run([sys.executable, "-c", CHILD, expr], capture_output=True, text=True, check=True)
            for k, v in json.loads(out.stdout).items():
                best[k] = min(best.get(k, v), v)
        print(
            f"{name:16} import {best['import'] * 1000:6.0f} ms  cold claim {best['cold'] * 1000:6.0f} ms  "
            f"cached {best['cached'] * 1000:6.2f} ms  new selector {best['new_selector'] * 1000:6.0f} ms"
        )
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()

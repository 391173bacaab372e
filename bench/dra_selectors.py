"""What judging a ResourceClaim's CEL selectors costs, both ways: migops.mig.dra on the compiled CEL
runtime (cel-expr-python), and the same Kubernetes CEL library on cel-python (pure Python,
tests/dra/celpy_reference.py, installed with the test extra). For the compiled runtime: importing
migops.mig.dra, the first claim in a fresh process (every catalogue model's MIG devices built, every
device evaluated), the same claim again (cached), and a new selector on warm devices (a warm worker's
new claim). For cel-python: its import, and the same new selector on the same warm devices. Best of 3
fresh interpreters, wall clock; the load average before and after (the machine may be shared). Prints
figures, never a verdict.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

RUNS = 3
REFERENCE = Path(__file__).resolve().parents[1] / "tests" / "dra"

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
sys.path.insert(0, sys.argv[2])
from migops.mig import selectors
e0 = time.perf_counter(); import celpy_reference as ref; e1 = time.perf_counter()
devices = [json.loads(k) for k in dra._DEVICES]
def judge_all(select, device_of, e):
    for dev in devices:
        try:
            select(e, device_of(dev))
        except selectors.CelError:
            pass
f0 = time.perf_counter(); judge_all(selectors.selects, lambda d: selectors.cel_device(d, dra.DRIVER), expr + " && 2 == 2")
f1 = time.perf_counter(); judge_all(ref.selects, ref.cel_device, expr + " && 3 == 3"); f2 = time.perf_counter()
print(json.dumps({"import": t1 - t0, "cold": b - a, "cached": c - b, "new_selector": d - c,
                  "celpy_import": e1 - e0, "all_devices": f1 - f0, "celpy_all_devices": f2 - f1, "devices": len(devices)}))
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
            out = subprocess.run(
                [sys.executable, "-c", CHILD, expr, str(REFERENCE)], capture_output=True, text=True, check=True
            )
            for k, v in json.loads(out.stdout).items():
                best[k] = min(best.get(k, v), v)
        print(
            f"{name:16} compiled: import {best['import'] * 1000:5.0f} ms  cold claim {best['cold'] * 1000:5.0f} ms  "
            f"cached {best['cached'] * 1000:5.2f} ms  new claim {best['new_selector'] * 1000:6.1f} ms  "
            f"{best['devices']:.0f} devices {best['all_devices'] * 1000:6.1f} ms | cel-python: import "
            f"(+ the library) {best['celpy_import'] * 1000:5.0f} ms  {best['devices']:.0f} devices "
            f"{best['celpy_all_devices'] * 1000:6.0f} ms  ratio {best['celpy_all_devices'] / best['all_devices']:.0f}x"
        )
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()

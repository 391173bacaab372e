"""Warm start time of the local control plane (binaries already built).

Measures ControlPlane.start() from nothing (new PKI, fresh etcd, kube-apiserver) until
namespace `default` is readable, and stop() until both servers are gone. Prints each run and
the median. Usage: .venv/bin/python bench/controlplane_start.py [RUNS]  (default 3)
"""

from __future__ import annotations

import statistics
import sys
import time

from migops.local.binaries import locate
from migops.local.controlplane import ControlPlane


def main(runs: int = 3) -> None:
    binaries = locate(echo_build=True)
    starts: list[float] = []
    stops: list[float] = []
    for i in range(runs):
        plane = ControlPlane(binaries)
        began = time.monotonic()
        plane.start()
        starts.append(time.monotonic() - began)
        began = time.monotonic()
        plane.stop()
        stops.append(time.monotonic() - began)
        print(f"run {i + 1}: start {starts[-1]:.2f}s, stop {stops[-1]:.2f}s", flush=True)
    print(f"median of {runs}: start {statistics.median(starts):.2f}s, stop {statistics.median(stops):.2f}s")


if __name__ == "__main__":
    from _signals import exit_on_signals  # bench/ is the script's own directory

    exit_on_signals()
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)

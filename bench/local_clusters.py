"""The memory and CPU of N local clusters: how many `migops local up --clusters N` (and the fleet tests)
can hold on the machine.

For each N (default 1, 2, 3): `migops local up --clusters N --nodes 1 --repo DIR --flux|--argocd`
(bench/_fleet.py: the canary runs the tool and serves the fleet repo; each cluster has its etcd,
kube-apiserver, kube-scheduler, webhook, reconciler and one simulated GPU node's agent), then:

  up          : wall seconds until the first release is rolled out to every cluster, and the machine's
                CPU seconds over it (every process: the machine is shared, so an upper bound)
  at rest     : over --rest seconds once up, the CPU the stack's own processes use (cores) and their
                resident memory (shared pages counted per process: an upper bound), per cluster
  down        : `migops local down`, every process gone

Usage: .venv/bin/python bench/local_clusters.py [N ...] [--tool flux|argocd] [--rest 60]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import _fleet


def measure(count: int, tool: str, rest: float) -> dict[str, tuple[float, float]]:
    """Per cluster: (cores at rest, resident MiB); prints the row."""
    with tempfile.TemporaryDirectory(prefix="bench-clusters-") as tmp:
        up = _fleet.up(Path(tmp), count, 1, tool)
        try:
            states = _fleet.clusters(up.home)
            pids = {c: _fleet.pids(s) for c, s in states}
            before = {c: _fleet.cpu_seconds(p) for c, p in pids.items()}
            time.sleep(rest)
            cores = {c: (_fleet.cpu_seconds(p) - before[c]) / rest for c, p in pids.items()}
            memory = {c: _fleet.rss_mib(p) for c, p in pids.items()}
            print(
                f"{count:>2} cluster(s): up {up.seconds:4.0f} s (machine CPU {up.cpu_seconds:4.0f} s); at rest "
                f"{sum(cores.values()):.2f} cores, {sum(memory.values()) / 1024:.2f} GiB resident; {_fleet.load()}",
                flush=True,
            )
            for c in cores:
                print(
                    f"     {c:<10} {cores[c]:.3f} cores  {memory[c]:5.0f} MiB  ({len(pids[c])} processes)", flush=True
                )
            return {c: (cores[c], memory[c]) for c in cores}
        finally:
            _fleet.down(up.home)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("counts", type=int, nargs="*", default=[1, 2, 3], metavar="N")
    parser.add_argument("--tool", choices=("flux", "argocd"), default="flux")
    parser.add_argument("--rest", type=float, default=60, help="seconds measured at rest (default 60)")
    args = parser.parse_args()
    print(f"local clusters with {args.tool} on the canary, 1 simulated GPU node each; {_fleet.load()}", flush=True)
    last: dict[str, tuple[float, float]] = {}
    for count in args.counts:
        last = measure(count, args.tool, args.rest)
    others = [v for c, v in last.items() if c != "canary"]
    if others and "canary" in last:
        cores = sum(c for c, _ in others) / len(others)
        mib = sum(m for _, m in others) / len(others)
        canary_cores, canary_mib = last["canary"]
        print(
            f"per cluster beyond the canary: {cores:.3f} cores and {mib:.0f} MiB at rest; the canary with "
            f"{args.tool}: {canary_cores:.3f} cores and {canary_mib:.0f} MiB"
        )


if __name__ == "__main__":
    from _signals import exit_on_signals  # bench/ is the script's own directory

    exit_on_signals()
    main()

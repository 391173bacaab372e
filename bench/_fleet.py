"""A local fleet for bench/fleet_rollout_agents.py and bench/local_clusters.py: `migops local up --clusters N
--repo DIR --flux|--argocd` as a user runs it, what its processes use (/proc), and `migops local down`.

The fleet repo is the one `make demo-fleet` and tests/fleet_rollouts.py roll out (migops.local.demo_fleet):
the shared configs, every cluster at all-disabled; its fleet.yaml names the clusters, the canary in wave
0 and the others in wave 1. Each cluster's GPU model is the next of demo_fleet.GPUS (A100 40GB, H100,
A100 80GB), one GPU per node; every node is a simulated agent process.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from migops.local import fleet  # noqa: E402
from migops.local.demo_fleet import CLUSTERS, CONFIGS, GPUS, nodes_yaml  # noqa: E402
from migops.local.state import LocalState  # noqa: E402

MIGOPS = Path(sys.executable).parent / "migops"
TICK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def cluster_names(count: int) -> list[str]:
    """The example fleet's names for 3 clusters (so its objects are the ones that run); else canary, c1..."""
    return list(CLUSTERS) if count == len(CLUSTERS) else ["canary", *(f"c{i}" for i in range(1, count))]


def write_repo(root: Path, names: Sequence[str]) -> Path:
    root.mkdir(parents=True)
    waves = "".join(f"  - {{name: {n}, wave: {0 if i == 0 else 1}}}\n" for i, n in enumerate(names))
    (root / "fleet.yaml").write_text(f"version: v1\nclusters:\n{waves}")
    (root / "config.yaml").write_text(CONFIGS)
    for name in names:
        (root / "clusters" / name).mkdir(parents=True)
        (root / "clusters" / name / "config.yaml").write_text(CONFIGS)
        (root / "clusters" / name / "nodes.yaml").write_text(nodes_yaml("all-disabled"))
    return root


@dataclass(frozen=True)
class Up:
    home: Path
    seconds: float  # `migops local up`, until the first release is rolled out to every cluster
    url: str  # the fleet repo, served by the canary
    cpu_seconds: float  # the machine's CPU time (all processes, /proc/stat) while it ran


def up(work: Path, clusters: int, nodes: int, tool: str, timeout: float = 3600) -> Up:
    home = work / "home"
    repo = write_repo(work / "seed", cluster_names(clusters))
    args = ["up", "--clusters", str(clusters), "--nodes", str(nodes), "--gpus-per-node", "1", "--strategy", "mixed"]
    args += [a for g in GPUS for a in ("--gpu", g)] + ["--repo", str(repo), f"--{tool}"]
    began, cpu = time.monotonic(), machine_cpu_seconds()
    done = subprocess.run(
        [str(MIGOPS), "local", *args],
        env={**os.environ, "MIGOPS_HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    seconds, cpu = time.monotonic() - began, machine_cpu_seconds() - cpu
    if done.returncode != 0:
        down(home)
        raise SystemExit(
            f"migops local up failed (exit {done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
    url = next(line.split()[2] for line in done.stdout.splitlines() if line.strip().startswith("fleet repo:"))
    return Up(home, seconds, url, cpu)


def down(home: Path) -> None:
    """`migops local down`: every process the fleet started stops (it fails loudly if one survives)."""
    done = subprocess.run(
        [str(MIGOPS), "local", "down"],
        env={**os.environ, "MIGOPS_HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if done.returncode != 0 or fleet.fleet_dir(home).exists():
        raise SystemExit(f"migops local down failed:\n{done.stdout}\n{done.stderr}")


def clusters(home: Path) -> list[tuple[str, LocalState]]:
    return fleet.running(home)


def tree(pid: int) -> list[int]:
    """The process and its descendants (a webhook's workers, a tool's helpers)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            children = Path(f"/proc/{p}/task/{p}/children").read_text().split()
        except OSError:
            continue
        todo.extend(int(c) for c in children)
    return out


def pids(state: LocalState) -> list[int]:
    """Every live process the cluster's `migops local up` started, with their descendants."""
    return [p for ref in state.processes.values() for p in tree(ref.pid)]


def cpu_seconds(pids: Sequence[int]) -> float:
    """User + system CPU time so far of these processes (those gone count 0)."""
    total = 0
    for p in pids:
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / TICK


def rss_mib(pids: Sequence[int]) -> float:
    """Resident memory now of these processes, MiB (shared pages counted in each: an upper bound)."""
    total = 0
    for p in pids:
        try:
            total += int(Path(f"/proc/{p}/statm").read_text().split()[1])
        except OSError:
            continue
    return total * PAGE / 2**20


def machine_cpu_seconds() -> float:
    """CPU time every process of the machine has used (user, nice, system, irq, softirq, steal)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    busy = sum(int(f) for i, f in enumerate(fields[:8]) if i not in (3, 4))  # not idle, iowait
    return busy / TICK


def load() -> str:
    return "load average " + " ".join(f"{x:.1f}" for x in os.getloadavg())

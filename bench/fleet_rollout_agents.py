"""A fleet rolled out by Flux (or Argo CD), a canary first: commit -> every cluster in sync, how long each
wave waits on the one before, and the reconciler's Node writes per changed node.

`migops local up --clusters 3 --nodes N --repo DIR --flux|--argocd` (bench/_fleet.py: the fleet of `make
demo-fleet`, the canary A100 40GB in wave 0, train H100 and inference A100 80GB in wave 1, one GPU per
node, each node a simulated agent process), then one release moving every node of every cluster from
all-disabled to all-3g: the change and its `migops fleet pin`, pushed at once as a merged pull request
lands them (with Flux, then what `flux reconcile source git` does). From the API servers' own records,
second resolution:

  applied      : when the tool's apply of the release reached the cluster's MigSync (managedFields)
  in sync      : the MigSync's Ready transition at the release (every node's agent reported success)
  wave wait    : the wave's first apply minus the previous wave's last in-sync (the gate the tool holds)
  writes/node  : the cluster's reconciler's successful Node writes (migops_api_writes_total) over the
                 release, per node it changed (the target: 1)

and the stack's resident memory (every process `migops local up` started) once the release is in.

Usage: .venv/bin/python bench/fleet_rollout_agents.py [--nodes 200] [--tool flux|argocd] [--timeout S]
Every simulated node is an agent process (about 80 MiB resident): --nodes is lowered to what the memory
available now holds beside the control planes (the first line says so), so 3 x 200 (about 50 GiB)
runs where the machine has it.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import _fleet
from fleet_rollouts import LocalFleet, applied_at, condition, release, wait_in_sync, when
from gitrepo import Clone

from migops.local import argocd, flux
from migops.local.demo_fleet import CANARY, GOOD, OTHERS


def node_writes(reconciler_url: str) -> float:
    text = urllib.request.urlopen(f"{reconciler_url}/metrics", timeout=30).read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("migops_api_writes_total{") and 'resource="nodes"' in line and 'result="ok"' in line
    )


AGENT_MIB = 90  # one simulated node's agent, resident (about 80 MiB measured), with a margin
STACK_MIB = 4096  # three control planes, webhooks, reconcilers and the tool, and room for the rest


def nodes_memory_holds() -> int:
    """Nodes per cluster the memory available now holds for 3 clusters."""
    available = next(
        int(line.split()[1]) // 1024
        for line in Path("/proc/meminfo").read_text().splitlines()
        if line.startswith("MemAvailable:")
    )
    return max(1, (available - STACK_MIB) // (3 * AGENT_MIB))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=200, help="simulated GPU nodes per cluster (default 200)")
    parser.add_argument("--tool", choices=("flux", "argocd"), default="flux")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds for the release to be in sync")
    args = parser.parse_args()
    nodes = min(args.nodes, nodes_memory_holds())
    manager = flux.FLUX_MANAGER if args.tool == "flux" else argocd.ARGOCD_MANAGER
    lowered = f" ({args.nodes} asked: the memory available holds {nodes})" if nodes < args.nodes else ""
    print(
        f"fleet: 3 clusters x {nodes} simulated nodes{lowered}, 1 GPU each, rolled out by {args.tool}; {_fleet.load()}"
    )
    with tempfile.TemporaryDirectory(prefix="bench-fleet-") as tmp:
        work = Path(tmp)
        up = _fleet.up(work, 3, nodes, args.tool)
        try:
            print(f"migops local up (the first release in): {up.seconds:.0f} s, machine CPU {up.cpu_seconds:.0f} s")
            lf = LocalFleet(up.home, up.url, up.seconds)
            states = dict(_fleet.clusters(up.home))
            wait_in_sync(lf, lf.status()[1][0]["ref"], args.timeout)
            before = {c: node_writes(s.reconciler_url or "") for c, s in states.items()}
            clone = Clone(lf.url, work / "clone")
            change, _ = release(lf, clone, GOOD)  # inventories recorded, committed, pinned, pushed
            pushed_at, began, cpu = datetime.now(UTC), time.monotonic(), _fleet.machine_cpu_seconds()
            if args.tool == "flux":
                stamp = f"reconcile.fluxcd.io/requestedAt={time.time():.6f}"
                lf.kubectl(CANARY, "annotate", "--overwrite", "-n", flux.NAMESPACE, "gitrepository", "mig-fleet", stamp)
            rows = wait_in_sync(lf, change, args.timeout)
            took, cpu = time.monotonic() - began, _fleet.machine_cpu_seconds() - cpu
            report(lf, manager, pushed_at, rows, before, states)
            print(f"push -> every cluster in sync: {took:.0f} s (machine CPU {cpu:.0f} s over it)")
            memory = {c: _fleet.rss_mib(_fleet.pids(s)) for c, s in states.items()}
            print(
                "resident memory of the stack: "
                + ", ".join(f"{c} {m:.0f} MiB" for c, m in memory.items())
                + f" ({sum(memory.values()) / 1024:.1f} GiB, shared pages counted per process); {_fleet.load()}"
            )
        finally:
            _fleet.down(up.home)


def report(lf: LocalFleet, manager: str, pushed_at: datetime, rows: list, before: dict, states: dict) -> None:
    at = {}
    for c in (CANARY, *OTHERS):
        obj = lf.migsync(c)
        at[c] = (applied_at(obj, manager), when(condition(obj, "Ready")["lastTransitionTime"]))
    nodes = {r["cluster"]: r["nodes"] for r in rows}
    print("  cluster    wave  applied after push  in sync after push  apply -> in sync  node writes / node changed")
    for c, (applied, ready) in at.items():
        writes = node_writes(states[c].reconciler_url or "") - before[c]
        print(
            f"  {c:<10} {0 if c == CANARY else 1:>4}  {(applied - pushed_at).total_seconds():>17.0f}s"
            f"  {(ready - pushed_at).total_seconds():>17.0f}s  {(ready - applied).total_seconds():>15.0f}s"
            f"  {writes:.0f} / {nodes[c]} = {writes / max(nodes[c], 1):.2f}"
        )
    gate = min(at[c][0] for c in OTHERS) - at[CANARY][1]
    print(f"wave 1 waits on wave 0: its first apply {gate.total_seconds():.0f} s after the canary was in sync")


if __name__ == "__main__":
    from _signals import exit_on_signals  # bench/ is the script's own directory

    exit_on_signals()
    main()

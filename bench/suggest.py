"""Benchmark of `migops suggest`'s decision (docs/suggest.md): optimality against brute force, against a
per-node greedy like nebuly nos's, and scale. Prints figures next to their targets; no pass/fail.

- Optimality: 200 random small clusters (<= 6 nodes, <= 2 GPUs each, H100 and A100 nodes, <= 30 pending
  pods, some instances in use). Brute force tries every combination of every node's options (the same
  options the solver gets: the MIG core's verdicts and the agent's plans) and serves pods by priority
  with augmenting paths; the solver's (served by priority, GPUs reconfigured, nodes changed) must equal
  the best combination's.
- Greedy: each node in turn takes the option that serves the most of the pods still pending.
- Scale: 1,000 nodes x 8 GPUs, 5,000 pending pods (targets: <= 10 s, <= 1 GiB peak RSS), in a fresh
  interpreter so the peak is the suggestion's own; the proven gap of each stage.

`python bench/suggest.py [--cases N] [--scale-nodes N --scale-pods N]`.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import resource
import subprocess
import sys
import time
from collections import Counter
from dataclasses import replace

from migops.agent.backend import ComputeInstance, GpuInstance, GpuState
from migops.api.objects import LabelSelector
from migops.gitops.desired import FitCache
from migops.gitops.repo import load_repo
from migops.mig.catalogue import catalogue
from migops.mig.fit import fit
from migops.mig.gfd import NodeGpus
from migops.suggest.model import Demand, NodeSupply, Option
from migops.suggest.options import labels_after, node_options
from migops.suggest.propose import propose
from migops.suggest.solve import Limits

H100, A100 = "0x233010DE", "0x20B010DE"
PROFILES = {H100: ("1g.10gb", "2g.20gb", "3g.40gb", "7g.80gb"), A100: ("1g.5gb", "2g.10gb", "3g.20gb", "7g.40gb")}


def _entry(device: str, devices: dict[str, int]) -> str:
    body = "".join(f'        "{p}": {n}\n' for p, n in devices.items())
    return f'    - device-filter: ["{device}"]\n      devices: all\n      mig-enabled: true\n      mig-devices:\n{body}'


def _config(name: str, h100: dict[str, int], a100: dict[str, int]) -> str:
    return f"  {name}:\n" + _entry(H100, h100) + _entry(A100, a100)


CONFIG = "version: v1\nmig-configs:\n" + "".join(
    [
        _config("all-1g", {"1g.10gb": 7}, {"1g.5gb": 7}),
        _config("all-2g", {"2g.20gb": 3}, {"2g.10gb": 3}),
        _config("all-3g", {"3g.40gb": 2}, {"3g.20gb": 2}),
        _config("balanced", {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}, {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}),
        _config("all-7g", {"7g.80gb": 1}, {"7g.40gb": 1}),
    ]
)
CONFIGS = ("all-1g", "all-2g", "all-3g", "balanced", "all-7g")
NODES = "version: v1\nstrategy: mixed\nassignments:\n  - nodeSelector: {matchLabels: {pool: gpu}}\n    config: all-1g\n"
SPEC = load_repo({"config.yaml": CONFIG.encode(), "nodes.yaml": NODES.encode()}, "", "bench")


def make_node(rnd: random.Random, name: str, device: str, count: int, use: float, config: str = "") -> NodeSupply:
    """A node in a config of CONFIGS (random unless given), laid out as the MIG core places it, some
    instances in use."""
    models = (catalogue().resolve(device),) * count
    config = config or rnd.choice(CONFIGS)
    f = fit(SPEC.config, config, NodeGpus(models, True), "mixed")
    states, used = [], Counter()
    for r in f.report.gpus:
        instances = tuple(
            GpuInstance(j, p.profile, p.start, p.size, tuple(ComputeInstance(c, s) for c, s in enumerate(ci)))
            for j, (p, ci) in enumerate(r.instances)
        )
        states.append(GpuState(r.index, True, True, instances))
        used.update(i.profile for i in instances if rnd.random() < use)
    labels = labels_after(kubelet_labels(name, rnd), f.advertisement())
    return NodeSupply(name, labels, NodeGpus(models, True), tuple(states), config, dict(used), {})


ZONES = ("zone-a", "zone-b", "zone-c")


def kubelet_labels(name: str, rnd: random.Random) -> dict[str, str]:
    """What a real GPU node carries besides the pool label: the kubelet's own labels (its hostname, OS,
    architecture), the cloud's zone and instance type, and GFD's machine and driver labels (the
    geometry labels come from the config, by labels_after)."""
    return {
        "pool": "gpu",
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "beta.kubernetes.io/arch": "amd64",
        "topology.kubernetes.io/zone": rnd.choice(ZONES),
        "node.kubernetes.io/instance-type": "p5.48xlarge",
        "nvidia.com/gpu.machine": "PowerEdge-XE9680",
        "nvidia.com/cuda.driver.major": "580",
        "nvidia.com/gpu.deploy.device-plugin": "true",
        "feature.node.kubernetes.io/pci-10de.present": "true",
    }


def make_pods(
    rnd: random.Random, n: int, devices: list[str], select: float = 0.2, weights: tuple[int, ...] = (1, 1, 1, 1)
) -> list[Demand]:
    pods = []
    for i in range(n):
        device = rnd.choice(devices)
        profile = rnd.choices(PROFILES[device], weights)[0]
        selectors: tuple[LabelSelector, ...] = ()
        if rnd.random() < select:
            product = catalogue().resolve(device).product
            selectors = (LabelSelector((("nvidia.com/gpu.product", product),)),)
        pods.append(Demand("bench", f"p{i:05d}", frozenset({profile}), 1, rnd.choice((0, 0, 100)), selectors))
    return pods


def small(rnd: random.Random) -> tuple[list[NodeSupply], list[Demand]]:
    nodes = [
        make_node(rnd, f"n{i}", rnd.choice((H100, A100)), rnd.randint(1, 2), 0.15) for i in range(rnd.randint(1, 6))
    ]
    return nodes, make_pods(rnd, rnd.randint(0, 30), sorted({n.gpus.gpus[0].device_id for n in nodes}))


# ------------------------------------------------------------------------------ the references


def _options(nodes: list[NodeSupply]) -> list[tuple[Option, ...]]:
    cache = FitCache()
    return [node_options(n, SPEC, "mixed", CONFIGS, cache)[0] for n in nodes]


def _serve(pods: list[Demand], slots: dict[tuple[int, str], int], able) -> list[Demand]:
    """Pods (count 1) matched to slots, higher priority first, by augmenting paths: the matching is
    lexicographically maximal by priority (a transversal matroid: greedy in weight order is optimal)."""
    holder: dict[tuple[int, str, int], Demand] = {}
    served = []

    def augment(d: Demand, seen: set) -> bool:
        for slot in able(d):
            for unit in range(slots.get(slot, 0)):
                key = (*slot, unit)
                if key in seen:
                    continue
                seen.add(key)
                if key not in holder or augment(holder[key], seen):
                    holder[key] = d
                    return True
        return False

    for d in sorted(pods, key=lambda d: -d.priority):
        if augment(d, set()):
            served.append(d)
    return served


def _key(served: list[Demand], tiers: list[int], gpus: int, nodes: int) -> tuple:
    by = Counter(d.priority for d in served)
    return (*(by[t] for t in tiers), -gpus, -nodes)


def brute(nodes: list[NodeSupply], pods: list[Demand], tiers: list[int], opts) -> tuple:
    best = None
    for combo in itertools.product(*(range(len(o)) for o in opts)):
        chosen = [opts[i][k] for i, k in enumerate(combo)]
        slots = {(i, p): n for i, o in enumerate(chosen) for p, n in o.free.items()}

        def able(d, chosen=chosen):
            return [
                (i, p) for i, o in enumerate(chosen) if d.matches(o.labels) for p in sorted(d.keys) if o.free.get(p)
            ]

        served = _serve(pods, slots, able)
        key = _key(served, tiers, sum(len(o.gpus) for o in chosen), sum(o.changed for o in chosen))
        best = key if best is None or key > best else best
    return best


def greedy(nodes: list[NodeSupply], pods: list[Demand], tiers: list[int], opts) -> tuple:
    """nos's way: node by node, the option that serves the most of the pods still pending."""
    left = list(pods)
    served_all: list[Demand] = []
    gpus = changed = 0
    for i, o in enumerate(opts):
        best = None
        for k, option in enumerate(o):
            slots = {(i, p): n for p, n in option.free.items()}
            got = _serve(
                left,
                slots,
                lambda d, option=option: [
                    (i, p) for p in sorted(d.keys) if option.free.get(p) and d.matches(option.labels)
                ],
            )
            if best is None or len(got) > len(best[1]):
                best = (k, got)
        k, got = best
        gpus += len(o[k].gpus)
        changed += o[k].changed
        served_all += got
        ids = {id(d) for d in got}
        left = [d for d in left if id(d) not in ids]
    return _key(served_all, tiers, gpus, changed)


def ours(nodes: list[NodeSupply], pods: list[Demand], tiers: list[int]) -> tuple:
    p = propose(SPEC, nodes, pods, "mixed", Limits(time_limit=10))
    return _key([x.demand for x in p.placed], tiers, p.gpus, len(p.changes)), p


# ------------------------------------------------------------------------------------ figures


def optimality(cases: int) -> None:
    rnd = random.Random(20261201)
    equal = better = worse_than_greedy = 0
    strictly: list[str] = []
    took = []
    mismatches = []
    served_ours = served_greedy = flat_worse = flat_better = 0
    for case in range(cases):
        nodes, pods = small(rnd)
        tiers = sorted({d.priority for d in pods}, reverse=True)
        opts = _options(nodes)
        t0 = time.perf_counter()
        got, proposal = ours(nodes, pods, tiers)
        took.append(time.perf_counter() - t0)
        ref = brute(nodes, pods, tiers, opts)
        g = greedy(nodes, pods, tiers, opts)
        # The same pods at one priority: then "served" is a plain count, for greedy and solver alike.
        flat = [replace(d, priority=0) for d in pods]
        flat_ours = ours(nodes, flat, [0])[0][0]
        flat_greedy = greedy(nodes, flat, [0], opts)[0]
        flat_worse += flat_ours < flat_greedy
        flat_better += flat_ours > flat_greedy
        served_ours += flat_ours
        served_greedy += flat_greedy
        if got == ref:
            equal += 1
        else:
            mismatches.append((case, got, ref))
        if got[: len(tiers)] > g[: len(tiers)]:
            better += 1
            strictly.append(f"case {case}: by priority {got[: len(tiers)]} vs greedy {g[: len(tiers)]}")
        elif got[: len(tiers)] < g[: len(tiers)]:
            worse_than_greedy += 1
    print(f"\nOptimality, {cases} random small clusters (<= 6 nodes, <= 2 GPUs, H100 + A100, <= 30 pods, some in use)")
    print(f"  equal to the brute-force optimum (served by priority, GPUs, nodes): {equal} / {cases}   target: all")
    for m in mismatches[:5]:
        print(f"    MISMATCH case {m[0]}: solver {m[1]} brute force {m[2]}")
    print(f"  served >= per-node greedy (nos-like), by priority: {cases - worse_than_greedy} / {cases}   target: all")
    print(f"  strictly better than greedy: {better} cases" + (f" (e.g. {'; '.join(strictly[:3])})" if strictly else ""))
    print(
        f"  the same pods at one priority: served >= greedy in {cases - flat_worse} / {cases}, strictly more in "
        f"{flat_better}; pods served in all: solver {served_ours}, greedy {served_greedy}"
    )
    took.sort()
    print(f"  solve time per case: median {took[len(took) // 2] * 1e3:.0f} ms, max {took[-1] * 1e3:.0f} ms")


def scale(nodes_n: int, pods_n: int, hard: bool) -> None:
    rnd = random.Random(7)
    t0 = time.perf_counter()
    if hard:
        # Random configs, 5% of instances in use, and pods that need two devices: no two nodes are
        # alike to the solver (one choice per node), and the demand is beyond what fits.
        nodes = [make_node(rnd, f"node-{i:04d}", (H100, A100)[i % 2], 8, 0.05) for i in range(nodes_n)]
        pods = make_pods(rnd, pods_n, [H100, A100], weights=(1, 3, 3, 2))
        pods = [replace(d, count=2) if i % 5 == 0 else d for i, d in enumerate(pods)]
    else:
        # Every node starts all-1g with a few instances in use; the demand is mostly larger profiles,
        # so serving it means reconfiguring many nodes (and choosing which).
        nodes = [make_node(rnd, f"node-{i:04d}", (H100, A100)[i % 2], 8, 0.01, "all-1g") for i in range(nodes_n)]
        pods = make_pods(rnd, pods_n, [H100, A100], weights=(3, 3, 3, 1))
    built = time.perf_counter() - t0
    t0, c0 = time.perf_counter(), time.process_time()
    p = propose(SPEC, nodes, pods, "mixed", Limits(time_limit=10.0))
    took, cpu = time.perf_counter() - t0, time.process_time() - c0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        json.dumps(
            {
                "seconds": took,
                "cpu_seconds": cpu,
                "load": os.getloadavg()[0],
                "solver_seconds": p.seconds,
                "built": built,
                "peak_mib": peak,
                "served": len(p.placed),
                "pods": pods_n,
                "changes": len(p.changes),
                "gpus": p.gpus,
                "stages": [[s.name, s.value, s.bound, s.optimal] for s in p.stages],
            }
        )
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", type=int, default=200)
    ap.add_argument("--scale-nodes", type=int, default=1000)
    ap.add_argument("--scale-pods", type=int, default=5000)
    ap.add_argument("--scale-only", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--hard", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.scale_only:
        scale(args.scale_nodes, args.scale_pods, args.hard)
        return
    optimality(args.cases)
    for hard in (False, True):
        _scale_figures(args, hard)


def _scale_figures(args: argparse.Namespace, hard: bool) -> None:
    out = subprocess.run(
        [
            sys.executable,
            __file__,
            "--scale-only",
            "--scale-nodes",
            str(args.scale_nodes),
            "--scale-pods",
            str(args.scale_pods),
            *(["--hard"] if hard else []),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    r = json.loads(out.stdout.strip().splitlines()[-1])
    what = (
        "random configs, 5% in use, 1 in 5 pods needs 2 devices (every node its own choice)"
        if hard
        else "all-1g, 1% in use, mostly larger profiles asked"
    )
    print(f"\nScale: {args.scale_nodes} nodes x 8 GPUs (H100 + A100), {args.scale_pods} pending pods; {what}")
    print(
        f"  proposal (options + solve, limit 10 s): {r['seconds']:.2f} s wall, {r['cpu_seconds']:.2f} s CPU "
        f"(load average {r['load']:.1f} on {os.cpu_count()} cores)   target: <= 10 s"
    )
    print(f"  peak RSS of the process: {r['peak_mib']:.0f} MiB   target: <= 1024 MiB")
    print(f"  served {r['served']} of {r['pods']} pods; {r['changes']} nodes, {r['gpus']} GPUs reconfigured")
    for name, value, bound, optimal in r["stages"]:
        print(f"  stage {name}: {value} (bound {bound}, gap {abs(bound - value)}{', optimal' if optimal else ''})")


if __name__ == "__main__":
    main()

"""Benchmark of the agent's diff apply on a simulated 8-GPU H100 node, against mig-parted's approach.

For each geometry change: the time to plan it (validate on the node + per-GPU diff), and the driver
calls it takes (GPU- and compute-instance destroys and creates) with the GPU instances kept, for

  migops      the agent's plan (plan_change: keep what can stay, create at explicit placements),
  mig-parted  clear every GPU whose profile counts differ, then recreate everything largest-first.

Both are executed on simulated GPUs (which refuse what hardware refuses) and counted there.
Prints figures and ratios; no pass/fail.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from migops.agent.plan import desired_from_result, matches, plan_gpu  # noqa: E402
from migops.agent.simulated import SimulatedBackend, parse_gpus  # noqa: E402
from migops.mig.spec import parse_config  # noqa: E402
from migops.mig.validate import validate_on_node  # noqa: E402

CONFIG = (
    (ROOT / "examples" / "nvidia-default-config.yaml").read_text().rstrip("\n")
    + """
  keep-3g:
    - devices: all
      mig-enabled: true
      mig-devices: {"1g.10gb": 4, "3g.40gb": 1}
  repartition-3g:
    - devices: all
      mig-enabled: true
      mig-devices: {"1g.10gb": 2, "2g.20gb": 1, "1c.3g.40gb": 3}
  gpu3-differs:
    - devices: [0, 1, 2, 4, 5, 6, 7]
      mig-enabled: true
      mig-devices: {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}
    - devices: [3]
      mig-enabled: true
      mig-devices: {"1g.10gb": 4, "3g.40gb": 1}
"""
)
CHANGES = [
    ("all-balanced", "all-1g.10gb"),
    ("all-1g.10gb", "all-balanced"),
    ("all-balanced", "all-3g.40gb"),
    ("all-3g.40gb", "all-balanced"),
    ("all-balanced", "keep-3g"),
    ("all-2g.20gb", "all-balanced"),
    ("all-balanced", "repartition-3g"),
    ("all-balanced", "gpu3-differs"),
    ("all-1g.10gb", "all-2g.20gb"),
]
MUTATING = ("create_gpu_instance", "create_compute_instance", "destroy_compute_instance", "destroy_gpu_instance")


def desired(config, name: str, models):
    report = validate_on_node(config, name, models)
    assert report.valid, report.problems
    return [desired_from_result(r) for r in report.gpus]


def run_plan(backend, goal) -> None:
    for d in goal:
        plan = plan_gpu(backend.read(d.index), d)
        created = {}
        for s in plan.steps:
            if s.op == "destroy_ci":
                backend.destroy_compute_instance(s.gpu, s.gi, s.ci)
            elif s.op == "destroy_gi":
                backend.destroy_gpu_instance(s.gpu, s.gi)
            elif s.op == "create_gi":
                created[s.placement] = backend.create_gpu_instance(s.gpu, s.placement.profile, s.placement.start)
            else:
                backend.create_compute_instance(s.gpu, s.gi if s.gi is not None else created[s.placement], s.slices)


def run_mig_parted(backend, goal) -> None:
    """Skip GPUs whose profile counts already match; clear the others; create largest-first."""
    for d in goal:
        state = backend.read(d.index)
        if matches(state, d):
            continue
        for inst in state.instances:
            for ci in inst.compute:
                backend.destroy_compute_instance(d.index, inst.id, ci.id)
            backend.destroy_gpu_instance(d.index, inst.id)
        for placement, sizes in d.instances:  # the validator's layout: largest first, no fragmentation
            gi = backend.create_gpu_instance(d.index, placement.profile, placement.start)
            for c in sizes:
                backend.create_compute_instance(d.index, gi, c)


def counted(backend) -> Counter:
    total: Counter = Counter()
    for i in range(8):
        total.update({k: v for k, v in backend.ops(i).items() if k in MUTATING})
    return total


def node_at(tmp: str, config, models, start: str) -> SimulatedBackend:
    """Simulated GPUs with MIG on and config `start` applied."""
    b = SimulatedBackend(Path(tmp) / "gpus.json", models)
    for i in range(len(models)):
        b.set_mig_mode(i, True)
    b.reset(list(range(len(models))))
    run_plan(b, desired(config, start, models))
    return b


def trial(config, models, start: str, goal: str, approach) -> tuple[Counter, int, set[int]]:
    with tempfile.TemporaryDirectory() as tmp:
        b = node_at(tmp, config, models, start)
        before_ids = {(i, inst.id) for i in range(8) for inst in b.read(i).instances}
        before = counted(b)
        target = desired(config, goal, models)
        approach(b, target)
        assert all(matches(b.read(d.index), d) for d in target)
        after = counted(b)
        after_ids = {(i, inst.id) for i in range(8) for inst in b.read(i).instances}
        touched = {i for i in range(8) if b.ops(i) != {}}
        return after - before, len(before_ids & after_ids), touched


def main() -> int:
    config = parse_config(CONFIG)
    models = parse_gpus("8x0x233010DE")
    print("agent diff apply, simulated node with 8 x H100-SXM5-80GB (0x233010DE)")
    print("  driver calls = GPU/compute-instance destroys + creates; kept = GPU instances left in place\n")
    header = (
        f"  {'change':<34} {'plan ms (p50/p90)':>17}  {'migops d/c':>10} {'kept':>4}  "
        f"{'mig-parted d/c':>14} {'kept':>4}  {'calls ratio':>11}"
    )
    print(header)
    totals = Counter()
    for start, goal in CHANGES:
        with tempfile.TemporaryDirectory() as tmp:
            b = node_at(tmp, config, models, start)
            states = [b.read(i) for i in range(8)]
        times = []
        for _ in range(60):
            t0 = time.perf_counter()
            goal_now = desired(config, goal, models)
            for s, d in zip(states, goal_now):
                plan_gpu(s, d)
            times.append((time.perf_counter() - t0) * 1000)
        ours, kept_ours, _ = trial(config, models, start, goal, run_plan)
        theirs, kept_theirs, _ = trial(config, models, start, goal, run_mig_parted)
        d_o = ours["destroy_gpu_instance"] + ours["destroy_compute_instance"]
        c_o = ours["create_gpu_instance"] + ours["create_compute_instance"]
        d_t = theirs["destroy_gpu_instance"] + theirs["destroy_compute_instance"]
        c_t = theirs["create_gpu_instance"] + theirs["create_compute_instance"]
        totals.update({"ours": d_o + c_o, "theirs": d_t + c_t, "kept_ours": kept_ours, "kept_theirs": kept_theirs})
        q = statistics.quantiles(times, n=10, method="inclusive")
        ratio = f"{(d_t + c_t) / (d_o + c_o):.2f}x" if d_o + c_o else "-"
        print(
            f"  {start + ' -> ' + goal:<34} {statistics.median(times):>8.2f}/{q[-1]:<8.2f}  "
            f"{d_o:>4}/{c_o:<5} {kept_ours:>4}  {d_t:>7}/{c_t:<6} {kept_theirs:>4}  {ratio:>11}"
        )
    print(
        f"\n  all changes: migops {totals['ours']} driver calls, {totals['kept_ours']} GPU instances kept; "
        f"mig-parted approach {totals['theirs']} calls, {totals['kept_theirs']} kept "
        f"({totals['theirs'] / totals['ours']:.2f}x the calls)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Trace-driven benchmark of geometry decisions (docs/suggest.md): one synthetic workload replayed over
simulated time on the same GPU nodes with four ways of choosing their MIG configs, measured by what a
cluster gains: how long pods wait, how many GPUs are in use, what it costs in reconfigurations.

The workload (no public MIG job trace is at hand; every parameter is here and in the printed header):
- `--nodes` nodes x 8 H100-80GB GPUs (8 x 8 = 64 GPUs by default), configs all-1g, all-2g, all-3g,
  balanced (2 x 1g, 2g, 3g) and all-7g, as in bench/suggest.py.
- Pods arrive as a Poisson process for `--hours` hours (48), each asking for one MIG device. The mix
  turns every 6 hours between an inference phase (1g 60%, 2g 25%, 3g 10%, 7g 5%) and a training phase
  (1g 10%, 2g 15%, 3g 35%, 7g 40%), as a day of serving and a night of training; in each phase the
  arrival rate offers `--load` (0.75) of the GPUs' compute slices. Run times are exponential with a
  mean of 60 minutes. Pods start first come, first served per profile (a pod never waits for another
  profile's), on the first node in name order with a free instance of its profile.
- A node whose config changes is paused for 2 minutes (the agent pauses the device plugin): pods running
  on it go on, none start there; instances the agent's plan keeps keep their pods.

The four ways:
- (a) static: every node `balanced`, the common default; never changed.
- (b) greedy, as nebuly nos decides: every minute (its batching window), node by node, the config
  (whose plan destroys no instance in use, knowing exactly which are) that serves the most pending pods,
  applied at once, without review.
- (c) migops suggest through the reconciler's path: every `--every` minutes (15) a proposal for the
  pending pods (`migops.suggest.propose`, seeing what the device plugin shows: which profiles are in
  use, not which instance); it becomes nodes.yaml after a `--review` delay (10 minutes), then the agent
  applies it with its busy-aware plan, retrying each minute while the plan would end a running pod.
  One proposal is under review at a time.
- (d) the hindsight-best static partition: every split of the nodes between the configs is tried on the
  whole trace and the one with the lowest mean wait kept -- the bound for any static plan, known only
  after the fact.

Reported per way: pod waiting time (median, p95, mean; pods still waiting at the end count with their
wait so far), GPUs in use (time average of GPUs with a running pod), node reconfigurations, GPUs
reconfigured, and instances destroyed while in use (0 by construction for all four; counted, not
assumed).

`python bench/suggest_trace.py [--nodes N --hours H --load L --every M --review M --seed S]`.
"""

from __future__ import annotations

import argparse
import dataclasses
import heapq
import itertools
import math
import os
import random
import statistics
import time
from collections import Counter, deque
from dataclasses import dataclass, field

from migops.agent.backend import ComputeInstance, GpuInstance, GpuState
from migops.agent.plan import desired_from_result, plan_gpu
from migops.gitops.desired import FitCache
from migops.gitops.repo import load_repo
from migops.mig.catalogue import catalogue
from migops.mig.fit import fit
from migops.mig.gfd import NodeGpus
from migops.suggest.model import Demand, NodeSupply
from migops.suggest.options import labels_after, node_options
from migops.suggest.propose import propose
from migops.suggest.solve import Limits, require_solver

H100 = "0x233010DE"
CONFIGS = {
    "all-1g": {"1g.10gb": 7},
    "all-2g": {"2g.20gb": 3},
    "all-3g": {"3g.40gb": 2},
    "balanced": {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1},
    "all-7g": {"7g.80gb": 1},
}
PROFILES = ("1g.10gb", "2g.20gb", "3g.40gb", "7g.80gb")
SLICES = {"1g.10gb": 1, "2g.20gb": 2, "3g.40gb": 3, "7g.80gb": 7}
PHASES = ((0.60, 0.25, 0.10, 0.05), (0.10, 0.15, 0.35, 0.40))  # inference, training
PHASE_HOURS = 6
MEAN_MINUTES = 60.0
PAUSE = 120.0  # seconds a reconfigured node starts no pod
RETRY = 60.0  # seconds between the agent's attempts while its plan would end a running pod
GPUS = 8


def _config_yaml() -> str:
    out = ["version: v1", "mig-configs:"]
    for name, devices in CONFIGS.items():
        body = "".join(f'          "{p}": {n}\n' for p, n in devices.items())
        out.append(f"  {name}:\n    - devices: all\n      mig-enabled: true\n      mig-devices:\n{body.rstrip()}")
    return "\n".join(out) + "\n"


SPEC = load_repo(
    {"config.yaml": _config_yaml().encode(), "nodes.yaml": b"version: v1\nstrategy: mixed\nassignments: []\n"},
    "",
    "trace",
)
MODEL = catalogue().resolve(H100)
NODE_GPUS = NodeGpus((MODEL,) * GPUS, True)


@dataclass
class Pod:
    id: int
    profile: str
    arrival: float
    duration: float
    start: float | None = None


def workload(rnd: random.Random, hours: float, load: float) -> list[Pod]:
    """One node's share of the arrivals (the cluster's is one such stream per node, superposed)."""
    capacity = GPUS * 7  # compute slices of one node
    pods: list[Pod] = []
    t = 0.0
    while t < hours * 3600:
        mix = PHASES[int(t // (PHASE_HOURS * 3600)) % len(PHASES)]
        mean_slices = sum(w * SLICES[p] for w, p in zip(mix, PROFILES))
        rate = load * capacity / (mean_slices * MEAN_MINUTES * 60)  # per second, per node
        t += rnd.expovariate(rate)
        if t >= hours * 3600:
            break
        profile = rnd.choices(PROFILES, mix)[0]
        pods.append(Pod(len(pods), profile, t, rnd.expovariate(1 / (MEAN_MINUTES * 60))))
    return pods


# ---------------------------------------------------------------------------------------- the cluster


def _layout(config: str) -> tuple[GpuState, ...]:
    f = fit(SPEC.config, config, NODE_GPUS, "mixed")
    return tuple(
        GpuState(
            r.index,
            True,
            True,
            tuple(
                GpuInstance(j, p.profile, p.start, p.size, tuple(ComputeInstance(c, s) for c, s in enumerate(ci)))
                for j, (p, ci) in enumerate(r.instances)
            ),
        )
        for r in f.report.gpus
    )


@dataclass
class Node:
    name: str
    config: str
    states: list[GpuState]
    busy: dict[tuple[int, int], int] = field(default_factory=dict)  # (gpu, start) -> pod id
    paused_until: float = 0.0
    next_id: int = 100

    def free(self, profile: str, now: float) -> tuple[int, int] | None:
        if now < self.paused_until:
            return None
        for s in self.states:
            for i in s.instances:
                if i.profile == profile and (s.index, i.start) not in self.busy:
                    return s.index, i.start
        return None

    def with_pids(self) -> list[GpuState]:
        return [
            dataclasses.replace(
                s,
                instances=tuple(
                    dataclasses.replace(i, pids=(1,) if (s.index, i.start) in self.busy else ()) for i in s.instances
                ),
            )
            for s in self.states
        ]

    def used(self) -> Counter[str]:
        by = {(s.index, i.start): i.profile for s in self.states for i in s.instances}
        return Counter(by[k] for k in self.busy)


@dataclass
class Stats:
    reconfigurations: int = 0
    gpus: int = 0
    destroyed_busy: int = 0
    refused: int = 0  # attempts the agent refused (its plan would end a running pod)
    proposed: int = 0  # node changes merged into nodes.yaml


def apply(node: Node, config: str, now: float, stats: Stats) -> bool:
    """The agent's apply: every GPU planned with what runs on it; refused when a plan would end a pod."""
    f = fit(SPEC.config, config, NODE_GPUS, "mixed")
    plans = [plan_gpu(s, desired_from_result(r)) for s, r in zip(node.with_pids(), f.report.gpus)]
    if any(p.busy or p.error for p in plans):
        stats.refused += 1
        return False
    states = []
    for s, p in zip(node.states, plans):
        stats.destroyed_busy += sum(1 for i in p.must_go if (s.index, i.start) in node.busy)
        if not p.touches:
            states.append(s)
            continue
        stats.gpus += 1
        kept = {(i.start, i.size, i.profile): i for i in s.instances}
        new = []
        for placement, ci in p.target:
            old = kept.get((placement.start, placement.size, placement.profile))
            if old is not None and old in p.keep:
                new.append(old)
                continue
            node.next_id += 1
            compute = tuple(ComputeInstance(c, z) for c, z in enumerate(ci))
            new.append(GpuInstance(node.next_id, placement.profile, placement.start, placement.size, compute))
        states.append(dataclasses.replace(s, instances=tuple(new)))
    node.states, node.config = states, config
    node.paused_until = now + PAUSE
    stats.reconfigurations += 1
    return True


# -------------------------------------------------------------------------------------- the simulator


class Sim:
    def __init__(self, pods: list[Pod], configs: list[str]) -> None:
        self.pods = [dataclasses.replace(p) for p in pods]
        self.nodes = [Node(f"gpu-{i:02d}", c, list(_layout(c))) for i, c in enumerate(configs)]
        self.pending: dict[str, deque[Pod]] = {p: deque() for p in PROFILES}
        self.events: list[tuple[float, int, str, object]] = []
        self.seq = itertools.count()
        self.stats = Stats()
        self.now = 0.0
        self.in_use_time = 0.0  # GPU-seconds with a running pod
        for p in self.pods:
            self.at(p.arrival, "arrive", p)

    def at(self, when: float, kind: str, what: object) -> None:
        heapq.heappush(self.events, (when, next(self.seq), kind, what))

    def gpus_in_use(self) -> int:
        return sum(len({g for g, _ in n.busy}) for n in self.nodes)

    def schedule(self) -> None:
        for profile, queue in self.pending.items():
            while queue:
                found = next(((n, slot) for n in self.nodes if (slot := n.free(profile, self.now))), None)
                if found is None:
                    break
                node, slot = found
                pod = queue.popleft()
                pod.start = self.now
                node.busy[slot] = pod.id
                self.at(self.now + pod.duration, "finish", (node, slot))

    def run(self, until: float, policy: object = None) -> None:
        last = 0.0
        while self.events and self.events[0][0] <= until:
            when, _, kind, what = heapq.heappop(self.events)
            self.in_use_time += self.gpus_in_use() * (when - last)
            last = self.now = when
            if kind == "arrive":
                self.pending[what.profile].append(what)  # type: ignore[union-attr]
            elif kind == "finish":
                node, slot = what  # type: ignore[misc]
                del node.busy[slot]
            elif kind == "resume":
                pass  # a paused node takes pods again
            elif policy is not None:
                policy.event(self, kind, what)  # type: ignore[attr-defined]
            self.schedule()
        self.in_use_time += self.gpus_in_use() * (until - last)
        self.now = until

    def waits(self, until: float) -> list[float]:
        return [(p.start if p.start is not None else until) - p.arrival for p in self.pods if p.arrival <= until]


# -------------------------------------------------------------------------------------- the policies


class Greedy:
    """nos's way: every minute, node by node, the config that serves the most pending pods, at once."""

    def __init__(self, sim: Sim, until: float, every: float = 60.0) -> None:
        self.cache = FitCache()
        for t in range(int(every), int(until), int(every)):
            sim.at(float(t), "decide", None)

    def event(self, sim: Sim, kind: str, what: object) -> None:
        left = Counter({p: len(q) for p, q in sim.pending.items()})
        if not +left:
            return
        for node in sim.nodes:
            supply = _supply(node, exact=True)
            options = node_options(supply, SPEC, "mixed", list(CONFIGS), self.cache)[0]

            def serves(o):
                return sum(min(left[p], o.free.get(p, 0)) for p in PROFILES)

            best = max(options, key=lambda o: (serves(o), -len(o.gpus), not o.changed))
            if best.changed and serves(best) > serves(options[0]) and apply(node, best.config, sim.now, sim.stats):
                sim.at(sim.now + PAUSE, "resume", None)
            chosen = best if node.config == best.config else options[0]
            for p in PROFILES:
                left[p] -= min(left[p], chosen.free.get(p, 0))


class Suggest:
    """migops suggest: a proposal every `every` seconds, merged after `review`, applied by the agent."""

    def __init__(self, sim: Sim, until: float, every: float, review: float) -> None:
        self.review, self.reviewing, self.cache = review, False, FitCache()
        self.assigned = {n.name: n.config for n in sim.nodes}
        self.waiting: dict[str, str] = {}  # node -> config the agent has yet to apply
        for t in range(int(every), int(until), int(every)):
            sim.at(float(t), "decide", None)

    def event(self, sim: Sim, kind: str, what: object) -> None:
        if kind == "decide" and not self.reviewing:
            demands = [
                Demand("trace", f"p{p.id}", frozenset({p.profile})) for queue in sim.pending.values() for p in queue
            ]
            if demands:
                supply = [_supply(n, exact=False, assigned=self.assigned[n.name]) for n in sim.nodes]
                proposal = propose(SPEC, supply, demands, "mixed", Limits(time_limit=30.0), self.cache)
                if proposal.changes:
                    self.reviewing = True
                    # A merge at once still comes after the pods of this instant are placed.
                    sim.at(sim.now + max(self.review, 1e-3), "merge", {c.node: c.config for c in proposal.changes})
        elif kind == "merge":
            self.reviewing = False
            sim.stats.proposed += len(what)  # type: ignore[arg-type]
            self.assigned.update(what)  # type: ignore[arg-type]
            self.waiting.update(what)  # type: ignore[arg-type]
            self._apply(sim)
        elif kind == "retry":
            self._apply(sim)

    def _apply(self, sim: Sim) -> None:
        for node in sim.nodes:
            want = self.waiting.get(node.name)
            if want is None:
                continue
            if want == node.config or apply(node, want, sim.now, sim.stats):
                del self.waiting[node.name]
                sim.at(sim.now + PAUSE, "resume", None)
        if self.waiting:
            sim.at(sim.now + RETRY, "retry", None)


def _supply(node: Node, exact: bool, assigned: str | None = None) -> NodeSupply:
    """The node as suggest reads it: the agent's layout, and what is in use -- exactly (which instance,
    as nos knows its own slices), or as the device plugin shows it (which profiles)."""
    f = fit(SPEC.config, node.config, NODE_GPUS, "mixed")
    labels = labels_after({"kubernetes.io/hostname": node.name}, f.advertisement())
    held = tuple(
        (s.index, i.profile, i.start) for s in node.states for i in s.instances if (s.index, i.start) in node.busy
    )
    used = {} if exact else dict(node.used())
    claimed = held if exact else ()
    return NodeSupply(
        node.name, labels, NODE_GPUS, tuple(node.states), assigned or node.config, used, {}, (), (), claimed
    )


# ------------------------------------------------------------------------------------ static policies


def _queue_waits(arrivals: list[Pod], servers: int, until: float) -> list[float]:
    """FIFO with `servers` identical instances: each pod's wait (until the end if it never starts)."""
    if servers == 0:
        return [until - p.arrival for p in arrivals]
    free = [0.0] * servers
    out = []
    for p in arrivals:
        t = max(p.arrival, heapq.heappop(free))
        out.append(min(t, until) - p.arrival)
        heapq.heappush(free, t + p.duration if t < until else math.inf)
    return out


def hindsight_best(pods: list[Pod], nodes: int, until: float) -> tuple[tuple[str, ...], list[float]]:
    """Every split of the nodes between the configs: per profile the pods form their own FIFO queue over
    that profile's instances, so each split's waits come from per-profile queues worked out once."""
    by_profile = {p: [x for x in pods if x.profile == p] for p in PROFILES}
    memo: dict[tuple[str, int], list[float]] = {}

    def waits(profile: str, servers: int) -> list[float]:
        if (profile, servers) not in memo:
            memo[profile, servers] = _queue_waits(by_profile[profile], servers, until)
        return memo[profile, servers]

    per_node = {c: Counter({p: n * GPUS for p, n in CONFIGS[c].items()}) for c in CONFIGS}
    best: tuple[float, tuple[str, ...], list[float]] | None = None
    for split in itertools.combinations_with_replacement(sorted(CONFIGS), nodes):
        servers: Counter[str] = Counter()
        for c in split:
            servers.update(per_node[c])
        all_waits = [w for p in PROFILES for w in waits(p, servers[p])]
        mean = statistics.fmean(all_waits)
        if best is None or mean < best[0]:
            best = (mean, split, all_waits)
    assert best is not None
    return best[1], best[2]


# ---------------------------------------------------------------------------------------------- report


Row = tuple[str, str, str, str, str, str, str]


def _row(name: str, waits: list[float], gpus_in_use: float, stats: Stats | None) -> Row:
    waits = sorted(waits)
    p95 = waits[min(len(waits) - 1, int(0.95 * len(waits)))]
    reconf = "0" if stats is None else f"{stats.reconfigurations} nodes, {stats.gpus} GPUs"
    if stats is not None and stats.proposed:
        reconf += f" ({stats.proposed} merged)"
    return (
        name,
        f"{statistics.median(waits) / 60:.1f}",
        f"{p95 / 60:.1f}",
        f"{statistics.fmean(waits) / 60:.1f}",
        f"{gpus_in_use:.1f}",
        reconf,
        "0" if stats is None else str(stats.destroyed_busy),
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--hours", type=float, default=48.0)
    ap.add_argument("--load", type=float, default=0.75)
    ap.add_argument("--every", type=float, default=15.0, help="minutes between proposals")
    ap.add_argument("--review", type=float, default=10.0, help="minutes from a proposal to its merge")
    ap.add_argument("--seed", type=int, default=2026)
    args = ap.parse_args()
    require_solver()
    rnd = random.Random(args.seed)
    until = args.hours * 3600
    streams = [workload(random.Random(rnd.random()), args.hours, args.load) for _ in range(args.nodes)]
    pods = sorted((p for s in streams for p in s), key=lambda p: p.arrival)
    pods = [dataclasses.replace(p, id=i) for i, p in enumerate(pods)]
    header = (
        f"{args.nodes} nodes x {GPUS} H100-80GB, {args.hours:g} h, {len(pods):,} pods (one MIG device each), "
        f"offered load {args.load:.0%} of the compute slices, mix turning every {PHASE_HOURS} h between "
        f"inference {PHASES[0]} and training {PHASES[1]} (1g, 2g, 3g, 7g), run time exponential, mean "
        f"{MEAN_MINUTES:g} min; proposals every {args.every:g} min, review {args.review:g} min; apply pause "
        f"{PAUSE / 60:g} min"
    )
    print(header)
    rows: list[Row] = []
    t0 = time.perf_counter()
    static = Sim(pods, ["balanced"] * args.nodes)
    static.run(until)
    rows.append(_row("(a) static, every node balanced", static.waits(until), static.in_use_time / until, static.stats))
    greedy = Sim(pods, ["balanced"] * args.nodes)
    greedy.run(until, Greedy(greedy, until))
    rows.append(
        _row(
            "(b) per-node greedy (nos), every minute, no review",
            greedy.waits(until),
            greedy.in_use_time / until,
            greedy.stats,
        )
    )
    ours = Sim(pods, ["balanced"] * args.nodes)
    ours.run(until, Suggest(ours, until, args.every * 60, args.review * 60))
    rows.append(
        _row(
            f"(c) migops suggest every {args.every:g} min, merged after {args.review:g} min",
            ours.waits(until),
            ours.in_use_time / until,
            ours.stats,
        )
    )
    quick = Sim(pods, ["balanced"] * args.nodes)
    quick.run(until, Suggest(quick, until, 5 * 60, 0.0))
    rows.append(
        _row(
            "(c′) the same every 5 min, merged at once (the review's cost)",
            quick.waits(until),
            quick.in_use_time / until,
            quick.stats,
        )
    )
    split, waits = hindsight_best(pods, args.nodes, until)
    best = Sim(pods, list(split))
    best.run(until)
    # The per-profile queues that chose the split and the simulator must tell the same story.
    gap = abs(statistics.fmean(best.waits(until)) - statistics.fmean(waits))
    assert gap < 1.0, f"queue model and simulator differ by {gap:.1f} s of mean wait"
    names = ", ".join(f"{n} x {c}" for c, n in sorted(Counter(split).items()))
    rows.append(_row(f"(d) hindsight-best static ({names})", best.waits(until), best.in_use_time / until, None))
    took = time.perf_counter() - t0
    table = (
        "| way | wait median (min) | wait p95 (min) | wait mean (min) | GPUs in use (mean) | reconfigured | "
        "instances destroyed while in use |\n|---|---|---|---|---|---|---|\n"
        + "".join("| " + " | ".join(r) + " |\n" for r in rows)
    )
    print(table)
    note = (
        f"Measured {time.strftime('%Y-%m-%d')} by `python bench/suggest_trace.py` "
        f"({took:.0f} s on {len(os.sched_getaffinity(0))} shared cores; simulated time does not depend on the "
        f"machine): {header}."
    )
    print(note)


if __name__ == "__main__":
    main()

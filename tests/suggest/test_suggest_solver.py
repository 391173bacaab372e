"""The solver: counting alike nodes as one group gives the optimum one choice per node gives (pods
needing 1, 2 or 3 devices), the stages report the proposal's own values, and the same input gives the
same proposal whatever the wall-clock limit, as long as it does not bind."""

from __future__ import annotations

import random

from suggest_fixtures import ONE_G, node, pod, repo

from migops.api.objects import MigSettings
from migops.gitops.desired import FitCache, resolve
from migops.suggest.options import node_options
from migops.suggest.run import Cluster, _read
from migops.suggest.solve import Limits, solve

MIXED = MigSettings(strategy="mixed")
TWO_3G = [{"profile": "3g.40gb", "start": s, "size": 4, "compute": [3]} for s in (0, 4)]


def _inputs(rnd: random.Random):
    nodes, pods = [], []
    for i in range(rnd.randint(2, 9)):
        layout = rnd.choice((ONE_G, TWO_3G))
        nodes.append(node(f"n{i}", [layout] * rnd.randint(1, 2), pool="ml", **{"kubernetes.io/hostname": f"n{i}"}))
        if rnd.random() < 0.3:
            profile = layout[0]["profile"]
            pods.append(pod(f"run{i}", f"nvidia.com/mig-{profile}", node=f"n{i}"))
    for j in range(rnd.randint(1, 30)):
        profile = rnd.choice(("1g.10gb", "2g.20gb", "3g.40gb"))
        # Some select a geometry label: then options of one node differ in whom they admit.
        selector = {f"nvidia.com/mig-{profile}.count": rnd.choice(("2", "4", "7"))} if rnd.random() < 0.15 else None
        count = rnd.choice((1, 1, 1, 2, 3))
        pods.append(
            pod(f"p{j:02d}", f"nvidia.com/mig-{profile}", count, priority=rnd.choice((0, 0, 7)), selector=selector)
        )
    spec, cache = repo(), FitCache()
    cluster = Cluster({n["metadata"]["name"]: n for n in nodes}, pods, MIXED)
    read = _read(spec, cluster, resolve(spec, cluster.nodes, MIXED, cache), ())
    options = {n.name: list(node_options(n, spec, "mixed", spec.config.names(), cache)[0]) for n in read.supply}
    return read, options


def _score(p) -> tuple:
    return tuple((s.name, s.value) for s in p.stages if s.name != "tie-break")


def test_groups_reach_the_optimum_of_one_choice_per_node() -> None:
    rnd = random.Random(7)
    grouped_somewhere = 0
    for _ in range(40):
        read, options = _inputs(rnd)
        if not read.demands:
            continue
        grouped = solve(read.supply, options, read.demands)
        single = solve(read.supply, options, read.demands, group=False)
        assert grouped.optimal and single.optimal
        assert _score(grouped) == _score(single), (_score(grouped), _score(single))
        assert len(grouped.placed) == len(single.placed)
        grouped_somewhere += len({c.node for c in grouped.changes}) > 1
        # The stages' values are the proposal's own.
        values = {s.name: s.value for s in grouped.stages}
        assert values["gpus-reconfigured"] == grouped.gpus
        assert values["nodes-changed"] == len(grouped.changes)
        # Each placed pod fits where it is placed.
        used: dict[tuple[str, str], int] = {}
        for x in grouped.placed:
            used[x.node, x.profile] = used.get((x.node, x.profile), 0) + x.demand.count
        chosen = {c.node: c.option for c in grouped.changes}
        for (name, profile), n in used.items():
            option = chosen.get(name) or options[name][0]
            assert n <= option.free.get(profile, 0), (name, profile, n, option.free)
    assert grouped_somewhere > 5


def test_the_same_input_gives_the_same_proposal_whatever_the_wall_clock() -> None:
    rnd = random.Random(11)
    read, options = _inputs(rnd)
    first = solve(read.supply, options, read.demands, Limits(time_limit=60))
    for limit in (30.0, 120.0):
        again = solve(read.supply, options, read.demands, Limits(time_limit=limit))
        assert again.changes == first.changes and again.placed == first.placed
    assert not any(s.wall_clock_cut for s in first.stages)


def test_a_binding_wall_clock_says_so() -> None:
    rnd = random.Random(11)
    read, options = _inputs(rnd)
    cut = solve(read.supply, options, read.demands, Limits(time_limit=1e-6))
    searched = [s for s in cut.stages if not (s.optimal and s.bound == s.value and not s.wall_clock_cut)]
    assert all(s.wall_clock_cut for s in searched) and searched, cut.stages

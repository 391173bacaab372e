"""The solver's counts as nodes and pods: in each group, the first nodes by name take the changed options
(as many as solved); then, pool by pool, the pods needing the most devices are placed first, node by node
in name order, and the pods needing one fill what is left. Exact: a pool's options admit the same
classes, and at most one device count above 1 competes for its profile (suggest/problem.py)."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Mapping, Sequence

from migops.suggest.model import Demand, NodeChange, NodeSupply, Option, Placed, Proposal, Rule, Stage, Unserved
from migops.suggest.problem import Decision, Var


def _chosen(problem: Decision, values: Mapping[Var, int]) -> dict[str, tuple[int, Option]]:
    """Node -> (option index, option): within a group, the changed options go to the first names."""
    out: dict[str, tuple[int, Option]] = {}
    for g, members in enumerate(problem.groups):
        opts = problem.options[g]
        order = sorted(range(len(opts)), key=lambda k: (not opts[k].changed, k))
        picks = [k for k in order for _ in range(values.get(("y", g, k), 0))]
        for name, k in zip(members, picks):
            out[name] = (k, opts[k])
    return out


def _place(
    problem: Decision,
    values: Mapping[Var, int],
    chosen: Mapping[str, tuple[int, Option]],
    queues: list[deque[Demand]],
) -> list[Placed]:
    placed: list[Placed] = []
    room = {name: dict(o.free) for name, (_, o) in chosen.items()}
    for i, pool in enumerate(problem.pools):
        members = [n for n in problem.groups[pool.group] if chosen[n][0] in pool.options]
        by_need = sorted(pool.classes, key=lambda c: (-problem.count(c), c))
        for c in by_need:
            want, count = values.get(("z", c, i), 0), problem.count(c)
            for name in members:
                if not want:
                    break
                while want and queues[c] and room[name][pool.profile] >= count:
                    room[name][pool.profile] -= count
                    placed.append(Placed(queues[c].popleft(), name, pool.profile))
                    want -= 1
            assert want == 0, "the solver's counts do not fit the pool's nodes"
    return placed


def realise(
    nodes: Sequence[NodeSupply],
    problem: Decision,
    values: Mapping[Var, int],
    unservable: Mapping[Demand, tuple[Rule, str]],
    max_nodes: int | None,
    stages: tuple[Stage, ...],
    started: float,
) -> Proposal:
    assigned = {n.name: n.assigned for n in nodes}
    chosen = _chosen(problem, values)
    queues = [deque(pods) for pods in problem.classes]
    placed = _place(problem, values, chosen, queues)
    why = (
        f"no room for it within the policy (at most {max_nodes} nodes changed per proposal) "
        "or beside pods of higher priority"
        if max_nodes is not None
        else "no room for it beside pods of higher or equal priority on the nodes that could serve it"
    )
    unserved = [Unserved(d, text, rule) for d, (rule, text) in unservable.items()]
    unserved += [Unserved(d, why, Rule.NO_ROOM) for queue in queues for d in queue]
    changes = tuple(
        NodeChange(name, assigned[name], option) for name, (_, option) in sorted(chosen.items()) if option.changed
    )
    unserved.sort(key=lambda u: (u.demand.namespace, u.demand.name))
    placed.sort(key=lambda p: (p.demand.namespace, p.demand.name))
    return Proposal(changes, tuple(placed), tuple(unserved), stages, time.monotonic() - started)

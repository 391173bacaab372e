"""The solver's first solution: a per-node greedy, as nebuly nos decides (each node in turn takes the
option that serves the most pending pods, by priority; what is left goes to the next). Feasible by
construction: the solver only improves on it."""

from __future__ import annotations

from collections.abc import Sequence

from migops.suggest.problem import Decision, Var


def weights(problem: Decision) -> list[int]:
    """Per class: one pod of a higher priority outweighs every pod of the lower ones."""
    tiers: dict[int, int] = {}
    for pods in problem.classes:
        tiers[pods[0].priority] = tiers.get(pods[0].priority, 0) + len(pods)
    by, w = {}, 1
    for pr in sorted(tiers):
        by[pr] = w
        w *= tiers[pr] + 1
    return [by[pods[0].priority] for pods in problem.classes]


def _take(
    problem: Decision, g: int, k: int, left: Sequence[int], w: Sequence[int]
) -> tuple[int, list[tuple[int, int, int]]]:
    """What one node of group g serves under option k: (score, [(class, pool, pods)])."""
    free = dict(problem.options[g][k].free)
    wanted = list(left)
    took: list[tuple[int, int, int]] = []
    score = 0
    for i in problem.pools_of[g]:
        pool = problem.pools[i]
        if k not in pool.options:
            continue
        for c in pool.classes:  # highest priority first
            n = min(wanted[c], free[pool.profile] // problem.count(c))
            if n > 0:
                free[pool.profile] -= n * problem.count(c)
                wanted[c] -= n
                took.append((c, i, n))
                score += n * w[c]
    return score, took


def greedy(problem: Decision, max_nodes: int | None) -> dict[Var, int]:
    w = weights(problem)
    left = [len(pods) for pods in problem.classes]
    values: dict[Var, int] = {}
    changed = 0
    for g, members in enumerate(problem.groups):
        opts = problem.options[g]
        for _ in members:
            best: tuple[int, int, int] | None = None  # (score, -GPUs, -option)
            best_took: list[tuple[int, int, int]] = []
            for k, o in enumerate(opts):
                if o.changed and max_nodes is not None and changed >= max_nodes:
                    continue
                score, took = _take(problem, g, k, left, w)
                key = (score, -len(o.gpus), -k)
                if best is None or key > best:
                    best, best_took = key, took
            assert best is not None  # option 0 (as it is) is always there
            k = -best[2]
            values["y", g, k] = values.get(("y", g, k), 0) + 1
            changed += opts[k].changed
            for c, i, n in best_took:
                values["z", c, i] = values.get(("z", c, i), 0) + n
                left[c] -= n
    return values

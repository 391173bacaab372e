"""The choice: which option each node takes, so that the most pending demand is served.

An exact model solved by OR-Tools' CP-SAT, lexicographically (docs/suggest.md):

1. the most pods served, by priority (a higher priority's pod outweighs every lower one's);
2. then the fewest GPUs reconfigured;
3. then the fewest nodes whose nodes.yaml assignment changes;
4. then the fewest nodes given a config new to config.yaml;
5. then, among equals, the nodes first in name order.

Each stage is solved with the previous ones held at what they reached (their optimum, or the best
found when the time ran out; then `Stage.optimal` is false and `Stage.gap` is how far the proven bound
is). Pods with the same needs (profiles, count, priority, node selectors) form one class, an integer
variable per (class, node, profile): 5,000 pods of a dozen kinds are a dozen classes, not 5,000 rows.
The search is single-threaded with a deterministic work limit, so the same input gives the same
proposal; `time_limit` (wall seconds) is the safety net above it.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from migops.suggest.model import Demand, NodeChange, NodeFacts, Option, Placed, Proposal, Stage, Unserved

_MAX_WEIGHT = 1 << 40  # above it, priorities are solved one stage each rather than as one weighted sum


@dataclass(frozen=True)
class Limits:
    time_limit: float = 10.0  # wall seconds for the whole solve (the safety net)
    work_limit: float = 20.0  # CP-SAT deterministic time for the whole solve (what makes runs repeat)
    max_nodes: int | None = None  # nodes one proposal may change


def _classes(demands: Sequence[Demand]) -> list[list[Demand]]:
    groups: dict[tuple[object, ...], list[Demand]] = defaultdict(list)
    for d in demands:
        groups[(tuple(sorted(d.keys)), d.count, d.priority, d.node_selectors)].append(d)
    out = [sorted(g, key=lambda d: (d.namespace, d.name)) for g in groups.values()]
    return sorted(out, key=lambda g: (-g[0].priority, g[0].namespace, g[0].name))


def solve(
    nodes: Sequence[NodeFacts],
    options: Mapping[str, Sequence[Option]],
    demands: Sequence[Demand],
    limits: Limits = Limits(),
    unservable: Mapping[Demand, str] | None = None,
) -> Proposal:
    """The proposal for these nodes (each with its options, the first being "as it is") and the
    pending demand. `unservable`: demand already known to have no option at all, with the reason."""
    from ortools.sat.python import cp_model

    started = time.monotonic()
    unservable = dict(unservable or {})
    todo = [d for d in demands if d not in unservable]
    classes = _classes(todo)
    node_names = [n.name for n in sorted(nodes, key=lambda n: n.name)]
    m = cp_model.CpModel()
    x: dict[tuple[int, int], cp_model.IntVar] = {}
    for i, name in enumerate(node_names):
        opts = options[name]
        for k in range(len(opts)):
            x[i, k] = m.new_bool_var(f"x{i}_{k}")
        m.add_exactly_one(x[i, k] for k in range(len(opts)))
    z: dict[tuple[int, int, str], cp_model.IntVar] = {}
    supply: dict[tuple[int, str], list[tuple[int, cp_model.IntVar]]] = defaultdict(list)
    served_by_class: list[list[cp_model.IntVar]] = [[] for _ in classes]
    for c, group in enumerate(classes):
        d = group[0]
        for i, name in enumerate(node_names):
            opts = options[name]
            for p in sorted(d.keys):
                able = [k for k, o in enumerate(opts) if o.free.get(p, 0) >= d.count and d.matches(o.labels)]
                if not able:
                    continue
                most = min(len(group), max(opts[k].free.get(p, 0) for k in able) // d.count)
                v = m.new_int_var(0, most, f"z{c}_{i}_{p}")
                z[c, i, p] = v
                m.add(v <= most * sum(x[i, k] for k in able))  # only under an option where it fits
                supply[i, p].append((d.count, v))
                served_by_class[c].append(v)
        if served_by_class[c]:
            m.add(sum(served_by_class[c]) <= len(group))
    for (i, p), users in supply.items():
        opts = options[node_names[i]]
        m.add(sum(n * v for n, v in users) <= sum(o.free.get(p, 0) * x[i, k] for k, o in enumerate(opts)))
    changed = [x[i, k] for i, name in enumerate(node_names) for k, o in enumerate(options[name]) if o.changed]
    if limits.max_nodes is not None:
        m.add(sum(changed) <= limits.max_nodes)

    # The lexicographic order, as stages.
    tiers: dict[int, list[cp_model.IntVar]] = defaultdict(list)
    for c, group in enumerate(classes):
        tiers[group[0].priority].extend(served_by_class[c])
    sizes = {pr: sum(len(g) for g in classes if g[0].priority == pr) for pr in tiers}
    weights: dict[int, int] = {}
    w = 1
    for pr in sorted(tiers):
        weights[pr] = w
        w = w * (sizes[pr] + 1)
    objectives: list[tuple[str, object, bool]] = []  # (name, expression, maximise)
    if w <= _MAX_WEIGHT:
        objectives.append(("served", sum(weights[pr] * sum(vs) for pr, vs in tiers.items()), True))
    else:
        objectives += [(f"served-priority-{pr}", sum(tiers[pr]), True) for pr in sorted(tiers, reverse=True)]
    gpus = sum(len(o.gpus) * x[i, k] for i, name in enumerate(node_names) for k, o in enumerate(options[name]))
    objectives.append(("gpus-reconfigured", gpus, False))
    objectives.append(("nodes-changed", sum(changed), False))
    new = [x[i, k] for i, name in enumerate(node_names) for k, o in enumerate(options[name]) if o.new]
    if new:
        objectives.append(("new-configs", sum(new), False))
    # Last, among equals: the nodes first in name order, so that equal nodes do not swap between runs
    # or releases (a tie-break, not a preference anyone asked for).
    ranked = [(i + 1) * x[i, k] for i, name in enumerate(node_names) for k, o in enumerate(options[name]) if o.changed]
    if ranked:
        objectives.append(("tie-break", sum(ranked), False))

    stages: list[Stage] = []
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1  # one thread, deterministic
    solver.parameters.random_seed = 0
    values: dict[tuple[int, int], int] | None = None
    for s, (label, expr, maximise) in enumerate(objectives):
        left = limits.time_limit - (time.monotonic() - started)
        solver.parameters.max_time_in_seconds = max(0.05, left / (len(objectives) - s))
        solver.parameters.max_deterministic_time = max(0.05, limits.work_limit / len(objectives))
        if maximise:
            m.maximize(expr)  # type: ignore[arg-type]
        else:
            m.minimize(expr)  # type: ignore[arg-type]
        if values is not None:
            m.clear_hints()
            for key, var in x.items():
                m.add_hint(var, values[key])
        status = solver.solve(m)
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            if values is None:
                raise RuntimeError(f"the solver found no proposal ({solver.status_name(status)})")
            break  # keep the previous stage's solution
        value = round(solver.objective_value)
        bound = round(solver.best_objective_bound)
        stages.append(Stage(label, value, bound, status == cp_model.OPTIMAL))
        values = {key: solver.value(var) for key, var in x.items()}
        zvalues = {key: solver.value(var) for key, var in z.items()}
        if maximise:
            m.add(expr >= value)  # type: ignore[operator]
        else:
            m.add(expr <= value)  # type: ignore[operator]
    assert values is not None

    chosen = {
        name: options[name][next(k for k in range(len(options[name])) if values[i, k])]
        for i, name in enumerate(node_names)
    }
    changes = tuple(
        NodeChange(n.name, n.assigned, chosen[n.name])
        for n in sorted(nodes, key=lambda n: n.name)
        if chosen[n.name].changed
    )
    placed: list[Placed] = []
    unserved = [Unserved(d, why) for d, why in unservable.items()]
    for c, group in enumerate(classes):
        queue = list(group)
        for (cc, i, p), _var in sorted(z.items()):
            if cc != c:
                continue
            for _ in range(zvalues[cc, i, p]):
                placed.append(Placed(queue.pop(0), node_names[i], p))
        for d in queue:
            reason = (
                f"no room for it within the policy (at most {limits.max_nodes} nodes changed per proposal) "
                "or beside pods of higher priority"
                if limits.max_nodes is not None
                else "no room for it beside pods of higher or equal priority on the nodes that could serve it"
            )
            unserved.append(Unserved(d, reason))
    unserved.sort(key=lambda u: (u.demand.namespace, u.demand.name))
    placed.sort(key=lambda p: (p.demand.namespace, p.demand.name))
    return Proposal(changes, tuple(placed), tuple(unserved), tuple(stages), time.monotonic() - started)

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
from typing import Any

from migops.suggest.model import Demand, NodeChange, NodeFacts, Option, Placed, Proposal, Stage, Unserved

_MAX_WEIGHT = 1 << 40  # above it, priorities are solved one stage each rather than as one weighted sum
_Key = Any  # a variable's key: (group, option) for y, (class, group, profile) for z


EXTRA = "migops[suggest]"  # pyproject's optional dependency group that brings OR-Tools


class SolverMissing(RuntimeError):
    """OR-Tools is not installed: `migops suggest` and spec.suggest need the extra `migops[suggest]`."""


def require_solver() -> None:
    """Import the solver, or raise SolverMissing naming the extra. OR-Tools is optional (numpy, pandas and
    protobuf come with it; `migops validate` -- a pre-commit hook -- never needs them): the image has it."""
    try:
        from ortools.sat.python import cp_model  # noqa: F401
    except ImportError as exc:
        raise SolverMissing(
            f"the solver OR-Tools is not installed ({exc}): `migops suggest` and MigSync spec.suggest need the "
            f"optional extra: pip install '{EXTRA}' (the migops image has it)"
        ) from None


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


def _signature(o: Option) -> tuple[object, ...]:
    return (o.config, o.changed, o.new, tuple(sorted(o.free.items())), tuple(sorted(o.labels.items())), len(o.gpus))


def _groups(nodes: Sequence[NodeFacts], options: Mapping[str, Sequence[Option]], exact: bool) -> list[list[str]]:
    """Nodes whose options are the same (but for the names): one group, counted by integers instead of
    one choice per node -- a thousand nodes in one layout are one group, and no symmetry to search.
    Only when every pod needs one device (`exact`): with more, two half-free nodes are not one full one."""
    names = sorted(n.name for n in nodes)
    if not exact:
        return [[n] for n in names]
    by: dict[tuple[object, ...], list[str]] = {}
    for name in names:
        by.setdefault(tuple(_signature(o) for o in options[name]), []).append(name)
    return sorted(by.values())


def solve(
    nodes: Sequence[NodeFacts],
    options: Mapping[str, Sequence[Option]],
    demands: Sequence[Demand],
    limits: Limits = Limits(),
    unservable: Mapping[Demand, str] | None = None,
) -> Proposal:
    """The proposal for these nodes (each with its options, the first being "as it is") and the
    pending demand. `unservable`: demand already known to have no option at all, with the reason."""
    require_solver()
    from ortools.sat.python import cp_model

    started = time.monotonic()
    unservable = dict(unservable or {})
    todo = [d for d in demands if d not in unservable]
    classes = _classes(todo)
    groups = _groups(nodes, options, all(g[0].count == 1 for g in classes))
    rank = {name: i for i, name in enumerate(sorted(n.name for n in nodes))}
    m = cp_model.CpModel()
    # y[g, k]: how many nodes of group g take option k (a 0/1 choice for a group of one).
    y: dict[tuple[int, int], cp_model.IntVar] = {}
    for g, members in enumerate(groups):
        opts = options[members[0]]
        for k in range(len(opts)):
            y[g, k] = m.new_int_var(0, len(members), f"y{g}_{k}")
        m.add(sum(y[g, k] for k in range(len(opts))) == len(members))
    z: dict[tuple[int, int, str], cp_model.IntVar] = {}
    supply: dict[tuple[int, str], list[tuple[int, cp_model.IntVar]]] = defaultdict(list)
    served_by_class: list[list[cp_model.IntVar]] = [[] for _ in classes]
    for c, pods in enumerate(classes):
        d = pods[0]
        for g, members in enumerate(groups):
            opts = options[members[0]]
            if not any(d.matches(o.labels) for o in opts):
                continue
            for p in sorted(d.keys):
                # Pods of this class one node holds under option k: what the option frees, by need.
                per = {k: o.free.get(p, 0) // d.count for k, o in enumerate(opts) if d.matches(o.labels)}
                per = {k: n for k, n in per.items() if n > 0}
                if not per:
                    continue
                most = min(len(pods), max(per.values()) * len(members))
                v = m.new_int_var(0, most, f"z{c}_{g}_{p}")
                z[c, g, p] = v
                m.add(v <= sum(n * y[g, k] for k, n in per.items()))  # only under options where it fits
                supply[g, p].append((d.count, v))
                served_by_class[c].append(v)
        if served_by_class[c]:
            m.add(sum(served_by_class[c]) <= len(pods))
    for (g, p), users in supply.items():
        opts = options[groups[g][0]]
        m.add(sum(n * v for n, v in users) <= sum(o.free.get(p, 0) * y[g, k] for k, o in enumerate(opts)))
    if limits.max_nodes is not None:
        m.add(
            sum(y[g, k] for g, members in enumerate(groups) for k, o in enumerate(options[members[0]]) if o.changed)
            <= limits.max_nodes
        )

    # The lexicographic order, as stages.
    tiers: dict[int, list[cp_model.IntVar]] = defaultdict(list)
    for c, pods in enumerate(classes):
        tiers[pods[0].priority].extend(served_by_class[c])
    sizes = {pr: sum(len(g) for g in classes if g[0].priority == pr) for pr in tiers}
    weights: dict[int, int] = {}
    w = 1
    for pr in sorted(tiers):
        weights[pr] = w
        w = w * (sizes[pr] + 1)
    # Each objective as (name, terms, maximise, best conceivable); a term is (coefficient, variable key).
    objectives: list[tuple[str, list[tuple[int, _Key]], bool, int]] = []
    zkeys_of = [[key for key in z if key[0] == c] for c in range(len(classes))]
    servable = [len(pods) if zkeys_of[c] else 0 for c, pods in enumerate(classes)]
    if w <= _MAX_WEIGHT:
        terms = [(weights[classes[c][0].priority], key) for c in range(len(classes)) for key in zkeys_of[c]]
        best = sum(weights[classes[c][0].priority] * servable[c] for c in range(len(classes)))
        objectives.append(("served", terms, True, best))
    else:
        for pr in sorted(tiers, reverse=True):
            cs = [c for c in range(len(classes)) if classes[c][0].priority == pr]
            objectives.append(
                (
                    f"served-priority-{pr}",
                    [(1, key) for c in cs for key in zkeys_of[c]],
                    True,
                    sum(servable[c] for c in cs),
                )
            )
    each = [(g, k, o) for g, members in enumerate(groups) for k, o in enumerate(options[members[0]])]
    objectives.append(("gpus-reconfigured", [(len(o.gpus), (g, k)) for g, k, o in each if o.gpus], False, 0))
    objectives.append(("nodes-changed", [(1, (g, k)) for g, k, o in each if o.changed], False, 0))
    if any(o.new for _, _, o in each):
        objectives.append(("new-configs", [(1, (g, k)) for g, k, o in each if o.new], False, 0))
    # Last, among equals: the nodes first in name order, so that equal nodes do not swap between runs
    # or releases (a tie-break, not a preference anyone asked for; within a group the first names are
    # the ones changed).
    if len(groups) > 1:
        objectives.append(("tie-break", [(rank[groups[g][0]] + 1, (g, k)) for g, k, o in each if o.changed], False, 0))

    stages: list[Stage] = []
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1  # one thread, deterministic
    solver.parameters.random_seed = 0
    # A feasible start: nos's greedy (node by node, the option that serves the most by priority).
    values, zvalues = _greedy(groups, options, classes, weights, limits.max_nodes)

    def var(key: _Key) -> Any:
        return z[key] if len(key) == 3 else y[key]

    def now(terms: list[tuple[int, _Key]]) -> int:
        return sum(c * (zvalues.get(key, 0) if len(key) == 3 else values.get(key, 0)) for c, key in terms)

    # The first stage (serving) gets half the time; the others share what is left.
    shares = [0.5] + [0.5 / max(1, len(objectives) - 1)] * (len(objectives) - 1)
    for s, (label, terms, maximise, best) in enumerate(objectives):
        expr = sum(c * var(key) for c, key in terms)
        start = now(terms)
        # A tenth of the limit is kept back for building the answer (and the solver's own overrun).
        left = 0.9 * limits.time_limit - (time.monotonic() - started)
        if start == best:  # the start already reaches what no solution can pass
            stages.append(Stage(label, start, best, True))
        elif left < 0.2:  # out of time: the solution in hand stands, nothing proven beyond the trivial bound
            stages.append(Stage(label, start, best, False))
        else:
            share = shares[0] if s == 0 else 1 / (len(objectives) - s)
            solver.parameters.max_time_in_seconds = max(0.05, left * share)
            solver.parameters.max_deterministic_time = max(0.05, limits.work_limit * shares[s])
            if maximise:
                m.maximize(expr)
            else:
                m.minimize(expr)
            m.clear_hints()
            for key, v in y.items():
                m.add_hint(v, values.get(key, 0))
            for zkey, zv in z.items():
                m.add_hint(zv, zvalues.get(zkey, 0))
            status = solver.solve(m)
            if status in (cp_model.OPTIMAL, cp_model.FEASIBLE) and (
                (solver.objective_value >= start) if maximise else (solver.objective_value <= start)
            ):
                values = {key: solver.value(v) for key, v in y.items()}
                zvalues = {zkey: solver.value(zv) for zkey, zv in z.items()}
            # Out of time without a better solution: the one in hand stands, with the bound proven.
            bound = round(solver.best_objective_bound) if status != cp_model.UNKNOWN else best
            if status == cp_model.UNKNOWN and not maximise:
                bound = 0
            stages.append(Stage(label, now(terms), bound, status == cp_model.OPTIMAL))
        if maximise and now(terms) == best and label == "served":
            # Everyone servable is served: per-class equalities hold it, far easier to propagate than
            # one weighted sum.
            for c, keys in enumerate(zkeys_of):
                if keys:
                    m.add(sum(z[key] for key in keys) == servable[c])
        elif maximise:
            m.add(expr >= now(terms))
        else:
            m.add(expr <= now(terms))
    return _realise(nodes, options, groups, classes, values, zvalues, unservable, limits, stages, started)


def _greedy(
    groups: list[list[str]],
    options: Mapping[str, Sequence[Option]],
    classes: list[list[Demand]],
    weights: Mapping[int, int],
    max_nodes: int | None,
) -> tuple[dict[tuple[int, int], int], dict[tuple[int, int, str], int]]:
    """Node by node, the option that serves the most pending pods (by priority weight), what is left to
    the next: feasible by construction, and the solver's first solution (it only gets better)."""
    left = [len(pods) for pods in classes]
    values: dict[tuple[int, int], int] = {}
    zvalues: dict[tuple[int, int, str], int] = {}
    changed = 0
    for g, members in enumerate(groups):
        opts = options[members[0]]
        for _ in members:
            best: tuple[int, int, int] | None = None  # (score, -gpus, -k)
            best_take: list[tuple[int, str, int]] = []
            for k, o in enumerate(opts):
                if o.changed and max_nodes is not None and changed >= max_nodes:
                    continue
                free = dict(o.free)
                take: list[tuple[int, str, int]] = []
                score = 0
                for c, pods in enumerate(classes):
                    d = pods[0]
                    if not left[c] or not d.matches(o.labels):
                        continue
                    want = left[c] - sum(n for cc, _, n in take if cc == c)
                    for p in sorted(d.keys):
                        n = min(want, free.get(p, 0) // d.count)
                        if n > 0:
                            free[p] -= n * d.count
                            want -= n
                            take.append((c, p, n))
                            score += n * weights[d.priority]
                key = (score, -len(o.gpus), -k)
                if best is None or key > best:
                    best, best_take = key, take
            assert best is not None  # option 0 (as it is) is always there
            k = -best[2]
            values[g, k] = values.get((g, k), 0) + 1
            changed += opts[k].changed
            for c, p, n in best_take:
                zvalues[c, g, p] = zvalues.get((c, g, p), 0) + n
                left[c] -= n
    return values, zvalues


def _realise(
    nodes: Sequence[NodeFacts],
    options: Mapping[str, Sequence[Option]],
    groups: list[list[str]],
    classes: list[list[Demand]],
    values: Mapping[tuple[int, int], int],
    zvalues: Mapping[tuple[int, int, str], int],
    unservable: Mapping[Demand, str],
    limits: Limits,
    stages: list[Stage],
    started: float,
) -> Proposal:
    """The counts as nodes and pods: in each group, the first nodes by name take the changed options
    (as many as solved), then the pods of each class fill the nodes in name order. Exact: within a group
    every pod needs one device, so any spread of the counts over identical nodes fits."""
    assigned = {n.name: n.assigned for n in nodes}
    chosen: dict[str, Option] = {}
    room: dict[str, dict[str, int]] = {}
    for g, members in enumerate(groups):
        opts = options[members[0]]
        order = sorted(range(len(opts)), key=lambda k: (not opts[k].changed, k))
        picks = [k for k in order for _ in range(values.get((g, k), 0))]
        for name, k in zip(members, picks):
            chosen[name] = options[name][k]
            room[name] = dict(chosen[name].free)
    placed: list[Placed] = []
    unserved = [Unserved(d, why) for d, why in unservable.items()]
    for c, pods in enumerate(classes):
        queue: list[Demand] = list(pods)
        d = pods[0]
        for g, members in enumerate(groups):
            for p in sorted(d.keys):
                left = zvalues.get((c, g, p), 0)
                for name in members:
                    while left and queue and room[name].get(p, 0) >= d.count and d.matches(chosen[name].labels):
                        room[name][p] -= d.count
                        placed.append(Placed(queue.pop(0), name, p))
                        left -= 1
                assert left == 0 or not queue, "the solver's counts do not fit the group's nodes"
        for rest in queue:
            reason = (
                f"no room for it within the policy (at most {limits.max_nodes} nodes changed per proposal) "
                "or beside pods of higher priority"
                if limits.max_nodes is not None
                else "no room for it beside pods of higher or equal priority on the nodes that could serve it"
            )
            unserved.append(Unserved(rest, reason))
    changes = tuple(NodeChange(name, assigned[name], chosen[name]) for name in sorted(chosen) if chosen[name].changed)
    unserved.sort(key=lambda u: (u.demand.namespace, u.demand.name))
    placed.sort(key=lambda p: (p.demand.namespace, p.demand.name))
    return Proposal(changes, tuple(placed), tuple(unserved), tuple(stages), time.monotonic() - started)

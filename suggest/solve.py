"""The choice: which option each node takes, so that the most pending demand is served.

An exact model (suggest/problem.py: demand in classes, nodes in groups) solved by OR-Tools' CP-SAT,
lexicographically (docs/suggest.md):

1. the most pods served, by priority (a higher priority's pod outweighs every lower one's);
2. then the fewest GPUs reconfigured;
3. then the fewest nodes whose nodes.yaml assignment changes;
4. then the fewest nodes given a config new to config.yaml;
5. then, among equals, the nodes first in name order.

Each stage is solved with the previous ones held at what they reached. The search is single-threaded
and each stage has a deterministic work limit (CP-SAT's deterministic time, which counts work, not
seconds): the same input gives the same proposal on an idle and on a loaded machine. The wall-clock
`time_limit` is a safety net above it; a stage it cuts says so (`Stage.wall_clock_cut`), and then a
rerun may end elsewhere. Stage values are those of the final proposal.
"""

from __future__ import annotations

import functools
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from migops.suggest.model import Demand, NodeSupply, Option, Proposal, Rule, Stage
from migops.suggest.problem import Decision, Var, build

_MAX_WEIGHT = 1 << 40  # above it, priorities are solved one stage each rather than as one weighted sum
_FIRST_SHARE = 0.5  # of the work limit, for serving; the other stages share the rest
_RESERVE = 0.1  # of the wall-clock limit, kept back for building the answer

EXTRA = "migops[suggest]"  # pyproject's optional dependency group that brings OR-Tools

Terms = list[tuple[int, Var]]


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
    time_limit: float = 10.0  # wall seconds for the whole proposal: the safety net
    work_limit: float = 30.0  # CP-SAT deterministic time for the whole solve: what makes runs repeat
    max_nodes: int | None = None  # nodes one proposal may change


@dataclass(frozen=True)
class Objective:
    name: str
    terms: Terms
    maximise: bool
    best: int  # what no solution can pass (the trivial bound)


class _Model:
    """The CP-SAT model of a Decision: y (nodes per group and option), z (pods per class and pool)."""

    def __init__(self, problem: Decision, max_nodes: int | None) -> None:
        from ortools.sat.python import cp_model

        self.problem = problem
        self.m = cp_model.CpModel()
        self.vars: dict[Var, Any] = {}
        for g, members in enumerate(problem.groups):
            ys = [self._new(("y", g, k), len(members)) for k in range(len(problem.options[g]))]
            self.m.add(sum(ys) == len(members))
        for i in range(len(problem.pools)):
            self._pool(i)
        for c in range(len(problem.classes)):
            zs = self.served(c)
            if zs:
                self.m.add(sum(self.vars[v] for v in zs) <= problem.size(c))
        if max_nodes is not None:
            changed = [self.vars[v] for v in self.each_y() if self.option(v).changed]
            self.m.add(sum(changed) <= max_nodes)

    def _new(self, key: Var, most: int) -> Any:
        self.vars[key] = self.m.new_int_var(0, most, f"{key[0]}{key[1]}_{key[2]}")
        return self.vars[key]

    def _pool(self, i: int) -> None:
        """Pods of the pool's classes fit the devices its nodes free: in all, per class (by its count),
        and per device count above 1 (what makes counting identical nodes exact)."""
        problem, pool = self.problem, self.problem.pools[i]
        opts = problem.options[pool.group]
        members = len(problem.groups[pool.group])

        def supply(per: int) -> Any:
            return sum((opts[k].free[pool.profile] // per) * self.vars["y", pool.group, k] for k in pool.options)

        most = max(opts[k].free[pool.profile] for k in pool.options) * members
        zs = {c: self._new(("z", c, i), min(problem.size(c), most // problem.count(c))) for c in pool.classes}
        for c, z in zs.items():
            self.m.add(z <= supply(problem.count(c)))
        self.m.add(sum(problem.count(c) * z for c, z in zs.items()) <= supply(1))
        for count in sorted({problem.count(c) for c in pool.classes} - {1}):
            self.m.add(sum(z for c, z in zs.items() if problem.count(c) == count) <= supply(count))

    def each_y(self) -> list[Var]:
        return [v for v in self.vars if v[0] == "y"]

    def option(self, v: Var) -> Option:
        return self.problem.options[v[1]][v[2]]

    def served(self, c: int) -> list[Var]:
        return self._served.get(c, [])

    @functools.cached_property
    def _served(self) -> dict[int, list[Var]]:
        out: dict[int, list[Var]] = defaultdict(list)
        for v in self.vars:
            if v[0] == "z":
                out[v[1]].append(v)
        return out


def _objectives(model: _Model) -> list[Objective]:
    problem = model.problem
    servable = [problem.size(c) if model.served(c) else 0 for c in range(len(problem.classes))]
    tiers: dict[int, list[int]] = defaultdict(list)
    for c, pods in enumerate(problem.classes):
        tiers[pods[0].priority].append(c)
    weights, w = {}, 1
    for pr in sorted(tiers):
        weights[pr] = w
        w *= sum(problem.size(c) for c in tiers[pr]) + 1
    out: list[Objective] = []
    if w <= _MAX_WEIGHT:
        terms = [(weights[pr], v) for pr, cs in tiers.items() for c in cs for v in model.served(c)]
        out.append(
            Objective("served", terms, True, sum(weights[pr] * servable[c] for pr, cs in tiers.items() for c in cs))
        )
    else:
        for pr in sorted(tiers, reverse=True):
            terms = [(1, v) for c in tiers[pr] for v in model.served(c)]
            out.append(Objective(f"served-priority-{pr}", terms, True, sum(servable[c] for c in tiers[pr])))
    ys = model.each_y()
    out.append(
        Objective("gpus-reconfigured", [(len(model.option(v).gpus), v) for v in ys if model.option(v).gpus], False, 0)
    )
    out.append(Objective("nodes-changed", [(1, v) for v in ys if model.option(v).changed], False, 0))
    if any(model.option(v).new for v in ys):
        out.append(Objective("new-configs", [(1, v) for v in ys if model.option(v).new], False, 0))
    # Last, among equals: the nodes first in name order, so that equal nodes do not swap between runs or
    # releases (a tie-break, not a preference anyone asked for; within a group the first names change).
    if len(problem.groups) > 1:
        rank = [problem.rank[members[0]] + 1 for members in problem.groups]
        out.append(Objective("tie-break", [(rank[v[1]], v) for v in ys if model.option(v).changed], False, 0))
    return out


def _value(terms: Terms, values: Mapping[Var, int]) -> int:
    return sum(c * values.get(v, 0) for c, v in terms)


class _Stages:
    """The objectives solved one after the other, each from the best solution so far (a hint) and held
    at what it reached before the next."""

    def __init__(self, model: _Model, limits: Limits, start: dict[Var, int], started: float) -> None:
        from ortools.sat.python import cp_model

        self.model, self.limits, self.values, self.started = model, limits, start, started
        self.solver = cp_model.CpSolver()
        self.solver.parameters.num_workers = 1  # one thread: the search is the same on every machine
        self.solver.parameters.random_seed = 0
        self.results: list[tuple[Objective, int, bool, bool]] = []  # objective, bound, proven, wall-clock cut

    def run(self, objectives: Sequence[Objective]) -> None:
        rest = (1 - _FIRST_SHARE) / max(1, len(objectives) - 1)
        for s, objective in enumerate(objectives):
            share = _FIRST_SHARE if s == 0 else rest
            if _value(objective.terms, self.values) == objective.best:  # the start reaches what none can pass
                self.results.append((objective, objective.best, True, False))
            else:
                self.results.append(self._solve(objective, self.limits.work_limit * share))
            self._hold(objective, s, len(objectives))

    def _solve(self, objective: Objective, work: float) -> tuple[Objective, int, bool, bool]:
        from ortools.sat.python import cp_model

        m, solver = self.model.m, self.solver
        wall = (1 - _RESERVE) * self.limits.time_limit - (time.monotonic() - self.started)
        if wall <= 0:
            return objective, objective.best, False, True
        solver.parameters.max_time_in_seconds = wall
        solver.parameters.max_deterministic_time = work
        expr = sum(c * self.model.vars[v] for c, v in objective.terms)
        m.maximize(expr) if objective.maximise else m.minimize(expr)
        m.clear_hints()
        for v, var in self.model.vars.items():
            m.add_hint(var, self.values.get(v, 0))
        status = solver.solve(m)
        start = _value(objective.terms, self.values)
        if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            better = solver.objective_value >= start if objective.maximise else solver.objective_value <= start
            if better:
                self.values = {v: int(solver.value(var)) for v, var in self.model.vars.items()}
        proven = status == cp_model.OPTIMAL
        bound = round(solver.best_objective_bound) if status != cp_model.UNKNOWN else objective.best
        cut = not proven and solver.deterministic_time < 0.99 * work
        return objective, bound, proven, cut

    def _hold(self, objective: Objective, s: int, stages: int) -> None:
        """The next stages keep what this one reached."""
        if s == stages - 1:
            return
        m, now = self.model.m, _value(objective.terms, self.values)
        if objective.maximise and now == objective.best and s == 0:
            # Everyone servable is served: per-class equalities hold it, far easier to propagate than one
            # weighted sum.
            for c in range(len(self.model.problem.classes)):
                zs = self.model.served(c)
                if zs:
                    m.add(sum(self.model.vars[v] for v in zs) == self.model.problem.size(c))
            return
        expr = sum(c * self.model.vars[v] for c, v in objective.terms)
        m.add(expr >= now) if objective.maximise else m.add(expr <= now)

    def stages(self) -> tuple[Stage, ...]:
        """Each stage's value in the final solution, with what its solve proved."""
        out = []
        for objective, bound, proven, cut in self.results:
            value = _value(objective.terms, self.values)
            out.append(Stage(objective.name, value, bound, proven or value == bound, cut))
        return tuple(out)


def solve(
    nodes: Sequence[NodeSupply],
    options: Mapping[str, Sequence[Option]],
    demands: Sequence[Demand],
    limits: Limits = Limits(),
    unservable: Mapping[Demand, tuple[Rule, str]] | None = None,
    started: float | None = None,
    group: bool = True,
) -> Proposal:
    """The proposal for these nodes (each with its options, the first being "as it is") and the pending
    demand. `unservable`: demand already known to have no option at all, with the rule and the reason.
    `started`: when the proposal began (the wall-clock limit counts from there). `group`: nodes alike to
    the decision are counted as one group (False: one choice per node, the same optimum, slower)."""
    require_solver()
    from migops.suggest.greedy import greedy
    from migops.suggest.realise import realise

    started = time.monotonic() if started is None else started
    unservable = dict(unservable or {})
    problem = build(nodes, options, [d for d in demands if d not in unservable], group)
    model = _Model(problem, limits.max_nodes)
    objectives = _objectives(model)
    stages = _Stages(model, limits, greedy(problem, limits.max_nodes), started)
    stages.run(objectives)
    return realise(nodes, problem, stages.values, unservable, limits.max_nodes, stages.stages(), started)

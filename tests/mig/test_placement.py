"""Placement search and change planner, checked against an independent brute-force oracle.

The oracle below shares nothing with mig/placement.py: it tries every valid start for every
instance (memoised on the set of slices taken), with the MIG User Guide's placement rules written out again.
"""

from __future__ import annotations

import itertools
import random
from collections import Counter
from functools import cache

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import migops.mig.placement as placement
from migops.mig.catalogue import catalogue
from migops.mig.placement import ChangePlan, Placement, place, plan_change

CAT = catalogue()
TABLES = {t.id: t for t in CAT.tables}
A100_40 = TABLES["a100-40gb"]
H100 = TABLES["h100-80gb"]


def gi(table, name):
    (found,) = [p for p in table.profiles if p.name == name]
    return found


# --- oracle ------------------------------------------------------------------------------------------


def oracle_feasible(table, request: dict, occupied: frozenset = frozenset(), compute_used: int = 0) -> bool:
    """Is there any assignment of valid starts, pairwise disjoint, within compute and max counts?"""
    if any(count > g.max_count for g, count in request.items()):
        return False
    instances = [g for g, count in request.items() for _ in range(count)]
    if compute_used + sum(g.compute_slices for g in instances) > table.compute_slices:
        return False
    shapes = tuple((tuple(g.starts), g.memory_slices) for g in instances)

    @cache
    def fit(i: int, taken: frozenset) -> bool:
        if i == len(shapes):
            return True
        starts, size = shapes[i]
        for start in starts:
            cells = frozenset(range(start, start + size))
            if max(cells) < table.memory_slices and not cells & taken and fit(i + 1, taken | cells):
                return True
        return False

    return fit(0, occupied)


def assert_valid_layout(table, layout, request: dict, keep=()):
    """Starts valid for each profile, no overlaps, compute within the GPU, exactly the multiset asked."""
    by_name = {g.name: g for g in table.profiles}
    taken: set[int] = set()
    compute = 0
    for p in tuple(keep) + tuple(layout):
        g = by_name[p.profile]
        assert p.start in g.starts, p
        assert p.size == g.memory_slices, p
        cells = set(range(p.start, p.start + p.size))
        assert max(cells) < table.memory_slices
        assert not cells & taken, f"overlap at {p}"
        taken |= cells
        compute += g.compute_slices
    assert compute <= table.compute_slices
    got = Counter(p.profile for p in tuple(keep) + tuple(layout))
    assert got == Counter({g.name: c for g, c in request.items() if c})


def requests(table, max_kinds: int = 4):
    """Random multisets over the table's profiles, counts up to one past the max (so over-max occurs)."""
    return st.dictionaries(st.sampled_from(table.profiles), st.integers(0, 3), max_size=max_kinds).map(
        lambda d: {g: min(c, g.max_count + 1) for g, c in d.items()}
    )


# --- MIG User Guide examples -----------------------------------------------------------------------


def layout_pairs(layout):
    return sorted((p.profile, p.start) for p in layout)


def test_user_guide_example_3g_1g_2g_1g():
    layout = place(A100_40, {gi(A100_40, "3g.20gb"): 1, gi(A100_40, "1g.5gb"): 2, gi(A100_40, "2g.10gb"): 1})
    assert layout_pairs(layout) == [("1g.5gb", 0), ("1g.5gb", 1), ("2g.10gb", 2), ("3g.20gb", 4)]
    assert [(p.start, p.size) for p in layout] == [(0, 1), (1, 1), (2, 2), (4, 4)]


def test_user_guide_example_2g_and_five_1g():
    layout = place(A100_40, {gi(A100_40, "2g.10gb"): 1, gi(A100_40, "1g.5gb"): 5})
    assert layout_pairs(layout) == [
        ("1g.5gb", 0),
        ("1g.5gb", 1),
        ("1g.5gb", 2),
        ("1g.5gb", 3),
        ("1g.5gb", 6),
        ("2g.10gb", 4),
    ]


def test_order_that_fails_in_nvml_is_placed():
    # `-cgi 19,19,14,9` fails in NVML (the 1g/2g taken first block both 3g slots); a search does not
    layout = place(A100_40, {gi(A100_40, "1g.5gb"): 2, gi(A100_40, "2g.10gb"): 1, gi(A100_40, "3g.20gb"): 1})
    assert layout is not None


def test_infeasible_and_over_max_return_none():
    assert place(H100, {gi(H100, "3g.40gb"): 2, gi(H100, "1g.10gb"): 1}) is None
    assert place(H100, {gi(H100, "1g.10gb"): 8}) is None
    assert place(H100, {gi(H100, "1g.10gb+me"): 2}) is None
    assert place(H100, {gi(H100, "7g.80gb"): 1}) == (Placement(0, 8, "7g.80gb"),)
    assert place(H100, {}) == ()


def test_placement_mask_and_dict():
    p = Placement(4, 4, "3g.40gb")
    assert p.mask == 0b11110000
    assert p.as_dict() == {"profile": "3g.40gb", "start": 4, "size": 4}


# --- determinism -------------------------------------------------------------------------------------


def test_same_input_same_layout_regardless_of_order():
    items = [(gi(H100, "1g.10gb"), 2), (gi(H100, "2g.20gb"), 1), (gi(H100, "3g.40gb"), 1)]
    first = place(H100, dict(items))
    assert first == place(H100, dict(items))
    rng = random.Random(7)
    for _ in range(10):
        shuffled = items[:]
        rng.shuffle(shuffled)
        placement._CACHE.clear()  # recompute, not a cache hit
        assert place(H100, dict(shuffled)) == first
    assert layout_pairs(first) == [("1g.10gb", 0), ("1g.10gb", 1), ("2g.20gb", 2), ("3g.40gb", 4)]


def test_zero_counts_do_not_change_the_answer():
    a = place(H100, {gi(H100, "1g.10gb"): 3})
    b = place(H100, {gi(H100, "1g.10gb"): 3, gi(H100, "7g.80gb"): 0})
    assert a == b and len(a) == 3


# --- property: place() is exact, for every table -----------------------------------------------------


@pytest.mark.parametrize("table_id", sorted(TABLES))
def test_place_matches_oracle(table_id):
    table = TABLES[table_id]

    @settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(requests(table))
    def check(request):
        placement._CACHE.clear()
        layout = place(table, request)
        expected = oracle_feasible(table, request)
        assert (layout is not None) == expected, (request, layout)
        if layout is not None:
            assert_valid_layout(table, layout, request)

    check()


def _all_requests(table):
    """Every multiset of the table's profiles with counts 0..max+1 whose memory is at most one
    slice over the GPU's: all feasible ones, and infeasible ones of every kind (over max, over
    memory, over compute, overlapping)."""
    profiles = table.profiles

    def rec(i, memory, current):
        if i == len(profiles):
            yield dict(current)
            return
        g = profiles[i]
        for count in range(0, g.max_count + 2):
            if memory + count * g.memory_slices > table.memory_slices + 1:
                break
            if count:
                current[g] = count
            yield from rec(i + 1, memory + count * g.memory_slices, current)
            current.pop(g, None)

    yield from rec(0, 0, {})


@pytest.mark.parametrize("table_id", sorted(TABLES))
def test_place_exhaustive(table_id):
    """Not sampled: every multiset of `_all_requests`, searched uncached and through place()."""
    table = TABLES[table_id]
    n = feasible = 0
    for request in _all_requests(table):
        n += 1
        layout = place(table, request)
        assert (layout is not None) == oracle_feasible(table, request), request
        if layout is not None:
            feasible += 1
            assert_valid_layout(table, layout, request)
            # the uncached search gives the same answer
            assert placement.search_layout(table, placement._order(table, placement.expand(request))) == layout
    assert n >= 6 and 0 < feasible < n  # the 2-slice RTX PRO 4500/5000 tables have 6 requests


# --- change planner ----------------------------------------------------------------------------------


def random_layout(table, rng: random.Random) -> tuple[Placement, ...]:
    """Any valid layout, not only ones our search would choose: random profiles at random starts."""
    taken = 0
    compute = 0
    out = []
    counts = Counter()
    for _ in range(rng.randint(0, 8)):
        g = rng.choice(table.profiles)
        start = rng.choice(g.starts)
        mask = ((1 << g.memory_slices) - 1) << start
        if (
            taken & mask
            or compute + g.compute_slices > table.compute_slices
            or counts[g.name] >= g.max_count
            or start + g.memory_slices > table.memory_slices
        ):
            continue
        taken |= mask
        compute += g.compute_slices
        counts[g.name] += 1
        out.append(Placement(start, g.memory_slices, g.name))
    return tuple(sorted(out))


def oracle_max_keep(table, current, desired: dict) -> int | None:
    """The largest subset of `current` around which the rest of `desired` can still be placed."""
    by_name = {g.name: g for g in table.profiles}
    wanted = Counter({g.name: c for g, c in desired.items() if c})
    if not oracle_feasible(table, desired):
        return None
    for size in range(len(current), -1, -1):
        for keep in itertools.combinations(current, size):
            kept = Counter(p.profile for p in keep)
            if any(kept[n] > wanted[n] for n in kept):
                continue
            cells = [c for p in keep for c in range(p.start, p.start + p.size)]
            if len(cells) != len(set(cells)):
                continue
            rest = {by_name[n]: wanted[n] - kept[n] for n in wanted if wanted[n] - kept[n]}
            used = sum(by_name[p.profile].compute_slices for p in keep)
            if oracle_feasible(table, rest, frozenset(cells), used):
                return size
    raise AssertionError("the empty keep set always works when desired is feasible")


def check_plan(table, current, desired, plan: ChangePlan | None):
    best = oracle_max_keep(table, current, desired)
    if best is None:
        assert plan is None
        return
    assert plan is not None
    assert len(plan.keep) == best, (current, desired, plan)
    assert sorted(plan.keep + plan.destroy) == sorted(current)
    assert not set(plan.keep) & set(plan.destroy)
    assert_valid_layout(table, plan.create, desired, keep=plan.keep)
    assert plan.layout == tuple(sorted(plan.keep + plan.create))
    assert [kind for kind, _ in plan.steps] == ["destroy"] * len(plan.destroy) + ["create"] * len(plan.create)


def test_plan_change_example():
    current = place(A100_40, {gi(A100_40, "1g.5gb"): 7})
    assert [p.start for p in current] == list(range(7))
    desired = {gi(A100_40, "3g.20gb"): 1, gi(A100_40, "1g.5gb"): 3}
    plan = plan_change(A100_40, current, desired)
    assert len(plan.keep) == 3 and all(p.profile == "1g.5gb" for p in plan.keep)
    assert plan.create == (Placement(4, 4, "3g.20gb"),)
    assert len(plan.destroy) == 4
    assert all(p.start < 4 for p in plan.keep) and all(p.start >= 3 for p in plan.destroy)
    check_plan(A100_40, current, desired, plan)


def test_plan_change_no_op_and_from_empty():
    current = place(H100, {gi(H100, "3g.40gb"): 2})
    same = plan_change(H100, current, {gi(H100, "3g.40gb"): 2})
    assert same.keep == current and same.destroy == () and same.create == () and same.steps == ()
    fresh = plan_change(H100, (), {gi(H100, "7g.80gb"): 1})
    assert fresh.create == (Placement(0, 8, "7g.80gb"),) and fresh.keep == () == fresh.destroy


def test_plan_change_infeasible_desired():
    current = place(H100, {gi(H100, "1g.10gb"): 7})
    assert plan_change(H100, current, {gi(H100, "3g.40gb"): 2, gi(H100, "1g.10gb"): 1}) is None
    assert plan_change(H100, current, {gi(H100, "1g.10gb"): 8}) is None


def test_plan_change_keeps_instance_in_the_way_only_when_possible():
    # a 1g at slice 4 blocks a 3g at 4; desired 3g + 1g: keep the 1g, put the 3g at 0
    current = (Placement(4, 1, "1g.10gb"),)
    plan = plan_change(H100, current, {gi(H100, "3g.40gb"): 1, gi(H100, "1g.10gb"): 1})
    assert plan.keep == current and plan.create == (Placement(0, 4, "3g.40gb"),)
    # desired 3g x2: the 1g has to go
    plan = plan_change(H100, current, {gi(H100, "3g.40gb"): 2})
    assert plan.keep == () and plan.destroy == current


@pytest.mark.parametrize("table_id", sorted(TABLES))
def test_plan_change_matches_oracle(table_id):
    table = TABLES[table_id]

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.randoms(use_true_random=False), requests(table))
    def check(rng, desired):
        current = random_layout(table, rng)
        check_plan(table, current, desired, plan_change(table, current, desired))

    check()


def oracle_busy_keep(table, current, desired: dict, busy: frozenset) -> tuple[int, int] | None:
    """(busy instances kept, instances kept) of the best keep set: the most busy ones first, then the most."""
    by_name = {g.name: g for g in table.profiles}
    wanted = Counter({g.name: c for g, c in desired.items() if c})
    if not oracle_feasible(table, desired):
        return None
    best = None
    for size in range(len(current), -1, -1):
        for keep in itertools.combinations(current, size):
            kept = Counter(p.profile for p in keep)
            cells = [c for p in keep for c in range(p.start, p.start + p.size)]
            if any(kept[n] > wanted[n] for n in kept) or len(cells) != len(set(cells)):
                continue
            rest = {by_name[n]: wanted[n] - kept[n] for n in wanted if wanted[n] - kept[n]}
            used = sum(by_name[p.profile].compute_slices for p in keep)
            if oracle_feasible(table, rest, frozenset(cells), used):
                score = (sum(p in busy for p in keep), size)
                best = score if best is None or score > best else best
    return best


def test_a_busy_instance_is_kept_where_an_index_first_plan_destroys_it():
    """H100: 1g.20gb at 0 and a 2g.20gb at 4 that runs work; the target 3g.40gb + 2g.20gb + 1g.20gb.
    Keeping the lowest start first puts the 3g at 4 over the busy 2g; keeping the busy one puts the 3g
    at 0 and the 1g.20gb at 6."""
    current = (Placement(0, 2, "1g.20gb"), Placement(4, 2, "2g.20gb"))
    desired = {gi(H100, "3g.40gb"): 1, gi(H100, "2g.20gb"): 1, gi(H100, "1g.20gb"): 1}
    blind = plan_change(H100, current, desired)
    assert blind.keep == (Placement(0, 2, "1g.20gb"),) and Placement(4, 2, "2g.20gb") in blind.destroy
    aware = plan_change(H100, current, desired, busy=[Placement(4, 2, "2g.20gb")])
    assert aware.keep == (Placement(4, 2, "2g.20gb"),)
    assert sorted(aware.create) == [Placement(0, 4, "3g.40gb"), Placement(6, 2, "1g.20gb")]
    assert_valid_layout(H100, aware.create, desired, keep=aware.keep)


@pytest.mark.parametrize("table_id", sorted(TABLES))
def test_busy_aware_plan_change_matches_oracle(table_id):
    """Against the oracle: the plan keeps as many busy instances as any layout of the target can, then
    as many instances as it can; and without busy instances it is the plan it always was."""
    table = TABLES[table_id]

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.randoms(use_true_random=False), requests(table))
    def check(rng, desired):
        current = random_layout(table, rng)
        busy = frozenset(p for p in current if rng.random() < 0.4)
        plan = plan_change(table, current, desired, busy)
        best = oracle_busy_keep(table, current, desired, busy)
        if best is None:
            assert plan is None
            return
        assert (sum(p in busy for p in plan.keep), len(plan.keep)) == best, (current, desired, busy, plan)
        assert sorted(plan.keep + plan.destroy) == sorted(current)
        assert_valid_layout(table, plan.create, desired, keep=plan.keep)
        assert plan_change(table, current, desired, ()) == plan_change(table, current, desired)

    check()

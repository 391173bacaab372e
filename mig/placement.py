"""Exact, deterministic MIG placement, and the smallest change from one layout to another.

Model (mig-hardware.md 4.1): a GPU instance occupies memory slices [start, start+size); instances may
not overlap; each profile has a fixed set of valid starts; compute slices add up to at most the GPU's
compute slice count. NVML's own placement is order-dependent and can fragment the GPU; we search.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from migops.mig.catalogue import GiProfile, ProfileTable


@dataclass(frozen=True, order=True)
class Placement:
    """One GPU instance on the slice map: start and size in memory slices."""

    start: int
    size: int
    profile: str

    @property
    def mask(self) -> int:
        return ((1 << self.size) - 1) << self.start

    def as_dict(self) -> dict[str, object]:
        return {"profile": self.profile, "start": self.start, "size": self.size}


def _order(table: ProfileTable, items: Iterable[GiProfile]) -> list[GiProfile]:
    """Largest first (memory, then compute), then by name: what makes the search short and stable."""
    return sorted(items, key=lambda gi: (-gi.memory_slices, -gi.compute_slices, gi.name))


def _start_preference(table: ProfileTable, gi: GiProfile) -> tuple[int, ...]:
    """Smallest-granule profiles fill from slice 0 up; larger ones from the top down.

    This reproduces NVML's layouts in the MIG User Guide (3g@4 + 2g@2 + 1g@0,1; 2g@4 + 1g@0,1,2,3,6)
    and keeps the low slices free for the profiles that can only start at 0.
    """
    smallest = min(p.memory_slices for p in table.profiles)
    return gi.starts if gi.memory_slices <= smallest else tuple(reversed(gi.starts))


def search_layout(
    table: ProfileTable,
    items: Sequence[GiProfile],
    occupied: int = 0,
    compute_used: int = 0,
) -> tuple[Placement, ...] | None:
    """Place every item (already ordered by `_order`) around `occupied`; None if no layout exists.

    Backtracking over valid starts; identical consecutive items take increasing start positions so
    permutations of equal instances are tried once. Exact: it finds a layout whenever one exists.
    """
    if compute_used + sum(gi.compute_slices for gi in items) > table.compute_slices:
        return None
    free = table.memory_slices - bin(occupied).count("1")
    if sum(gi.memory_slices for gi in items) > free:
        return None
    options = [
        [
            (s, ((1 << gi.memory_slices) - 1) << s)
            for s in _start_preference(table, gi)
            if s + gi.memory_slices <= table.memory_slices
        ]
        for gi in items
    ]
    n = len(items)
    chosen: list[int] = [0] * n  # index into options[i]
    placed: list[Placement] = []

    def step(i: int, occ: int, min_option: int) -> bool:
        if i == n:
            return True
        same_as_previous = i > 0 and items[i] is items[i - 1]
        first = min_option if same_as_previous else 0
        gi = items[i]
        for k in range(first, len(options[i])):
            start, mask = options[i][k]
            if occ & mask:
                continue
            chosen[i] = k
            placed.append(Placement(start, gi.memory_slices, gi.name))
            nxt_same = i + 1 < n and items[i + 1] is gi
            if step(i + 1, occ | mask, k + 1 if nxt_same else 0):
                return True
            placed.pop()
        return False

    if not step(0, occupied, 0):
        return None
    return tuple(sorted(placed))


def expand(request: Mapping[GiProfile, int]) -> list[GiProfile]:
    return [gi for gi, count in request.items() for _ in range(count)]


_CACHE: dict[tuple[str, tuple[tuple[str, int], ...]], tuple[Placement, ...] | None] = {}
_CACHE_LIMIT = 1 << 16  # a long-running webhook sees untrusted requests: keep the memo bounded


def place(table: ProfileTable, request: Mapping[GiProfile, int]) -> tuple[Placement, ...] | None:
    """The layout for a multiset of GI profiles on one GPU, or None when none exists.

    Same input, same layout. Results are memoised per (table, request): the webhook and the reconciler
    ask the same few questions over and over.
    """
    key = (table.id, tuple(sorted((gi.name, c) for gi, c in request.items() if c)))
    if key not in _CACHE:
        if len(_CACHE) >= _CACHE_LIMIT:
            _CACHE.clear()
        if any(c > gi.max_count for gi, c in request.items()):
            _CACHE[key] = None
        else:
            _CACHE[key] = search_layout(table, _order(table, expand(request)))
    return _CACHE[key]


@dataclass(frozen=True)
class ChangePlan:
    """From a current layout to a desired one: what stays, what goes, what is created (and where)."""

    keep: tuple[Placement, ...]
    destroy: tuple[Placement, ...]
    create: tuple[Placement, ...]

    @property
    def steps(self) -> tuple[tuple[str, Placement], ...]:
        """Destroys first (they free the slices), then creates, each in slice order."""
        return tuple(("destroy", p) for p in self.destroy) + tuple(("create", p) for p in self.create)

    @property
    def layout(self) -> tuple[Placement, ...]:
        return tuple(sorted(self.keep + self.create))


def plan_change(
    table: ProfileTable,
    current: Sequence[Placement],
    desired: Mapping[GiProfile, int],
    busy: Iterable[Placement] = (),
) -> ChangePlan | None:
    """The smallest destroy/create plan that keeps every instance that can stay in place, and first of
    all the `busy` ones (instances running work).

    Tries keep-sets keeping the most busy instances first, then from largest to smallest (ties: lower
    starts kept first); the first one around which the rest of the desired geometry can be placed wins:
    among layouts that realise the target, one that keeps every busy instance it can, then the fewest
    steps. None when the desired geometry cannot be placed at all.
    """
    wanted = Counter({gi.name: c for gi, c in desired.items() if c})
    by_name = {gi.name: gi for gi in desired}
    if any(c > by_name[name].max_count for name, c in wanted.items()):
        return None
    current_sorted = tuple(sorted(current))
    candidates = [p for p in current_sorted if p.profile in wanted]
    keeps = [keep for size in range(len(candidates), -1, -1) for keep in itertools.combinations(candidates, size)]
    running = frozenset(busy)
    if running:
        keeps.sort(key=lambda keep: -sum(p in running for p in keep))  # stable: size, then starts, within
    for keep in keeps:
        created = _around(table, keep, wanted, by_name)
        if created is not None:
            keep_set = set(keep)
            destroy = tuple(p for p in current_sorted if p not in keep_set)
            return ChangePlan(tuple(keep), destroy, created)
    return None


def _around(
    table: ProfileTable, keep: Sequence[Placement], wanted: Counter[str], by_name: Mapping[str, GiProfile]
) -> tuple[Placement, ...] | None:
    """The rest of the wanted instances placed around `keep`; None when `keep` cannot be part of it."""
    kept = Counter(p.profile for p in keep)
    if any(kept[name] > wanted[name] for name in kept):
        return None
    occupied = 0
    for p in keep:
        if occupied & p.mask:
            return None
        occupied |= p.mask
    rest = {by_name[name]: wanted[name] - kept[name] for name in wanted}
    compute_used = sum(by_name[p.profile].compute_slices for p in keep)
    return search_layout(table, _order(table, expand(rest)), occupied, compute_used)

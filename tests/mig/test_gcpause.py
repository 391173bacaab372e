"""paused_gc: the collector is off during the call, its setting restored after, and what the call kept
joins the oldest generation without being walked, where cycles are still found."""

from __future__ import annotations

import gc
import weakref

from migops.mig.gcpause import HAND_OVER, paused_gc


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def test_off_during_the_call_and_restored_after() -> None:
    assert gc.isenabled()
    with paused_gc():
        assert not gc.isenabled()
        with paused_gc():  # nested: changes nothing
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_left_off_when_it_was_off() -> None:
    gc.disable()
    try:
        with paused_gc():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_what_the_call_kept_is_not_walked_when_it_ends() -> None:
    # Everything made during a pause counts as young: resumed as it is, the collector would walk it all
    # at the next allocation.
    collections: list[int] = []

    def seen(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collections.append(info["generation"])

    gc.collect()
    gc.callbacks.append(seen)
    try:
        with paused_gc():
            kept = [[i] for i in range(HAND_OVER + 10_000)]
        more = [[i] for i in range(100)]  # allocations after the pause
    finally:
        gc.callbacks.remove(seen)
    assert collections == []
    assert gc.is_tracked(kept[0]) and gc.is_tracked(more[0])
    assert gc.get_freeze_count() == 0  # nothing is left frozen
    assert any(o is kept for o in gc.get_objects(generation=2))  # old, where full collections look


def test_a_small_call_leaves_the_collector_as_it_was() -> None:
    gc.collect()
    with paused_gc():
        kept = [[i] for i in range(1_000)]
    assert not any(o is kept for o in gc.get_objects(generation=2))  # young: walked as usual, not old yet


def test_a_cycle_made_during_a_pause_is_still_collected() -> None:
    with paused_gc():
        a, b = _Node(), _Node()
        a.other, b.other = b, a
        gone = weakref.ref(a)
    del a, b
    assert gone() is not None  # a cycle: reference counting alone does not free it
    gc.collect()
    assert gone() is None

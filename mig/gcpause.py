"""Pausing Python's cyclic garbage collector while the MIG core reads or judges a large input.

Reading a 1 MiB config makes a few hundred thousand small objects (nodes, values, paths, locations), and
judging it as many again; every 700 container allocations the collector walks the young ones, and the
older generations are walked again as they grow: on the largest admissible files the collector would
take a large share of the time (bench/mig_worst_case.py). The reader and the validator make no reference cycles (tests check), so
reference counting frees everything as before; a pause only defers the collection of cycles made
elsewhere in the meantime.

The one place that does this, used by the core's entry points that handle a whole input (`read_first`,
`read_stream`, `parse_config`, `read_file`, `validate`, ...).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

# Young objects left at the end of a pause above which they are handed to the oldest generation rather
# than walked. Only large inputs get there, so a server's ordinary calls leave its collector's schedule
# as it was: handing over every review's objects would keep the webhook's cyclic garbage until full
# collections, and a worker's memory would creep (bench/webhook_adversarial.py).
HAND_OVER = 50_000


@contextmanager
def paused_gc() -> Iterator[None]:
    """Pause the cyclic collector for one call (also a decorator: `@paused_gc()`). The previous setting
    is restored: a nested pause changes nothing, and a concurrent call in another thread runs with the
    collector on once the first pause ends (as it would anyway), so the collector is never held off for
    longer than one call."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            if gc.get_count()[0] > HAND_OVER:
                # What the call made and kept joins the oldest generation unexamined (freeze, then
                # unfreeze: two list splices, and the young generation's count reset). Resumed as it is,
                # the collector would walk it all at the next allocation, since everything made during
                # the pause counts as young, a cost that grows with the input. Cycles among those
                # objects are still found, by the next full collection.
                gc.freeze()
                gc.unfreeze()
            gc.enable()

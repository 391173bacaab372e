"""Pausing Python's cyclic garbage collector while the MIG core reads or judges a large input.

Reading a 1 MiB config makes a few hundred thousand small objects (nodes, values, paths, locations), and
judging it as many again; every 700 container allocations the collector walks the young ones, and the
older generations are walked again as they grow: on the largest admissible files the collector took
about half of the time. The reader and the validator make no reference cycles (tests check), so
reference counting frees everything as before; a pause only defers the collection of cycles made
elsewhere in the meantime.

The one place that does this, used by the core's entry points that handle a whole input (`read_first`,
`read_stream`, `parse_config`, `read_file`, `validate`, ...).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


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
            # What the call made and kept joins the oldest generation unexamined (freeze, then unfreeze:
            # two list splices, and the young generation's count reset). Resuming as it is would walk it
            # all at the next allocation, since everything made during the pause counts as young: a tenth
            # of judging the largest files. Cycles among those objects are still found, by the next full
            # collection.
            gc.freeze()
            gc.unfreeze()
            gc.enable()

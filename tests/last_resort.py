"""Teardown that also runs when a test process ends without its fixtures' teardown.

CI cancelling the job sends SIGTERM (or SIGHUP), and an interpreter can exit without finishing its
fixtures; neither runs a `finally`. What a fixture starts outside its own process group (a control
plane, the real node, a `migops local up` stack in sessions of its own) is stopped here then.
"""

from __future__ import annotations

import atexit
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType


@contextmanager
def stopped_on_exit(stop: Callable[[], object]) -> Iterator[None]:
    """While inside, `stop` also runs at interpreter exit and on SIGTERM/SIGHUP, before the signal goes on
    to the handler installed before this one (nested uses chain: the innermost stops first). The
    fixture's own teardown calls `stop` otherwise: leaving the block only unregisters it."""
    previous: dict[int, object] = {}

    def handler(signum: int, frame: FrameType | None) -> None:
        try:
            stop()
        finally:
            signal.signal(signum, previous.get(signum, signal.SIG_DFL))  # type: ignore[arg-type]
            signal.raise_signal(signum)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        previous[sig] = signal.signal(sig, handler)
    atexit.register(stop)
    try:
        yield
    finally:
        atexit.unregister(stop)
        for sig, old in previous.items():
            signal.signal(sig, old)  # type: ignore[arg-type]

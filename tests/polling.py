"""Waiting in tests: the API server, watches, agents and webhooks all act a moment after a test's write.

One helper for every test that polls (imported by name, like gitrepo: `from polling import until`).
Timeouts are generous — the machine may be shared and slow — and nothing ever asserts on speed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def until(check: Callable[[], Any], timeout: float = 60.0, what: str = "condition", interval: float = 0.1) -> Any:
    """Call `check` until it returns something truthy, and return that; fail with the last value after
    `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        last = check()
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not met after {timeout:.0f}s (last: {last!r})")
        time.sleep(interval)

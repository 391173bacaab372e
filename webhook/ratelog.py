"""Log lines about bad requests, rate-limited: a flood of garbage writes a few lines, not megabytes."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any


class Window:
    """At most `per_interval` events per `interval` seconds (a fixed window): log lines here, the
    webhook's live reads of the API server (server.migsync_reader)."""

    def __init__(self, *, per_interval: int, interval: float, clock: Any = time.monotonic) -> None:
        self._per = per_interval
        self._interval = interval
        self._clock = clock
        self._lock = threading.Lock()
        self._start = -interval
        self._count = 0
        self.dropped = 0  # refused since the last one admitted

    def admit(self) -> int | None:
        """None when this one is over the limit, else how many were refused before it."""
        with self._lock:
            now = self._clock()
            if now - self._start >= self._interval:
                self._start, self._count = now, 0
            if self._count >= self._per:
                self.dropped += 1
                return None
            self._count += 1
            dropped, self.dropped = self.dropped, 0
            return dropped


class RateLimitedLog:
    """At most `per_interval` lines per `interval` seconds; the next line that passes says how many
    were dropped meanwhile."""

    def __init__(
        self, logger: logging.Logger, *, per_interval: int = 10, interval: float = 10.0, clock: Any = time.monotonic
    ) -> None:
        self._log = logger
        self._window = Window(per_interval=per_interval, interval=interval, clock=clock)

    @property
    def dropped(self) -> int:
        return self._window.dropped

    def _admit(self) -> int | None:
        """None to drop this line, else how many were dropped before it."""
        return self._window.admit()

    def _emit(self, level: int, msg: str, args: tuple, **kwargs: Any) -> None:
        dropped = self._admit()
        if dropped is None:
            return
        if dropped:
            msg += f" ({dropped} similar lines dropped)"
        self._log.log(level, msg, *args, **kwargs)

    def warning(self, msg: str, *args: Any, **kwargs: Any) -> None:
        self._emit(logging.WARNING, msg, args, **kwargs)

    def error(self, msg: str, *args: Any, **kwargs: Any) -> None:
        self._emit(logging.ERROR, msg, args, **kwargs)

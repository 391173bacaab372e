"""The reconciler's loop: syncs driven by the interval, the hook and the informers' events."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Protocol

from migops.api import objects
from migops.api.migsync import SyncSpec
from migops.reconciler.reasons import SyncFailure, SyncOutcome, SyncResult
from migops.reconciler.status_writer import STATUS_MIN_INTERVAL

log = logging.getLogger(__name__)
COALESCE = 0.05  # a wave lands as hundreds of watch events: one sync for a burst


class Syncs(Protocol):
    """What the loop drives (reconciler.controller.Reconciler)."""

    stop_event: threading.Event
    wake: threading.Event

    @property
    def failure(self) -> SyncFailure | None: ...
    @property
    def status_pending(self) -> bool: ...
    def current_spec(self) -> SyncSpec: ...
    def migsync_object(self) -> dict[str, Any] | None: ...
    def sync(self, fetch: bool = True) -> SyncResult: ...
    def flush_status(self) -> None: ...


def run(r: Syncs, stop: threading.Event, hook: threading.Event) -> None:
    """Fetch every interval (or when `hook` is set), follow the cluster in between. Errors back off
    exponentially (1 s doubling to the interval); a refused commit waits for the next."""
    next_fetch, backoff, generation = 0.0, 1.0, None
    while not stop.is_set() and not r.stop_event.is_set():
        try:
            interval = r.current_spec().interval
        except ValueError:
            interval = SyncSpec.interval  # its default: the spec cannot be read
        seen = objects.meta(r.migsync_object()).get("generation")
        fetch = time.monotonic() >= next_fetch or hook.is_set() or seen != generation  # a new spec: fetch at once
        generation = seen
        hook.clear()
        r.wake.clear()
        try:
            result = r.sync(fetch=fetch)
        except Exception as exc:  # the loop must survive anything
            log.exception("sync failed: %s", exc)
            result = SyncResult(SyncOutcome.APPLY_FAILED, message=str(exc))
        if fetch:
            if result.outcome in (SyncOutcome.UNREACHABLE, SyncOutcome.APPLY_FAILED) and not (
                r.failure and r.failure.stalled
            ):
                next_fetch = time.monotonic() + min(backoff, interval)
                backoff = min(backoff * 2, interval)
            else:
                next_fetch, backoff = time.monotonic() + interval, 1.0
        wait = max(0.0, next_fetch - time.monotonic())
        if r.status_pending:
            wait = min(wait, STATUS_MIN_INTERVAL)
        _wait(r, stop, hook, wait)
        if r.status_pending and not r.wake.is_set():
            r.flush_status()


def _wait(r: Syncs, stop: threading.Event, hook: threading.Event, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not stop.is_set() and not hook.is_set():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return
        if r.wake.wait(min(remaining, 0.5)):
            stop.wait(COALESCE)
            return

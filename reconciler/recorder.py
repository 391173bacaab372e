"""Events of the reconciler: recorded on the MigSync (else the MIG ConfigMap), repeats de-duplicated,
posted on a thread of their own."""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Hashable, Mapping
from typing import Any

from kubernetes import client as k8s

from migops.api import objects
from migops.api.migsync import API_VERSION, KIND
from migops.api.names import RECONCILER_CONTROLLER
from migops.gitops.desired import DesiredState
from migops.kube import events
from migops.reconciler.metrics import Metrics
from migops.reconciler.reasons import SyncNote

log = logging.getLogger(__name__)


class Dedup:
    """Keys seen before, bounded: past `size` keys it forgets them all (a repeat then is one more Event,
    never unbounded memory)."""

    def __init__(self, size: int = 1000) -> None:
        self._size = size
        self._seen: set[Hashable] = set()

    def first(self, key: Hashable) -> bool:
        if key in self._seen:
            return False
        self._seen.add(key)
        if len(self._seen) > self._size:
            self._seen.clear()
        return True


class EventRecorder:
    """Events recorded on a thread of their own, so that a sync never waits on the Events API: `record`
    logs the Event at once and queues it; the thread posts the queue in order. At most `QUEUED` wait:
    past that the oldest are dropped (said in the log, with how many) -- a sync that notes a burst
    of per-node Events never holds the next sync, nor grows the process without bound."""

    QUEUED = 1000

    def __init__(
        self,
        api: k8s.ApiClient,
        metrics: Metrics,
        *,
        dry_run: bool,
        default_target: Callable[[], Mapping[str, Any] | None],
    ) -> None:
        self._api = api
        self._metrics = metrics
        self._dry_run = dry_run
        self._default_target = default_target
        self._dedup = Dedup()
        self._queue: deque[tuple[SyncNote, Mapping[str, Any]]] = deque()
        self._changed = threading.Condition()
        self._posting = False
        self._stopped = False
        self._thread: threading.Thread | None = None

    def record(self, note: SyncNote, target: Mapping[str, Any] | None = None) -> None:
        """Record `note` on its involved object, else on `target`, else on the default target."""
        if self._dry_run or (note.key is not None and not self._dedup.first(note.key)):
            return
        # Each Event is a log line too (as Flux's controllers log theirs): the revision is bound by the sync.
        involved = note.involved or {}
        node = objects.meta(involved).get("name") if involved.get("kind") == "Node" else None
        level = logging.WARNING if note.type == "Warning" else logging.INFO
        log.log(level, "%s: %s", note.reason, note.message, extra={"node": node} if node else None)
        target = note.involved or target or self._default_target()
        if target is None:
            return
        with self._changed:
            if len(self._queue) >= self.QUEUED:
                dropped = self._queue.popleft()[0]
                log.warning("too many Events waiting to be recorded: dropped %s (%s)", dropped.reason, dropped.message)
            self._queue.append((note, target))
            if self._thread is None:
                self._thread = threading.Thread(target=self._post_all, name="events", daemon=True)
                self._thread.start()
            self._changed.notify_all()

    def flush(self, timeout: float) -> bool:
        """Wait until every queued Event is posted (or `timeout` seconds); whether it was."""
        with self._changed:
            return self._changed.wait_for(lambda: not self._queue and not self._posting, timeout)

    def stop(self, timeout: float = 5.0) -> None:
        """Post what is queued (for at most `timeout` seconds), then end the thread."""
        self.flush(timeout)
        with self._changed:
            self._stopped = True
            self._changed.notify_all()

    def _post_all(self) -> None:
        while True:
            with self._changed:
                self._posting = False
                self._changed.notify_all()
                self._changed.wait_for(lambda: self._queue or self._stopped)
                if not self._queue:
                    return
                note, target = self._queue.popleft()
                self._posting = True
            self._post(note, target)

    def _post(self, note: SyncNote, target: Mapping[str, Any]) -> None:
        self._metrics.events.labels(note.reason).inc()
        events.record(
            self._api,
            target,
            note.reason,
            note.message,
            type=note.type,  # type: ignore[arg-type]
            controller=RECONCILER_CONTROLLER,
        )


def event_target(migsync: Mapping[str, Any] | None, desired: DesiredState | None) -> dict[str, Any] | None:
    """Events go on the MigSync; without one (no CRD), on the MIG ConfigMap of the desired state in force."""
    if migsync is not None:
        meta = objects.meta(migsync)
        return {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": {"name": meta.get("name"), "namespace": meta.get("namespace"), "uid": meta.get("uid")},
        }
    if desired is not None:
        return {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": desired.configmap, "namespace": desired.namespace},
        }
    return None

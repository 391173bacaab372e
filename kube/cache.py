"""The informers of one process, shared by every part of it, and what they changed since a reader looked.

`Cache` keeps one informer per watch (a kind and its filters, named by a key), as controller-runtime's
manager keeps one cache for all its controllers: a part asks for a watch by its key and gets the
informer that serves it, made once. Every part that listens hears each of its events, on the informer's
thread.

A listener runs on that thread while its part may be working on what it read, so it never changes
anything the part reads: it records what changed in a `Changes` journal and wakes the part, which takes
the journal's entries whole, in their order, when it next works.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

from migops.kube.informer import Handler, Informer, Obj

T = TypeVar("T")


class Cache:
    """The process's informers by key, each made on first use and stopped with the cache."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._informers: dict[str, Informer] = {}
        self._listeners: dict[str, tuple[Handler, ...]] = {}

    def informer(self, key: str, make: Callable[[Handler], Informer]) -> Informer:
        """The informer `key` names; `make(handler)` builds it the first time (not started), with the
        handler that tells every listener of `key`."""
        with self._lock:
            found = self._informers.get(key)
            if found is None:
                found = self._informers[key] = make(lambda kind, obj: self._tell(key, kind, obj))
            return found

    def listen(self, key: str, handler: Handler) -> None:
        """`handler` hears every event of `key`'s informer from its next one on (listen before it starts
        to hear its first list). It runs on the informer's thread: record and wake, nothing more."""
        with self._lock:
            self._listeners[key] = (*self._listeners.get(key, ()), handler)

    def _tell(self, key: str, kind: str, obj: Obj) -> None:
        for handler in self._listeners.get(key, ()):  # a tuple, replaced whole by `listen`
            handler(kind, obj)

    def stop(self) -> None:
        with self._lock:
            informers = list(self._informers.values())
        for informer in informers:
            informer.stop()


class Changes(Generic[T]):
    """What an informer reported since its reader last took it, numbered in the order it arrived.

    `record` runs on the informer's thread: it keeps `summary(kind, obj)` (what the reader needs of the
    event, made outside the lock) and wakes the reader. The reader `take`s every entry at once and may
    ask `count` at any time: an entry numbered above a count read at some moment arrived after it.
    """

    def __init__(self, summary: Callable[[str, Obj], T], wake: Callable[[], None]) -> None:
        self._summary = summary
        self._wake = wake
        self._lock = threading.Lock()
        self._count = 0
        self._pending: list[tuple[int, T]] = []

    def record(self, kind: str, obj: Obj) -> None:
        item = self._summary(kind, obj)
        with self._lock:
            self._count += 1
            self._pending.append((self._count, item))
        self._wake()

    def take(self) -> tuple[int, list[tuple[int, T]]]:
        """(the count so far, the entries since the last take, oldest first)."""
        with self._lock:
            taken, self._pending = self._pending, []
            return self._count, taken

    def count(self) -> int:
        with self._lock:
            return self._count

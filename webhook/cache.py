"""A small thread-safe LRU map: verdicts by content hash, and the MIG core's results by content.

Bounded by total weight: by default each entry weighs 1; a caller can weigh entries (app.py weighs a
verdict by its bytes, checks.py a parsed file by its text length: a parsed 800 KB file takes ~26 MB).
Keys must be bounded by their maker (digests, values capped by admission.check_object). A flood of
distinct objects only evicts, never grows memory.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class LRU(Generic[K, V]):
    def __init__(self, size: int = 4096) -> None:
        if size < 1:
            raise ValueError("size must be at least 1")
        self.size = size
        self._items: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self._weight = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: K) -> V | None:
        with self._lock:
            found = self._items.get(key)
            if found is None:
                self.misses += 1
                return None
            self._items.move_to_end(key)
            self.hits += 1
            return found[0]

    def put(self, key: K, value: V, weight: int = 1) -> None:
        """Remember `value`; the least recently used entries go until the total weight fits (an entry
        heavier than the whole size is not kept)."""
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._weight -= old[1]
            if weight > self.size:
                return
            self._items[key] = (value, weight)
            self._weight += weight
            while self._weight > self.size:
                _, (_, dropped) = self._items.popitem(last=False)
                self._weight -= dropped

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._weight = 0

    def __len__(self) -> int:
        return len(self._items)

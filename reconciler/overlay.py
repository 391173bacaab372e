"""Our writes laid over what the informers show, until the informers show them.

What an informer shows lags our own writes by a watch event: a sync that runs in between would see
the old label and write it again. The overlay remembers each label (and the ConfigMap text) we set
until the informer shows it, or for `ttl` seconds (by then the watch would have shown it).
"""
from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from migops.kube.names import MIG_CONFIG_LABEL
from migops.reconciler.plan import with_config_label

WRITTEN_TTL = 60.0


class WriteOverlay:
    def __init__(self, ttl: float = WRITTEN_TTL, clock: Any = time.monotonic) -> None:
        self._ttl = ttl
        self._clock = clock
        self._labels: dict[str, tuple[str | None, float]] = {}  # node -> (label we set, when)
        self._configmap: tuple[str, float] | None = None

    def wrote_label(self, node: str, label: str | None) -> None:
        self._labels[node] = (label, self._clock())

    def wrote_configmap(self, text: str) -> None:
        self._configmap = (text, self._clock())

    def node_event(self, kind: str, name: str, labels: Mapping[str, str]) -> None:
        """An informer event: forget a write the informer now shows (or whose node is gone)."""
        written = self._labels.get(name)
        if kind == "DELETED" or (written is not None and labels.get(MIG_CONFIG_LABEL) == written[0]):
            self._labels.pop(name, None)

    def nodes(self, seen: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """`seen` (a snapshot the caller owns) with our unconfirmed label writes laid over it."""
        now = self._clock()
        for name, (label, when) in list(self._labels.items()):
            obj = seen.get(name)
            if obj is None or now - when > self._ttl:
                self._labels.pop(name, None)
                continue
            seen[name] = with_config_label(obj, label)
        return seen

    def configmap_text(self, seen: str | None) -> str | None:
        """The ConfigMap's config.yaml as it is once our last write lands (`seen`: what the informer has)."""
        if self._configmap is None:
            return seen
        text, when = self._configmap
        if seen == text or self._clock() - when >= self._ttl:
            self._configmap = None
            return seen
        return text

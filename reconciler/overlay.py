"""Our writes laid over what the informers show, until the informers show them.

What an informer shows lags our own writes by a watch event: a sync that runs in between would see
the old label and write it again. The overlay remembers each label (and the ConfigMap text) we set
until the informer shows it, or for `ttl` seconds (by then the watch would have shown it).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from migops.api.names import MANAGED_BY_ANNOTATION, MIG_CONFIG_LABEL
from migops.reconciler.plan import with_config_label, without_annotations

_RELEASED = object()  # a release (annotations removed, label left as it is)

WRITTEN_TTL = 60.0


class WriteOverlay:
    def __init__(self, owner: str = "", ttl: float = WRITTEN_TTL, clock: Any = time.monotonic) -> None:
        self._owner = owner
        self._ttl = ttl
        self._clock = clock
        self._labels: dict[str, tuple[Any, str, float]] = {}  # node -> (label we set or _RELEASED, revision, when)
        self._configmap: tuple[str, float] | None = None

    def wrote_label(self, node: str, label: str | None, revision: str = "") -> None:
        self._labels[node] = (label, revision, self._clock())

    def released(self, node: str) -> None:
        self._labels[node] = (_RELEASED, "", self._clock())

    def wrote_configmap(self, text: str) -> None:
        self._configmap = (text, self._clock())

    def node_event(self, kind: str, name: str, labels: Mapping[str, str], annotations: Mapping[str, str]) -> None:
        """An informer event: forget a write the informer now shows (or whose node is gone)."""
        written = self._labels.get(name)
        if written is None:
            return
        owner = annotations.get(MANAGED_BY_ANNOTATION)
        if written[0] is _RELEASED:
            shown = owner is None
        elif written[0] is None:
            shown = MIG_CONFIG_LABEL not in labels
        else:
            shown = labels.get(MIG_CONFIG_LABEL) == written[0] and owner == self._owner
        if kind == "DELETED" or shown:
            self._labels.pop(name, None)

    def nodes(self, seen: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """`seen` (a snapshot the caller owns) with our unconfirmed label writes laid over it."""
        now = self._clock()
        for name, (label, revision, when) in list(self._labels.items()):
            obj = seen.get(name)
            if obj is None or now - when > self._ttl:
                self._labels.pop(name, None)
                continue
            seen[name] = (
                without_annotations(obj) if label is _RELEASED else with_config_label(obj, label, self._owner, revision)
            )
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

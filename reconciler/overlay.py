"""Our writes laid over what the informers show, until the informers show them.

What an informer shows lags our own writes by a watch event: a sync that runs in between would see
the old label and write it again. The overlay remembers each label (and the ConfigMap text) we set
until a node event that arrived after the write began shows it, or for `WRITTEN_TTL` seconds (by then
the watch would have shown it). It is a value in the sync's state: a sync lays it over its snapshot of
the nodes and returns a new one with what it wrote; node events reach it only through the sync's fold.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from migops.reconciler.changes import Numbered
from migops.reconciler.plan import with_config_label, without_annotations

WRITTEN_TTL = 60.0


@dataclass(frozen=True)
class Written:
    """One write of ours to a node: its label (None: removed), or a release (the annotations removed,
    the label left as it is)."""

    label: str | None
    revision: str
    at: float  # monotonic seconds
    after: int  # the node journal's count when the write began: later events may show it
    release: bool = False

    def shown(self, config: str | None, owner: str | None, ours: str) -> bool:
        if self.release:
            return owner is None
        if self.label is None:
            return config is None
        return config == self.label and owner == ours


@dataclass(frozen=True)
class WriteOverlay:
    labels: Mapping[str, Written] = field(default_factory=dict)
    configmap: tuple[str, float] | None = None  # (the text we wrote, when)

    def wrote(self, writes: Iterable[tuple[str, str | None]], revision: str, at: float, after: int) -> WriteOverlay:
        added = {name: Written(label, revision, at, after) for name, label in writes}
        return WriteOverlay({**self.labels, **added}, self.configmap) if added else self

    def released(self, names: Iterable[str], at: float, after: int) -> WriteOverlay:
        added = {name: Written(None, "", at, after, release=True) for name in names}
        return WriteOverlay({**self.labels, **added}, self.configmap) if added else self

    def wrote_configmap(self, text: str, at: float) -> WriteOverlay:
        return WriteOverlay(self.labels, (text, at))

    def observed(self, changes: Sequence[Numbered], ours: str) -> WriteOverlay:
        """Without the writes a node event after them shows (or whose node is gone)."""
        if not self.labels:
            return self
        kept = dict(self.labels)
        for number, change in changes:
            written = kept.get(change.name)
            if written is not None and number > written.after:
                if change.gone or written.shown(change.config, change.owner, ours):
                    del kept[change.name]
        return self if len(kept) == len(self.labels) else WriteOverlay(kept, self.configmap)

    def nodes(self, seen: dict[str, dict[str, Any]], ours: str, now: float) -> tuple[dict[str, Any], WriteOverlay]:
        """`seen` (a snapshot the caller owns) with our unconfirmed writes laid over it; the overlay
        without the writes that expired or whose node is gone."""
        kept: dict[str, Written] = {}
        for name, written in self.labels.items():
            obj = seen.get(name)
            if obj is None or now - written.at > WRITTEN_TTL:
                continue
            kept[name] = written
            seen[name] = (
                without_annotations(obj)
                if written.release
                else with_config_label(obj, written.label, ours, written.revision)
            )
        return seen, (self if len(kept) == len(self.labels) else WriteOverlay(kept, self.configmap))

    def configmap_text(self, seen: str | None, now: float) -> tuple[str | None, WriteOverlay]:
        """The ConfigMap's config.yaml as it is once our last write lands (`seen`: what the informer
        has); the overlay without that write once the informer shows it or it expired."""
        if self.configmap is None:
            return seen, self
        text, at = self.configmap
        if seen == text or now - at >= WRITTEN_TTL:
            return seen, WriteOverlay(self.labels, None)
        return text, self

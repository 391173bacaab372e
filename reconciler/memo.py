"""Resolving a revision reads every node; during a rollout nearly every watch event is a state label or
the agent's digest, which resolving never reads. The memo keeps the last answers (a desired state, or
why the revision cannot be applied) until what resolving reads changes: the revision, the ClusterPolicy
settings, or the node "topology" (a node added or gone, its labels other than the config and state,
its GPUs), counted from the node events a sync folds in (`changes.NodeUpdate.topology`). A value in the
sync's state, like the overlay."""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from migops.gitops.desired import DesiredState
from migops.reconciler.changes import Numbered
from migops.reconciler.reasons import SyncFailure

Key = tuple[Any, ...]
_KEPT = 4  # a sync may try the newest revision (refused) and then the one in force


@dataclass(frozen=True)
class ResolveMemo:
    topology: int = 0  # how many times what resolving reads has changed
    fingerprints: Mapping[str, int] = field(default_factory=dict)  # node -> NodeUpdate.topology
    found: Mapping[Key, DesiredState | SyncFailure] = field(default_factory=dict)

    def observed(self, changes: Sequence[Numbered]) -> ResolveMemo:
        """The memo after these node events: the topology counted on, when one changed it."""
        changed: dict[str, int | None] = {}
        bumps = 0
        for _, change in changes:
            fingerprint = None if change.gone else change.topology
            before = changed[change.name] if change.name in changed else self.fingerprints.get(change.name)
            if before != fingerprint:
                changed[change.name] = fingerprint
                bumps += 1
        if not bumps:
            return self
        fingerprints = {**self.fingerprints, **{n: f for n, f in changed.items() if f is not None}}
        for name in (n for n, f in changed.items() if f is None):
            fingerprints.pop(name, None)
        return ResolveMemo(self.topology + bumps, fingerprints, self.found)

    def key(self, revision: str, path: str, settings: Hashable) -> Key:
        return (revision, path, self.topology, settings)

    def get(self, key: Key) -> DesiredState | SyncFailure | None:
        return self.found.get(key)

    def put(self, key: Key, found: DesiredState | SyncFailure) -> ResolveMemo:
        kept = {k: v for k, v in self.found.items() if k[2] == self.topology}  # older topologies are stale
        kept[key] = found
        return ResolveMemo(self.topology, self.fingerprints, dict(list(kept.items())[-_KEPT:]))

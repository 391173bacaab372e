"""Resolving a revision reads every node; during a rollout nearly every watch event is a state label or
the agent's digest, which resolving never reads. The memo keeps the last answer (a desired state, or
why the revision cannot be applied) until what resolving reads changes: the revision, the ClusterPolicy
settings, or the node "topology" (a node added or gone, its labels other than the config and state,
its GPUs), tracked per event at the cost of hashing that one node's labels."""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any

from migops.api.names import GPUS_ANNOTATION, MIG_CONFIG_LABEL, MIG_CONFIG_STATE_LABEL
from migops.gitops.desired import DesiredState
from migops.reconciler.reasons import Failure

_NOT_READ = (MIG_CONFIG_LABEL, MIG_CONFIG_STATE_LABEL)  # labels resolving never reads (they change in a rollout)


def _fingerprint(labels: Mapping[str, str], annotations: Mapping[str, str]) -> int:
    return hash((frozenset((k, v) for k, v in labels.items() if k not in _NOT_READ), annotations.get(GPUS_ANNOTATION)))


class ResolveMemo:
    def __init__(self) -> None:
        self.topology = 0
        self._fingerprints: dict[str, int] = {}
        # A few answers: a sync may try the newest revision (refused) and then the one in force.
        self._found: dict[tuple[Any, ...], DesiredState | Failure] = {}

    def node_event(self, kind: str, name: str, labels: Mapping[str, str], annotations: Mapping[str, str]) -> None:
        fingerprint = None if kind == "DELETED" else _fingerprint(labels, annotations)
        if self._fingerprints.get(name) != fingerprint:
            self.topology += 1
            if fingerprint is None:
                self._fingerprints.pop(name, None)
            else:
                self._fingerprints[name] = fingerprint

    def key(self, revision: str, path: str, settings: Hashable) -> tuple[Any, ...]:
        return (revision, path, self.topology, settings)

    def get(self, key: tuple[Any, ...]) -> DesiredState | Failure | None:
        return self._found.get(key)

    def put(self, key: tuple[Any, ...], found: DesiredState | Failure) -> None:
        self._found = {k: v for k, v in self._found.items() if k[2] == self.topology}  # older topologies are stale
        self._found[key] = found
        while len(self._found) > 4:
            self._found.pop(next(iter(self._found)))

"""What a sync needs of one Node event: its summary, made on the informer's thread (`node_change`) and
kept in the node journal (`kube.cache.Changes`) until the next sync folds it into its state
(`state.SyncState.observed`): who acknowledged a failure or waits on mig-manager, which of our writes
the informer now shows (`overlay`), whether resolving must run again (`memo`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from migops.api import objects
from migops.api.names import GPUS_ANNOTATION, MANAGED_BY_ANNOTATION, MIG_CONFIG_LABEL, MIG_CONFIG_STATE_LABEL

_NOT_READ = (MIG_CONFIG_LABEL, MIG_CONFIG_STATE_LABEL)  # labels resolving never reads (they change in a rollout)


@dataclass(frozen=True, slots=True)
class NodeUpdate:
    name: str
    gone: bool  # a DELETED event
    state: str | None  # nvidia.com/mig.config.state
    config: str | None  # nvidia.com/mig.config
    owner: str | None  # the managed-by annotation
    topology: int  # what resolving reads of the node (its other labels, its GPUs), hashed


def topology(labels: Mapping[str, str], annotations: Mapping[str, str]) -> int:
    """The hash of what resolving reads of a node: during a rollout nearly every event is a state label
    or the agent's digest, which leave it as it was."""
    return hash((frozenset((k, v) for k, v in labels.items() if k not in _NOT_READ), annotations.get(GPUS_ANNOTATION)))


def node_change(kind: str, obj: Mapping[str, Any]) -> NodeUpdate:
    meta = objects.meta(obj)
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    return NodeUpdate(
        str(meta.get("name")),
        kind == "DELETED",
        labels.get(MIG_CONFIG_STATE_LABEL),
        labels.get(MIG_CONFIG_LABEL),
        annotations.get(MANAGED_BY_ANNOTATION),
        topology(labels, annotations),
    )


Numbered = tuple[int, NodeUpdate]  # (its number in the journal, the change)

"""Which GPUs a Node object holds: its labels and annotations read by `migops.mig.gfd.read_gpus`
(where GFD's labels are also written; docs/interfaces.md). Only the Node object's shape is read here."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from migops.mig.catalogue import Catalogue, UnknownGpuError
from migops.mig.gfd import NodeGpus, read_gpus


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def node_gpus(node: Mapping[str, Any], cat: Catalogue | None = None) -> NodeGpus | None:
    """The node's GPUs; None when nothing on the node names a GPU. Raises UnknownGpuError for a
    device ID or product that the catalogue cannot resolve."""
    meta = _mapping(node.get("metadata"))
    return read_gpus(_mapping(meta.get("labels")), _mapping(meta.get("annotations")), cat)


__all__ = ["NodeGpus", "UnknownGpuError", "node_gpus"]

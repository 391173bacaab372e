"""Which GPUs a Node holds, as far as its labels and annotations tell (docs/interfaces.md).

In order: the agent's `migops.io/gpus` annotation (every GPU, index order: exact); else the device-ID
label (`migops.io/gpu.device-id`, or GFD's product name) times GFD's `nvidia.com/gpu.count`. Under the
single strategy GFD counts MIG devices there, not GPUs, and names the product `<model>-MIG-<profile>`:
then the model is known but not the count, and `NodeGpus.exact` is False.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from migops.kube.names import DEVICE_ID_LABEL, GPU_COUNT_LABEL, GPU_PRODUCT_LABEL, GPUS_ANNOTATION
from migops.mig.catalogue import Catalogue, GpuModel, UnknownGpuError, catalogue
from migops.mig.validate import MAX_GPUS_PER_NODE


@dataclass(frozen=True)
class NodeGpus:
    gpus: tuple[GpuModel, ...]  # index order; one entry per GPU when exact, else one per model
    exact: bool


def node_gpus(node: Mapping[str, Any], cat: Catalogue | None = None) -> NodeGpus | None:
    """The node's GPUs; None when nothing on the node names a GPU. Raises UnknownGpuError for a
    device ID or product that the catalogue cannot resolve."""
    cat = cat or catalogue()
    meta = node.get("metadata") or {}
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    listed = annotations.get(GPUS_ANNOTATION)
    if listed:
        ids = listed.split(",", MAX_GPUS_PER_NODE)  # bounded before any work: a label is not a list of thousands
        if len(ids) > MAX_GPUS_PER_NODE:
            raise UnknownGpuError(f"{GPUS_ANNOTATION}: more than the {MAX_GPUS_PER_NODE} GPUs any known node has")
        return NodeGpus(tuple(cat.resolve(d) for d in ids), True)
    product = labels.get(GPU_PRODUCT_LABEL, "")
    single_mig = "-MIG-" in product
    name = labels.get(DEVICE_ID_LABEL) or (product.split("-MIG-")[0] if product else None)
    if not name:
        return None
    model = cat.resolve(name)
    count = labels.get(GPU_COUNT_LABEL, "")
    if single_mig or not count.isdigit() or int(count) < 1:
        return NodeGpus((model,), False)
    if len(count) > 3 or int(count) > MAX_GPUS_PER_NODE:  # a count of 10**9 must not become a tuple of 10**9
        raise UnknownGpuError(f"{GPU_COUNT_LABEL}={count[:20]}: more than the {MAX_GPUS_PER_NODE} GPUs any known node has")
    return NodeGpus((model,) * int(count), True)


__all__ = ["NodeGpus", "UnknownGpuError", "node_gpus"]

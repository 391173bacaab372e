"""What the node is told: its state label, the agent's annotations and Events, written in one place.

`tell` is the only writer of `nvidia.com/mig.config.state` (tests/agent/test_agent_structure.py checks
it): the flow's `pending` and `rebooting`, its ending, and the drift checks' reports all go through it.
The Events go first and the labels and annotations after them, in one write: whoever sees the node's
state finds the Events that explain it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from migops.agent.backend import GpuState
from migops.agent.kube import layout_json
from migops.agent.plan import gfd_advertisement, layout_annotation
from migops.agent.ports import AgentPorts
from migops.agent.state import NodeReport
from migops.api.names import DEVICE_ID_LABEL, GPUS_ANNOTATION, LAYOUT_ANNOTATION, MIG_CONFIG_STATE_LABEL
from migops.mig.catalogue import GpuModel
from migops.mig.strategy import Strategy


def tell(ports: AgentPorts, node: Mapping[str, Any], report: NodeReport) -> None:
    """Record the report's Events, then write its state label and annotations (None drops one)."""
    for event in report.events:
        ports.node.event(node, event.reason, event.message, warning=event.warning)
    labels = {MIG_CONFIG_STATE_LABEL: report.state} if report.state is not None else {}
    if labels or report.annotations:
        ports.node.apply(labels, report.annotations)


def publish(
    ports: AgentPorts,
    node: Mapping[str, Any],
    strategy: Strategy,
    models: Sequence[GpuModel],
    states: Sequence[GpuState],
) -> dict[str, str | None]:
    """What the GPUs hold now: GFD labels and resources (simulated GPUs), and the layout annotations for
    the caller's next report."""
    if ports.options.publish_gfd:
        ad = gfd_advertisement(models, states, strategy)
        ports.node.publish_gfd(node, ad.labels, ad.resources)
    else:
        ports.node.apply({DEVICE_ID_LABEL: models[0].device_id} if models else {})
    return {
        LAYOUT_ANNOTATION: layout_json(layout_annotation(models, states)),
        GPUS_ANNOTATION: ",".join(m.device_id for m in models),
    }


def publish_inventory(ports: AgentPorts, models: Sequence[GpuModel]) -> None:
    """The node's GPUs (`migops.io/gpus`, `migops.io/gpu.device-id`), from the driver, at start: the
    webhook and the reconciler validate configs on exactly these GPUs, before any config runs."""
    if models:
        ports.node.apply(
            {DEVICE_ID_LABEL: models[0].device_id}, {GPUS_ANNOTATION: ",".join(m.device_id for m in models)}
        )

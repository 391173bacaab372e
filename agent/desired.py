"""What the node's GPUs should become: the config validated on exactly these GPUs (the same question the
webhook, the reconciler and `migops validate` ask), as one `Desired` per GPU. Read by the flow before
anything is touched, and by the drift checks once per config.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from migops.agent.plan import Desired, desired_from_result
from migops.agent.state import ConfigRequest
from migops.mig.catalogue import GpuModel, catalogue
from migops.mig.devices import DeviceIdSyntaxError, parse_device_id
from migops.mig.fit import NodeGpus, fit
from migops.mig.problems import MigError


class FlowFailure(Exception):
    """Ends the flow in `failed` with this reason."""


def desired_on_node(request: ConfigRequest, models: Sequence[GpuModel]) -> list[Desired]:
    """The config validated on this node's GPUs, as what each GPU should become. Raises FlowFailure."""
    if request.problem:
        raise FlowFailure(request.problem)
    assert request.config is not None
    try:
        request.config.select(request.name)
    except MigError as exc:
        raise FlowFailure(f"config {request.name!r}: {exc.problems[0].message}") from None
    # The same question the webhook, the reconciler and `migops validate` ask (migops.mig.fit): this
    # node's GPUs plus the errors of the text itself, so the agent never applies what they refuse.
    report = fit(request.config, request.name, NodeGpus(tuple(models), exact=True)).report
    if not report.valid:
        errors = "; ".join(str(p) for p in report.errors)
        raise FlowFailure(f"config {request.name!r} is invalid on this node's GPUs: {errors}")
    return [desired_from_result(r) for r in report.gpus]


def node_models(devices: Sequence[Any]) -> list[GpuModel]:
    """The node's GPUs as catalogue models (index order). An NVIDIA device ID the catalogue does not list
    as MIG-capable is a GPU that cannot do MIG (a DGX Station's display GPU): configs may cover it with
    `mig-enabled: false`, and the validator refuses `mig-enabled: true` on it."""
    cat = catalogue()
    models = []
    for d in devices:
        try:
            models.append(cat.model(parse_device_id(d.device_id)))
        except DeviceIdSyntaxError:
            raise FlowFailure(f"GPU {d.index} reports PCI device ID {d.device_id!r}, which is not one") from None
    return models

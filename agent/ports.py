"""What the agent's steps reach the world through: the GPUs (`Backend`), its Node's API (`NodeIO`), the
host's systemd, the clock, and its settings. A step reads and writes through these only.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from migops.agent.backend import Backend
from migops.agent.host import KUBELET_SERVICE, Systemd
from migops.agent.kube import NodeIO
from migops.agent.metrics import AgentMetrics

if TYPE_CHECKING:  # the DRA check (the CEL runtime) is imported only by agents started with --dra
    from migops.agent.dra import DraSlices


@dataclass(frozen=True)
class FlowOptions:
    pod_timeout: float = 300.0  # mig-manager's 5 minutes per selector
    with_reboot: bool = False  # WITH_REBOOT
    host_clients: bool = False  # WITH_SHUTDOWN_HOST_GPU_CLIENTS
    host_services: tuple[str, ...] = ()  # the gpu-clients file's systemd-services
    kubelet_service: str = KUBELET_SERVICE
    mode_change_settle: float = 30.0  # mig-manager sleeps 30 s after stopping host clients for a mode change
    destroy_in_use: bool = False  # go ahead when instances that must go have processes (the driver may refuse)
    publish_gfd: bool = False  # publish GFD labels and extended resources (simulated GPUs: no GFD runs)


@dataclass(frozen=True)
class AgentPorts:
    backend: Backend
    node: NodeIO
    options: FlowOptions = FlowOptions()
    systemd: Systemd | None = None
    reboot: Callable[[], None] | None = None
    dra: DraSlices | None = None  # DRA (static MIG): the driver's ResourceSlices must follow the geometry
    metrics: AgentMetrics = field(default_factory=AgentMetrics)
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic

    @property
    def stop(self) -> threading.Event:
        """Set when the agent is stopping (SIGTERM): a run in progress restores the clients and ends."""
        return self.node.stop

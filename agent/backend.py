"""What the agent needs from a GPU driver, as one small interface, and the values it returns.

Two implementations: `nvml.NvmlBackend` (pynvml, real GPUs) and `simulated.SimulatedBackend` (any
catalogue model, state in a file). Instances are described in catalogue terms (GI profile name,
placement start and size in memory slices, compute-instance sizes), so the planner in `migops.mig`
and the agent never see NVML's IDs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from migops.mig.placement import Placement


class GpuError(Exception):
    """A driver call failed. `code` is NVML's error name without the prefix (IN_USE,
    INSUFFICIENT_RESOURCES, NOT_SUPPORTED, UNKNOWN, ...), or RESET_FAILED for a failed GPU reset."""

    def __init__(self, op: str, gpu: int | None, code: str, detail: str = "") -> None:
        self.op, self.gpu, self.code, self.detail = op, gpu, code, detail
        where = f"GPU {gpu}: " if gpu is not None else ""
        super().__init__(f"{where}{op} failed: {code}" + (f" ({detail})" if detail else ""))


@dataclass(frozen=True)
class Device:
    """One physical GPU as the driver lists it."""

    index: int
    device_id: str  # PCI device ID, mig-parted's form: 0x233010DE
    uuid: str
    bus_id: str = ""
    mig_capable: bool = True


@dataclass(frozen=True)
class ComputeInstance:
    id: int
    slices: int  # compute slices (the C of `<C>c.<G>g.<GB>gb`)


@dataclass(frozen=True)
class GpuInstance:
    """A GPU instance with its compute instances and the processes running on it."""

    id: int
    profile: str  # catalogue GI profile name, e.g. "3g.40gb"; "unknown-<id>" when not in the catalogue
    start: int
    size: int
    compute: tuple[ComputeInstance, ...] = ()
    pids: tuple[int, ...] = ()

    @property
    def placement(self) -> Placement:
        return Placement(self.start, self.size, self.profile)

    @property
    def composition(self) -> tuple[int, ...]:
        """Compute-instance sizes, largest first: what two instances must share to be interchangeable."""
        return tuple(sorted((ci.slices for ci in self.compute), reverse=True))


@dataclass(frozen=True)
class GpuState:
    """MIG mode and instances of one GPU, as read from the driver."""

    index: int
    mig_enabled: bool  # current mode
    mig_pending: bool  # the mode after the next reset (equal to mig_enabled when nothing is pending)
    instances: tuple[GpuInstance, ...] = field(default_factory=tuple)

    @property
    def mode_pending(self) -> bool:
        return self.mig_enabled != self.mig_pending


class Backend(Protocol):
    """The driver operations the agent uses. Every call may raise GpuError."""

    name: str

    def devices(self) -> Sequence[Device]: ...

    def read(self, index: int) -> GpuState: ...

    def set_mig_mode(self, index: int, enabled: bool) -> None:
        """Request a mode; it may stay pending until the GPU is reset (GpuState.mig_pending)."""

    def reset(self, indices: Sequence[int]) -> None:
        """Reset these GPUs so a pending mode takes effect; GpuError RESET_FAILED if it cannot."""

    def create_gpu_instance(self, index: int, profile: str, start: int) -> int:
        """Create a GI of this catalogue profile at an explicit placement; returns its ID."""

    def create_compute_instance(self, index: int, gi: int, slices: int) -> int:
        """Create a CI of `slices` compute slices (shared engines) in GI `gi`; returns its ID."""

    def destroy_compute_instance(self, index: int, gi: int, ci: int) -> None: ...

    def destroy_gpu_instance(self, index: int, gi: int) -> None:
        """Destroy a GI that has no compute instances left."""

    def close(self) -> None: ...

"""The NVML backend: real GPUs through pynvml (NVIDIA's `nvidia-ml-py`, pinned in pyproject).

Catalogue names in, NVML calls out: a GI profile name becomes its NVML enum (`GiProfile.nvml_profile`),
the enum becomes the profile ID this driver uses (`GetGpuInstanceProfileInfo(...).id`), and GPU instances
are created with `CreateGpuInstanceWithPlacement` at the start the planner chose, never where NVML
would put them. A GPU reset (to apply a pending MIG mode) has no NVML call; it runs `nvidia-smi -r -i
<bus IDs>` on the host, as mig-parted does, but only on the GPUs whose mode changes.

Every read (devices, MIG mode, GPU and compute instances, processes: what the flow plans from and
what the drift check compares) goes through `probe.ReadOnlyNvml`, which refuses any NVML function but
initialisation and getters; only the six changing methods reach NVML's setters.

`nvml` is the pynvml module or, in tests, a fake with the same functions and ctypes structures.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from typing import Any

from migops.agent.backend import ComputeInstance, Device, GpuError, GpuInstance, GpuState
from migops.agent.plan import gi_profile
from migops.agent.probe import ReadOnlyNvml
from migops.mig.catalogue import GiProfile, GpuModel, catalogue

# NVML_COMPUTE_INSTANCE_PROFILE_<N>_SLICE enum by compute slices.
CI_PROFILE_BY_SLICES = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4, 8: 5, 6: 6}
CI_ENGINE_SHARED = 0
GI_PROFILE_COUNT = 18  # NVML_GPU_INSTANCE_PROFILE_COUNT (enum indices 0..17)


def load_pynvml() -> Any:
    """The real module, initialised. Raises GpuError when there is no driver (no libnvidia-ml)."""
    try:
        import pynvml
    except ImportError as exc:  # pragma: no cover - a declared dependency
        raise GpuError("nvmlInit", None, "LIBRARY_NOT_FOUND", str(exc)) from None
    return pynvml


def error_code(nvml: Any, exc: BaseException) -> str:
    """NVML's name for an NVMLError (`IN_USE`, `NOT_SUPPORTED`, ...). The codes are NVML's, the same in
    every binding, so pynvml's own table names them."""
    import pynvml

    value = getattr(exc, "value", None)
    for name in dir(pynvml):
        if name.startswith("NVML_ERROR_") and getattr(pynvml, name) == value:
            return name[len("NVML_ERROR_") :]
    return f"NVML_ERROR_{value}"


def device_id_of(pci: Any) -> str:
    """mig-parted's `0x%04X%04X` (device, vendor) from nvmlPciInfo's pciDeviceId (device << 16 | vendor)."""
    return f"0x{int(pci.pciDeviceId) & 0xFFFFFFFF:08X}"


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class NvmlBackend:
    name = "nvml"

    def __init__(self, nvml: Any | None = None, reset: Callable[[Sequence[str]], None] | None = None) -> None:
        self.nvml = nvml or load_pynvml()
        self.reader = ReadOnlyNvml(self.nvml)  # the only path of every read
        self._reset_command = reset
        self._call("nvmlInit", None, self.nvml.nvmlInit)
        self._devices: list[Device] | None = None
        self._profile_ids: dict[int, dict[int, tuple[int, Any]]] = {}  # gpu -> driver's GI profiles

    # ------------------------------------------------------------------ plumbing
    def _call(self, op: str, gpu: int | None, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except self.nvml.NVMLError as exc:
            raise GpuError(op, gpu, error_code(self.nvml, exc), str(exc)) from None

    def _handle(self, index: int) -> Any:
        return self._call("nvmlDeviceGetHandleByIndex", index, self.reader.nvmlDeviceGetHandleByIndex, index)

    def model(self, index: int) -> GpuModel | None:
        return catalogue().by_device_id(self.devices()[index].device_id)

    # ------------------------------------------------------------------ reading
    def devices(self) -> list[Device]:
        if self._devices is None:
            count = self._call("nvmlDeviceGetCount", None, self.reader.nvmlDeviceGetCount)
            found = []
            for i in range(count):
                h = self._handle(i)
                pci = self._call("nvmlDeviceGetPciInfo", i, self.reader.nvmlDeviceGetPciInfo, h)
                uuid = _text(self._call("nvmlDeviceGetUUID", i, self.reader.nvmlDeviceGetUUID, h))
                try:
                    self.reader.nvmlDeviceGetMigMode(h)
                    capable = True
                except self.nvml.NVMLError:
                    capable = False
                found.append(Device(i, device_id_of(pci), uuid, _text(pci.busId), capable))
            self._devices = found
        return self._devices

    def driver_profiles(self, index: int) -> dict[int, tuple[int, Any]]:
        """NVML GI profile ID -> (enum index, profile info) for every GI profile the driver offers on
        this GPU (enum indices 0..17; NOT_SUPPORTED ones skipped). Read once per GPU and mode; an empty
        answer (some drivers list none while MIG is disabled) is not kept, so MIG enabled out of band
        is read correctly."""
        if not self._profile_ids.get(index):
            h = self._handle(index)
            found: dict[int, tuple[int, Any]] = {}
            for enum in range(GI_PROFILE_COUNT):
                try:
                    info = self.reader.nvmlDeviceGetGpuInstanceProfileInfo(h, enum)
                except self.nvml.NVMLError:
                    continue
                found[int(info.id)] = (enum, info)
            self._profile_ids[index] = found
        return self._profile_ids[index]

    def profile_ids(self, index: int) -> dict[str, int]:
        """Catalogue GI profile name -> the NVML profile ID this GPU's driver uses for it."""
        model = self.model(index)
        by_enum = {enum: pid for pid, (enum, _) in self.driver_profiles(index).items()}
        return {
            gi.name: by_enum[gi.nvml_profile] for gi in (model.profiles if model else ()) if gi.nvml_profile in by_enum
        }

    def read(self, index: int) -> GpuState:
        h = self._handle(index)
        current, pending = self._call("nvmlDeviceGetMigMode", index, self.reader.nvmlDeviceGetMigMode, h)
        enabled = current == self.nvml.NVML_DEVICE_MIG_ENABLE
        will_be = pending == self.nvml.NVML_DEVICE_MIG_ENABLE
        if not enabled:
            return GpuState(index, False, will_be, ())
        names = {pid: name for name, pid in self.profile_ids(index).items()}
        pids = self._processes(index, h)
        instances = []
        for profile_id, (_, profile_info) in sorted(self.driver_profiles(index).items()):
            for gi in self._gpu_instances(index, h, profile_id, int(profile_info.instanceCount)):
                info = self._call("nvmlGpuInstanceGetInfo", index, self.reader.nvmlGpuInstanceGetInfo, gi)
                cis = tuple(
                    ComputeInstance(int(ci_info.id), slices) for ci_info, slices in self._compute_instances(index, gi)
                )
                instances.append(
                    GpuInstance(
                        int(info.id),
                        names.get(int(info.profileId), f"unknown-{int(info.profileId)}"),
                        int(info.placement.start),
                        int(info.placement.size),
                        cis,
                        tuple(sorted(pids.get(int(info.id), ()))),
                    )
                )
        return GpuState(index, True, will_be, tuple(sorted(instances, key=lambda i: i.start)))

    def _gpu_instances(self, index: int, h: Any, profile_id: int, capacity: int) -> list[Any]:
        array = (self.nvml.c_nvmlGpuInstance_t * max(capacity, 1))()
        count = ctypes.c_uint(0)
        self._call(
            "nvmlDeviceGetGpuInstances",
            index,
            self.reader.nvmlDeviceGetGpuInstances,
            h,
            profile_id,
            array,
            ctypes.byref(count),
        )
        return [array[i] for i in range(count.value)]

    def _compute_instances(self, index: int, gi: Any) -> list[tuple[Any, int]]:
        found = []
        for slices, enum in CI_PROFILE_BY_SLICES.items():
            try:
                info = self.reader.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, enum, CI_ENGINE_SHARED)
            except self.nvml.NVMLError:
                continue
            array = (self.nvml.c_nvmlComputeInstance_t * max(int(info.instanceCount), 1))()
            count = ctypes.c_uint(0)
            self._call(
                "nvmlGpuInstanceGetComputeInstances",
                index,
                self.reader.nvmlGpuInstanceGetComputeInstances,
                gi,
                int(info.id),
                array,
                ctypes.byref(count),
            )
            for i in range(count.value):
                ci_info = self._call(
                    "nvmlComputeInstanceGetInfo", index, self.reader.nvmlComputeInstanceGetInfo, array[i]
                )
                found.append((ci_info, slices))
        return found

    def _processes(self, index: int, h: Any) -> dict[int, list[int]]:
        """GPU-instance ID -> PIDs of the compute processes running in it."""
        procs = self._call(
            "nvmlDeviceGetComputeRunningProcesses", index, self.reader.nvmlDeviceGetComputeRunningProcesses, h
        )
        by_gi: dict[int, list[int]] = {}
        for p in procs:
            by_gi.setdefault(int(getattr(p, "gpuInstanceId", 0xFFFFFFFF)), []).append(int(p.pid))
        return by_gi

    # ------------------------------------------------------------------ changing
    def set_mig_mode(self, index: int, enabled: bool) -> None:
        mode = self.nvml.NVML_DEVICE_MIG_ENABLE if enabled else self.nvml.NVML_DEVICE_MIG_DISABLE
        self._call("nvmlDeviceSetMigMode", index, self.nvml.nvmlDeviceSetMigMode, self._handle(index), mode)
        self._profile_ids.pop(index, None)

    def reset(self, indices: Sequence[int]) -> None:
        if self._reset_command is None:
            raise GpuError(
                "reset",
                indices[0] if indices else None,
                "RESET_FAILED",
                "no way to reset GPUs configured (needs nvidia-smi on the host)",
            )
        bus_ids = [self.devices()[i].bus_id for i in indices]
        for i in indices:
            self._profile_ids.pop(i, None)
        try:
            self._reset_command(["nvidia-smi", "-r", "-i", ",".join(bus_ids)])
        except Exception as exc:  # noqa: BLE001 - any failure of the command is a failed reset
            raise GpuError("reset", indices[0] if indices else None, "RESET_FAILED", str(exc)) from None

    def create_gpu_instance(self, index: int, profile: str, start: int) -> int:
        gi_profile = self._gi_profile(index, profile)
        profile_id = self.profile_ids(index).get(profile)
        if profile_id is None:
            raise GpuError("create_gpu_instance", index, "NOT_SUPPORTED", f"the driver offers no {profile}")
        placement = self.nvml.c_nvmlGpuInstancePlacement_t()
        placement.start, placement.size = start, gi_profile.memory_slices
        h = self._handle(index)
        gi = self._call(
            "nvmlDeviceCreateGpuInstanceWithPlacement",
            index,
            self.nvml.nvmlDeviceCreateGpuInstanceWithPlacement,
            h,
            profile_id,
            placement,
        )
        info = self._call("nvmlGpuInstanceGetInfo", index, self.nvml.nvmlGpuInstanceGetInfo, gi)
        return int(info.id)

    def create_compute_instance(self, index: int, gi: int, slices: int) -> int:
        enum = CI_PROFILE_BY_SLICES.get(slices)
        if enum is None:
            raise GpuError("create_compute_instance", index, "NOT_SUPPORTED", f"no {slices}-slice CI profile")
        handle = self._gi_handle(index, gi)
        info = self._call(
            "nvmlGpuInstanceGetComputeInstanceProfileInfo",
            index,
            self.nvml.nvmlGpuInstanceGetComputeInstanceProfileInfo,
            handle,
            enum,
            CI_ENGINE_SHARED,
        )
        ci = self._call(
            "nvmlGpuInstanceCreateComputeInstance",
            index,
            self.nvml.nvmlGpuInstanceCreateComputeInstance,
            handle,
            int(info.id),
        )
        return int(self._call("nvmlComputeInstanceGetInfo", index, self.nvml.nvmlComputeInstanceGetInfo, ci).id)

    def destroy_compute_instance(self, index: int, gi: int, ci: int) -> None:
        handle = self._gi_handle(index, gi)
        ci_handle = self._call(
            "nvmlGpuInstanceGetComputeInstanceById", index, self.nvml.nvmlGpuInstanceGetComputeInstanceById, handle, ci
        )
        self._call("nvmlComputeInstanceDestroy", index, self.nvml.nvmlComputeInstanceDestroy, ci_handle)

    def destroy_gpu_instance(self, index: int, gi: int) -> None:
        self._call("nvmlGpuInstanceDestroy", index, self.nvml.nvmlGpuInstanceDestroy, self._gi_handle(index, gi))

    def close(self) -> None:
        try:
            self.nvml.nvmlShutdown()
        except self.nvml.NVMLError:
            pass

    def _gi_handle(self, index: int, gi: int) -> Any:
        return self._call(
            "nvmlDeviceGetGpuInstanceById", index, self.nvml.nvmlDeviceGetGpuInstanceById, self._handle(index), gi
        )

    def _gi_profile(self, index: int, name: str) -> GiProfile:
        model = self.model(index)
        found = gi_profile(model, name) if model else None
        if found is None:
            raise GpuError("create_gpu_instance", index, "NOT_SUPPORTED", f"{name} is not a profile of this GPU")
        return found

"""A small fake of the pynvml calls the agent and the probe make, for GPUs from the catalogue.

It keeps pynvml's calling conventions (ctypes arrays of GPU-/compute-instance handles, counts passed
by reference, placement structs, NVMLError with NVML's codes), so the code under test is the code
that runs against libnvidia-ml. Every call is recorded in `calls`.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pynvml

from migops.mig.catalogue import GpuModel
from migops.mig.profile import compute_subprofile_allowed

CI_ENUM = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4, 8: 5, 6: 6}


@dataclass
class FakeGi:
    id: int
    profile_id: int
    start: int
    size: int
    compute_slices: int
    handle: Any = None
    cis: dict[int, int] = field(default_factory=dict)  # CI id -> slices


@dataclass
class FakeGpu:
    model: GpuModel
    mig: list[int] = field(default_factory=lambda: [0, 0])  # current, pending
    gis: dict[int, FakeGi] = field(default_factory=dict)
    processes: list[tuple[int, int]] = field(default_factory=list)  # (pid, GI id)
    next_gi: int = 1


class FakeNvml:
    NVMLError = pynvml.NVMLError
    NVML_DEVICE_MIG_ENABLE = pynvml.NVML_DEVICE_MIG_ENABLE
    NVML_DEVICE_MIG_DISABLE = pynvml.NVML_DEVICE_MIG_DISABLE
    c_nvmlGpuInstance_t = pynvml.c_nvmlGpuInstance_t
    c_nvmlComputeInstance_t = pynvml.c_nvmlComputeInstance_t
    c_nvmlGpuInstancePlacement_t = pynvml.c_nvmlGpuInstancePlacement_t

    def __init__(self, models: list[GpuModel], driver: str = "580.65.06") -> None:
        self.gpus = [FakeGpu(m) for m in models]
        self.driver = driver
        self.calls: list[str] = []
        self._handles: dict[int, tuple[int, FakeGi, int | None]] = {}  # address -> (gpu, GI, CI id)
        self._keep: list[Any] = []
        self.fail: dict[str, int] = {}  # function name -> NVML error code

    def __getattr__(self, name: str) -> Any:
        if name.startswith("NVML_"):
            return getattr(pynvml, name)
        raise AttributeError(name)

    # -------------------------------------------------------------- helpers
    def _rec(self, name: str) -> None:
        self.calls.append(name)
        if name in self.fail:
            raise pynvml.NVMLError(self.fail[name])

    def _gpu(self, h: Any) -> FakeGpu:
        return self.gpus[h]

    def _profile(self, gpu: FakeGpu, enum: int):
        for gi in gpu.model.profiles:
            if gi.nvml_profile == enum:
                return gi
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def _by_id(self, gpu: FakeGpu, profile_id: int):
        for gi in gpu.model.profiles:
            if gi.smi_id == profile_id:
                return gi
        raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)

    def _new_handle(self, kind: Any, gpu: int, gi: FakeGi, ci: int | None) -> Any:
        struct = kind._type_()
        self._keep.append(struct)
        self._handles[ctypes.addressof(struct)] = (gpu, gi, ci)
        return ctypes.pointer(struct)

    def _resolve(self, handle: Any) -> tuple[int, FakeGi, int | None]:
        return self._handles[ctypes.addressof(handle.contents)]

    # -------------------------------------------------------------- system and devices
    def nvmlInit(self) -> None:
        self._rec("nvmlInit")

    def nvmlShutdown(self) -> None:
        self._rec("nvmlShutdown")

    def nvmlSystemGetDriverVersion(self) -> str:
        self._rec("nvmlSystemGetDriverVersion")
        return self.driver

    def nvmlDeviceGetCount(self) -> int:
        self._rec("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        self._rec("nvmlDeviceGetHandleByIndex")
        return i

    def nvmlDeviceGetPciInfo(self, h: int) -> Any:
        self._rec("nvmlDeviceGetPciInfo")
        return SimpleNamespace(pciDeviceId=int(self._gpu(h).model.device_id, 16), busId=f"00000000:{0x18 + h:02X}:00.0")

    def nvmlDeviceGetUUID(self, h: int) -> str:
        self._rec("nvmlDeviceGetUUID")
        return f"GPU-fake-{h}"

    def nvmlDeviceGetName(self, h: int) -> str:
        self._rec("nvmlDeviceGetName")
        return "NVIDIA " + self._gpu(h).model.name

    def nvmlDeviceGetMigMode(self, h: int) -> list[int]:
        self._rec("nvmlDeviceGetMigMode")
        return list(self._gpu(h).mig)

    def nvmlDeviceSetMigMode(self, h: int, mode: int) -> int:
        self._rec("nvmlDeviceSetMigMode")
        gpu = self._gpu(h)
        if gpu.gis:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_IN_USE)
        gpu.mig[1] = mode
        return 0

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[Any]:
        self._rec("nvmlDeviceGetComputeRunningProcesses")
        return [
            SimpleNamespace(pid=pid, usedGpuMemory=0, gpuInstanceId=gi, computeInstanceId=0)
            for pid, gi in self._gpu(h).processes
        ]

    # -------------------------------------------------------------- GPU instances
    def nvmlDeviceGetGpuInstanceProfileInfo(self, h: int, enum: int, version: int = 2) -> Any:
        self._rec("nvmlDeviceGetGpuInstanceProfileInfo")
        gi = self._profile(self._gpu(h), enum)
        e = gi.engines
        return SimpleNamespace(
            id=gi.smi_id,
            sliceCount=gi.compute_slices,
            instanceCount=gi.max_count,
            memorySizeMB=gi.memory_mib or 0,
            multiprocessorCount=gi.sms or 0,
            copyEngineCount=e.copy if e else 0,
            decoderCount=e.decoder if e else 0,
            encoderCount=e.encoder if e else 0,
            jpegCount=e.jpeg if e else 0,
            ofaCount=e.ofa if e else 0,
            name=f"MIG {gi.name}".encode(),
        )

    def nvmlDeviceGetGpuInstancePossiblePlacements(self, h: int, profile_id: int, array: Any, count_ref: Any) -> int:
        self._rec("nvmlDeviceGetGpuInstancePossiblePlacements")
        gi = self._by_id(self._gpu(h), profile_id)
        for i, start in enumerate(gi.starts):
            array[i].start, array[i].size = start, gi.memory_slices
        count_ref._obj.value = len(gi.starts)
        return 0

    def nvmlDeviceCreateGpuInstanceWithPlacement(self, h: int, profile_id: int, placement: Any) -> Any:
        self._rec("nvmlDeviceCreateGpuInstanceWithPlacement")
        gpu = self._gpu(h)
        if gpu.mig[0] != pynvml.NVML_DEVICE_MIG_ENABLE:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        prof = self._by_id(gpu, profile_id)
        if placement.start not in prof.starts or placement.size != prof.memory_slices:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        mask = ((1 << placement.size) - 1) << placement.start
        for g in gpu.gis.values():
            if mask & (((1 << g.size) - 1) << g.start):
                raise pynvml.NVMLError(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)
        gi = FakeGi(gpu.next_gi, profile_id, placement.start, placement.size, prof.compute_slices)
        gpu.next_gi += 1
        gpu.gis[gi.id] = gi
        gi.handle = self._new_handle(pynvml.c_nvmlGpuInstance_t, h, gi, None)
        return gi.handle

    def nvmlDeviceGetGpuInstances(self, h: int, profile_id: int, array: Any, count_ref: Any) -> int:
        self._rec("nvmlDeviceGetGpuInstances")
        found = [g for g in self._gpu(h).gis.values() if g.profile_id == profile_id]
        for i, g in enumerate(found):
            array[i] = g.handle
        count_ref._obj.value = len(found)
        return 0

    def nvmlDeviceGetGpuInstanceById(self, h: int, gi_id: int) -> Any:
        self._rec("nvmlDeviceGetGpuInstanceById")
        gi = self._gpu(h).gis.get(gi_id)
        if gi is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return gi.handle

    def nvmlGpuInstanceGetInfo(self, handle: Any) -> Any:
        self._rec("nvmlGpuInstanceGetInfo")
        _, gi, _ = self._resolve(handle)
        return SimpleNamespace(
            id=gi.id, profileId=gi.profile_id, placement=SimpleNamespace(start=gi.start, size=gi.size)
        )

    def nvmlGpuInstanceDestroy(self, handle: Any) -> int:
        self._rec("nvmlGpuInstanceDestroy")
        gpu_index, gi, _ = self._resolve(handle)
        gpu = self.gpus[gpu_index]
        if gi.cis or any(g == gi.id for _, g in gpu.processes):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_IN_USE)
        del gpu.gis[gi.id]
        return 0

    # -------------------------------------------------------------- compute instances
    def nvmlGpuInstanceGetComputeInstanceProfileInfo(
        self, handle: Any, enum: int, engine: int, version: int = 2
    ) -> Any:
        self._rec("nvmlGpuInstanceGetComputeInstanceProfileInfo")
        _, gi, _ = self._resolve(handle)
        slices = {v: k for k, v in CI_ENUM.items()}.get(enum)
        if slices is None or not compute_subprofile_allowed(slices, gi.compute_slices):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return SimpleNamespace(id=100 + enum, sliceCount=slices, instanceCount=gi.compute_slices // slices)

    def nvmlGpuInstanceCreateComputeInstance(self, handle: Any, profile_id: int) -> Any:
        self._rec("nvmlGpuInstanceCreateComputeInstance")
        gpu_index, gi, _ = self._resolve(handle)
        slices = {v: k for k, v in CI_ENUM.items()}[profile_id - 100]
        if sum(gi.cis.values()) + slices > gi.compute_slices:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)
        ci = max(gi.cis, default=-1) + 1
        gi.cis[ci] = slices
        return self._new_handle(pynvml.c_nvmlComputeInstance_t, gpu_index, gi, ci)

    def nvmlGpuInstanceGetComputeInstances(self, handle: Any, profile_id: int, array: Any, count_ref: Any) -> int:
        self._rec("nvmlGpuInstanceGetComputeInstances")
        gpu_index, gi, _ = self._resolve(handle)
        slices = {v: k for k, v in CI_ENUM.items()}[profile_id - 100]
        found = [ci for ci, s in gi.cis.items() if s == slices]
        for i, ci in enumerate(found):
            array[i] = self._new_handle(pynvml.c_nvmlComputeInstance_t, gpu_index, gi, ci)
        count_ref._obj.value = len(found)
        return 0

    def nvmlGpuInstanceGetComputeInstanceById(self, handle: Any, ci: int) -> Any:
        self._rec("nvmlGpuInstanceGetComputeInstanceById")
        gpu_index, gi, _ = self._resolve(handle)
        if ci not in gi.cis:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return self._new_handle(pynvml.c_nvmlComputeInstance_t, gpu_index, gi, ci)

    def nvmlComputeInstanceGetInfo(self, handle: Any) -> Any:
        self._rec("nvmlComputeInstanceGetInfo")
        _, gi, ci = self._resolve(handle)
        return SimpleNamespace(id=ci, profileId=100 + CI_ENUM[gi.cis[ci]])

    def nvmlComputeInstanceDestroy(self, handle: Any) -> int:
        self._rec("nvmlComputeInstanceDestroy")
        gpu_index, gi, ci = self._resolve(handle)
        if any(g == gi.id for _, g in self.gpus[gpu_index].processes):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_IN_USE)
        del gi.cis[ci]
        return 0

    # What only a reset does on real hardware.
    def reset(self, indices: list[int]) -> None:
        for i in indices:
            self.gpus[i].mig[0] = self.gpus[i].mig[1]
            self.gpus[i].gis.clear()

"""A read-only look at the node's GPUs through NVML, compared with the catalogue (`migops gpus --probe`).

It lists, per GPU, MIG capability and mode, and every GPU-instance profile NVML reports with its ID,
compute slices, maximum count, memory, SMs, engines and possible placements, next to the catalogue's
entry for that device ID, and names each difference. It never changes a GPU setting: NVML is reached
through `ReadOnlyNvml`, which refuses every NVML function but initialisation and getters.
"""

from __future__ import annotations

import ctypes
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from migops.mig.catalogue import GpuModel, catalogue

_READ_ONLY = re.compile(
    r"^nvml(Init|InitWithFlags|Shutdown|SystemGet\w+|DeviceGet\w+|GpuInstanceGet\w+|"
    r"ComputeInstanceGet\w+|ErrorString)$"
)
GI_PROFILE_COUNT = 18


class ReadOnlyNvml:
    """pynvml, minus everything that changes a GPU (SetMigMode, Create*, Destroy*, Reset*, Set*...)."""

    def __init__(self, nvml: Any) -> None:
        self._nvml = nvml

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._nvml, name)
        if name.startswith("nvml") and callable(value) and not _READ_ONLY.match(name):
            raise PermissionError(f"the NVML probe is read-only; {name} is not allowed")
        return value


@dataclass(frozen=True)
class ProbedProfile:
    enum: int  # NVML_GPU_INSTANCE_PROFILE_* index
    id: int  # the profile ID the driver uses (nvidia-smi's)
    name: str  # the driver's name (profile info v2), may be empty
    compute_slices: int
    max_count: int
    memory_mib: int
    sms: int
    engines: dict[str, int]
    placements: tuple[tuple[int, int], ...]  # (start, size) in memory slices


@dataclass
class ProbedGpu:
    index: int
    device_id: str
    name: str
    uuid: str
    mig_capable: bool
    mig_current: bool | None
    mig_pending: bool | None
    catalogue_model: str | None
    profiles: list[ProbedProfile] = field(default_factory=list)
    differences: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def probe(nvml: Any) -> tuple[str, list[ProbedGpu]]:
    """(driver version, GPUs). `nvml` is pynvml (or a fake); only read-only calls are made."""
    nv = ReadOnlyNvml(nvml)
    nv.nvmlInit()
    try:
        driver = _text(nv.nvmlSystemGetDriverVersion())
        gpus = [_probe_gpu(nv, i) for i in range(nv.nvmlDeviceGetCount())]
    finally:
        nv.nvmlShutdown()
    return driver, gpus


def _probe_gpu(nv: ReadOnlyNvml, index: int) -> ProbedGpu:
    h = nv.nvmlDeviceGetHandleByIndex(index)
    pci = nv.nvmlDeviceGetPciInfo(h)
    device_id = f"0x{int(pci.pciDeviceId) & 0xFFFFFFFF:08X}"
    model = catalogue().by_device_id(device_id)
    try:
        current, pending = nv.nvmlDeviceGetMigMode(h)
        capable = True
    except nv.NVMLError:
        current = pending = None
        capable = False
    gpu = ProbedGpu(
        index,
        device_id,
        _text(nv.nvmlDeviceGetName(h)),
        _text(nv.nvmlDeviceGetUUID(h)),
        capable,
        None if current is None else current == nv.NVML_DEVICE_MIG_ENABLE,
        None if pending is None else pending == nv.NVML_DEVICE_MIG_ENABLE,
        model.name if model else None,
    )
    if capable:
        for enum in range(GI_PROFILE_COUNT):
            try:
                info = nv.nvmlDeviceGetGpuInstanceProfileInfo(h, enum)
            except nv.NVMLError:
                continue
            gpu.profiles.append(
                ProbedProfile(
                    enum,
                    int(info.id),
                    _text(getattr(info, "name", b"")),
                    int(info.sliceCount),
                    int(info.instanceCount),
                    int(info.memorySizeMB),
                    int(info.multiprocessorCount),
                    {
                        "copy": int(info.copyEngineCount),
                        "decoder": int(info.decoderCount),
                        "encoder": int(info.encoderCount),
                        "jpeg": int(info.jpegCount),
                        "ofa": int(info.ofaCount),
                    },
                    _placements(nv, h, int(info.id), int(info.instanceCount)),
                )
            )
    gpu.differences = compare(gpu, model)
    return gpu


def _placements(nv: ReadOnlyNvml, h: Any, profile_id: int, count: int) -> tuple[tuple[int, int], ...]:
    array = (nv.c_nvmlGpuInstancePlacement_t * max(count, 8))()
    found = ctypes.c_uint(len(array))
    try:
        nv.nvmlDeviceGetGpuInstancePossiblePlacements(h, profile_id, array, ctypes.byref(found))
    except nv.NVMLError:
        return ()
    return tuple((int(array[i].start), int(array[i].size)) for i in range(found.value))


def compare(gpu: ProbedGpu, model: GpuModel | None) -> list[str]:
    """What NVML reports that the catalogue entry for this device ID says otherwise."""
    if model is None:
        return [f"device ID {gpu.device_id} is not in the catalogue"] if gpu.mig_capable else []
    if not gpu.mig_capable:
        return [f"NVML says GPU {gpu.index} cannot do MIG; the catalogue lists {model.name} as MIG-capable"]
    if not gpu.profiles:
        return ["NVML reports no GPU-instance profiles (some drivers list none while MIG is disabled)"]
    out = []
    by_enum = {p.enum: p for p in gpu.profiles}
    for gi in model.profiles:
        p = by_enum.pop(gi.nvml_profile, None) if gi.nvml_profile is not None else None
        if p is None:
            out.append(f"{gi.name}: in the catalogue (NVML enum {gi.nvml_profile}), not reported by the driver")
            continue
        checks: list[tuple[str, object, object]] = [  # (what, catalogue, NVML); None: not known
            ("profile ID", gi.smi_id, p.id),
            ("compute slices", gi.compute_slices, p.compute_slices),
            ("max count", gi.max_count, p.max_count),
            ("memory MiB", gi.memory_mib, p.memory_mib),
            ("SMs", gi.sms, p.sms),
            ("starts", list(gi.starts), [s for s, _ in p.placements]),
            ("size", gi.memory_slices, p.placements[0][1] if p.placements else None),
        ]
        if gi.engines is not None:
            checks.append(("engines", asdict(gi.engines), p.engines))
        for what, cat, seen in checks:
            if cat is not None and seen is not None and cat != seen:
                out.append(f"{gi.name}: {what} {seen} (catalogue: {cat})")
    for p in by_enum.values():
        out.append(f"NVML profile enum {p.enum} (ID {p.id}, {p.name or '?'}) is not in the catalogue")
    return out


def render(driver: str, gpus: list[ProbedGpu]) -> list[str]:
    lines = [f"NVIDIA driver {driver}: {len(gpus)} GPU(s); read-only probe, nothing was changed"]
    for g in gpus:
        mode = "-" if g.mig_current is None else ("enabled" if g.mig_current else "disabled")
        if g.mig_pending is not None and g.mig_pending != g.mig_current:
            mode += f" (pending: {'enabled' if g.mig_pending else 'disabled'})"
        lines.append(f"GPU {g.index}  {g.device_id}  {g.name}  {g.uuid}")
        lines.append(
            f"  MIG capable: {'yes' if g.mig_capable else 'no'}  mode: {mode}  catalogue: "
            f"{g.catalogue_model or 'not listed'}"
        )
        for p in g.profiles:
            starts = ",".join(str(s) for s, _ in p.placements)
            size = p.placements[0][1] if p.placements else "?"
            lines.append(
                f"    enum {p.enum:>2} id {p.id:>2} {p.name or '':<16} {p.compute_slices}c max {p.max_count} "
                f"{p.memory_mib} MiB {p.sms} SMs  starts {{{starts}}}:{size}  engines "
                + "/".join(str(p.engines[k]) for k in ("copy", "decoder", "encoder", "jpeg", "ofa"))
            )
        if g.differences:
            lines.append("  differs from the catalogue:")
            lines += [f"    - {d}" for d in g.differences]
        elif g.mig_capable:
            lines.append("  matches the catalogue")
    return lines

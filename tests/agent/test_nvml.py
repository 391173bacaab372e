"""The NVML backend's translation, and the read-only probe, against a fake of the pynvml calls.

No GPU and no NVIDIA driver are needed: these tests check what the backend asks NVML for
(profile IDs, explicit placements, compute-instance profiles, error codes), not NVML itself.
"""

from __future__ import annotations

import json

import pytest
from fake_pynvml import FakeNvml

from migops.agent.backend import GpuError
from migops.agent.nvml import NvmlBackend
from migops.agent.plan import desired_from_result, matches, plan_gpu
from migops.agent.probe import ReadOnlyNvml, probe, render
from migops.mig.catalogue import catalogue
from migops.mig.spec import parse_config
from migops.mig.validate import validate_on_node

H100 = catalogue().resolve("0x233010DE")
A30 = catalogue().resolve("0x20B710DE")


def _backend(*models):
    fake = FakeNvml(list(models))
    resets: list[list[str]] = []

    def reset(argv: list[str]) -> None:
        resets.append(list(argv))
        fake.reset([int(b.split(":")[1], 16) - 0x18 for b in argv[-1].split(",")])

    return fake, NvmlBackend(fake, reset=reset), resets


def test_devices_and_mode() -> None:
    fake, nvml, _ = _backend(H100, A30)
    assert [(d.index, d.device_id, d.bus_id) for d in nvml.devices()] == [
        (0, "0x233010DE", "00000000:18:00.0"),
        (1, "0x20B710DE", "00000000:19:00.0"),
    ]
    nvml.set_mig_mode(0, True)
    s = nvml.read(0)
    assert not s.mig_enabled and s.mig_pending


def test_apply_creates_at_explicit_placements_with_the_drivers_profile_ids() -> None:
    fake, nvml, resets = _backend(H100)
    nvml.set_mig_mode(0, True)
    nvml.reset([0])
    assert resets == [["nvidia-smi", "-r", "-i", "00000000:18:00.0"]]
    config = parse_config(
        'version: v1\nmig-configs:\n  c:\n    - devices: all\n      mig-enabled: true\n'
        '      mig-devices: {"1g.10gb": 2, "2g.20gb": 1, "1c.3g.40gb": 3}\n'
    )
    desired = desired_from_result(validate_on_node(config, "c", [H100]).gpus[0])
    plan = plan_gpu(nvml.read(0), desired)
    created = {}
    for step in plan.steps:
        if step.op == "create_gi":
            created[step.placement] = nvml.create_gpu_instance(0, step.placement.profile, step.placement.start)
        else:
            nvml.create_compute_instance(0, created[step.placement], step.slices)
    state = nvml.read(0)
    assert matches(state, desired)
    gis = sorted((g.profile_id, g.start, g.size, sorted(g.cis.values())) for g in fake.gpus[0].gis.values())
    # nvidia-smi IDs (19 = 1g.10gb, 14 = 2g.20gb, 9 = 3g.40gb) at the planner's starts, never NVML's own choice.
    assert gis == [(9, 4, 4, [1, 1, 1]), (14, 2, 2, [2]), (19, 0, 1, [1]), (19, 1, 1, [1])]
    assert "nvmlDeviceCreateGpuInstance" not in fake.calls
    # Down again: destroy CIs, then GIs.
    for inst in state.instances:
        for ci in inst.compute:
            nvml.destroy_compute_instance(0, inst.id, ci.id)
        nvml.destroy_gpu_instance(0, inst.id)
    assert fake.gpus[0].gis == {}


def test_running_processes_and_errors_are_translated() -> None:
    fake, nvml, _ = _backend(H100)
    nvml.set_mig_mode(0, True)
    nvml.reset([0])
    gi = nvml.create_gpu_instance(0, "3g.40gb", 0)
    ci = nvml.create_compute_instance(0, gi, 3)
    fake.gpus[0].processes.append((4321, gi))
    assert nvml.read(0).instances[0].pids == (4321,)
    with pytest.raises(GpuError) as err:
        nvml.destroy_compute_instance(0, gi, ci)
    assert err.value.code == "IN_USE" and err.value.gpu == 0
    with pytest.raises(GpuError) as err:
        nvml.create_gpu_instance(0, "3g.40gb", 2)
    assert err.value.code == "INVALID_ARGUMENT"
    with pytest.raises(GpuError) as err:
        nvml.create_gpu_instance(0, "4g.40gb", 0)
    assert err.value.code == "INSUFFICIENT_RESOURCES"
    with pytest.raises(GpuError, match="no 5-slice CI profile"):
        nvml.create_compute_instance(0, gi, 5)


def test_failed_reset_command_is_a_reset_failure() -> None:
    fake = FakeNvml([H100])

    def reset(argv: list[str]) -> None:
        raise RuntimeError("nvidia-smi: In use by another client")

    nvml = NvmlBackend(fake, reset=reset)
    with pytest.raises(GpuError) as err:
        nvml.reset([0])
    assert err.value.code == "RESET_FAILED" and "In use" in str(err.value)


def test_probe_reads_compares_and_changes_nothing() -> None:
    fake = FakeNvml([H100, A30])
    driver, gpus = probe(fake)
    assert driver == "580.65.06"
    assert [g.catalogue_model for g in gpus] == ["H100-SXM5-80GB", "A30"]
    h100 = {p.name: p for p in gpus[0].profiles}
    assert h100["MIG 3g.40gb"].placements == ((0, 4), (4, 4)) and h100["MIG 3g.40gb"].id == 9
    assert gpus[0].differences == []  # the fake reports what the catalogue says
    changing = [c for c in fake.calls if any(w in c for w in ("Set", "Create", "Destroy", "Reset"))]
    assert changing == []
    assert any("GPU 1  0x20B710DE" in line for line in render(driver, gpus))
    json.dumps([g.as_dict() for g in gpus])


def test_probe_names_differences() -> None:
    fake = FakeNvml([H100])
    real = fake.nvmlDeviceGetGpuInstanceProfileInfo

    def drifted(h, enum, version=2):
        info = real(h, enum, version)
        if enum == 0:  # 1g.10gb: a driver that reports another size and count
            info.memorySizeMB, info.instanceCount = 9728, 6
        return info

    fake.nvmlDeviceGetGpuInstanceProfileInfo = drifted
    _, gpus = probe(fake)
    assert "1g.10gb: max count 6 (catalogue: 7)" in gpus[0].differences
    assert "1g.10gb: memory MiB 9728 (catalogue: 9984)" in gpus[0].differences


def test_read_only_wrapper_refuses_changes() -> None:
    nv = ReadOnlyNvml(FakeNvml([H100]))
    for name in (
        "nvmlDeviceSetMigMode",
        "nvmlDeviceCreateGpuInstanceWithPlacement",
        "nvmlGpuInstanceDestroy",
        "nvmlComputeInstanceDestroy",
        "nvmlGpuInstanceCreateComputeInstance",
    ):
        with pytest.raises(PermissionError, match="read-only"):
            getattr(nv, name)
    assert nv.nvmlDeviceGetMigMode(0) == [0, 0]

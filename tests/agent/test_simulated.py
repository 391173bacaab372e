"""The simulated GPU refuses what the hardware refuses (rules from the catalogue and migops.mig)."""

from __future__ import annotations

import json

import pytest

from migops.agent.backend import GpuError
from migops.agent.simulated import SimulatedBackend, parse_gpus


@pytest.fixture
def sim(tmp_path):
    b = SimulatedBackend(tmp_path / "gpus.json", parse_gpus("2x0x233010DE"), node="n")
    b.set_mig_mode(0, True)
    b.reset([0])
    return b


def _code(call) -> str:
    with pytest.raises(GpuError) as err:
        call()
    return err.value.code


def test_parse_gpus() -> None:
    assert [m.device_id for m in parse_gpus("2x0x233010DE,0x20B710DE")] == ["0x233010DE"] * 2 + ["0x20B710DE"]
    assert parse_gpus("NVIDIA-H100-80GB-HBM3")[0].device_id == "0x233010DE"
    with pytest.raises(ValueError, match="1 to 16"):
        parse_gpus("17x0x233010DE")
    with pytest.raises(LookupError, match="not NVIDIA's"):
        parse_gpus("0x12345678")  # vendor 0x5678: a typo, not a GPU
    station = parse_gpus("4x0x20B210DE,0x1FB010DE")  # DGX Station A100: four MIG GPUs and its display GPU
    assert [m.mig_capable for m in station] == [True] * 4 + [False]


def test_a_gpu_without_mig_refuses_mig_mode_as_nvml_does(tmp_path) -> None:
    b = SimulatedBackend(tmp_path / "g.json", parse_gpus("1x0x20B210DE,0x1FB010DE"))
    assert [d.mig_capable for d in b.devices()] == [True, False]
    assert _code(lambda: b.set_mig_mode(1, True)) == "NOT_SUPPORTED"
    assert _code(lambda: b.create_gpu_instance(1, "1g.10gb", 0)) == "NOT_SUPPORTED"
    assert not b.read(1).mig_enabled and b.read(1).instances == ()
    b.set_mig_mode(0, True)  # the MIG GPU beside it is unaffected
    assert b.read(0).mig_pending


def test_mode_change_is_pending_until_reset(tmp_path) -> None:
    b = SimulatedBackend(tmp_path / "g.json", parse_gpus("1x0x233010DE"))
    b.set_mig_mode(0, True)
    s = b.read(0)
    assert not s.mig_enabled and s.mig_pending and s.mode_pending
    assert _code(lambda: b.create_gpu_instance(0, "1g.10gb", 0)) == "NOT_SUPPORTED"
    b.reset([0])
    assert b.read(0).mig_enabled and not b.read(0).mode_pending


def test_placement_overlap_max_count_and_compute_are_enforced(sim) -> None:
    assert _code(lambda: sim.create_gpu_instance(0, "3g.40gb", 2)) == "INVALID_ARGUMENT"  # 3g starts at 0 or 4
    gi = sim.create_gpu_instance(0, "3g.40gb", 4)
    assert _code(lambda: sim.create_gpu_instance(0, "2g.20gb", 4)) == "INSUFFICIENT_RESOURCES"  # overlap
    assert _code(lambda: sim.create_gpu_instance(0, "9g.99gb", 0)) == "NOT_SUPPORTED"
    sim.create_gpu_instance(0, "1g.10gb+me", 0)
    assert _code(lambda: sim.create_gpu_instance(0, "1g.10gb+me", 1)) == "INSUFFICIENT_RESOURCES"  # max 1
    sim.create_gpu_instance(0, "2g.20gb", 2)
    sim.create_gpu_instance(0, "1g.10gb", 1)
    assert _code(lambda: sim.create_gpu_instance(0, "1g.10gb", 1)) == "INSUFFICIENT_RESOURCES"  # taken
    # Compute instances: only the sizes the GI offers, within its slices.
    assert _code(lambda: sim.create_compute_instance(0, gi, 4)) == "NOT_SUPPORTED"  # a 3g offers 1c, 2c, 3c
    sim.create_compute_instance(0, gi, 2)
    assert _code(lambda: sim.create_compute_instance(0, gi, 2)) == "INSUFFICIENT_RESOURCES"
    sim.create_compute_instance(0, gi, 1)
    assert sorted(sim.read(0).instances[-1].composition) == [1, 2]
    assert _code(lambda: sim.destroy_gpu_instance(0, gi)) == "IN_USE"  # CIs first
    assert _code(lambda: sim.set_mig_mode(0, False)) == "IN_USE"  # instances first


def test_max_count_is_enforced(sim) -> None:
    for start in (0, 2, 4):
        sim.create_gpu_instance(0, "1g.20gb", start)
    sim.create_gpu_instance(0, "1g.20gb", 6)
    assert len(sim.read(0).instances) == 4  # 4 x 1g.20gb, the maximum
    sim2 = sim  # a 5th cannot exist (no room, and max 4)
    assert _code(lambda: sim2.create_gpu_instance(0, "1g.20gb", 0)) == "INSUFFICIENT_RESOURCES"


def test_twelve_unit_gpu_uses_its_own_table(tmp_path) -> None:
    # RTX PRO 6000 Blackwell: 4 compute slices on 12 placement units; a 1g takes 3 units.
    b = SimulatedBackend(tmp_path / "rtx.json", parse_gpus("1xNVIDIA-RTX-PRO-6000-Blackwell-Server-Edition"))
    b.set_mig_mode(0, True)
    b.reset([0])
    profiles = [p.name for p in b.model(0).profiles]
    assert "4g.96gb" in profiles, profiles
    assert _code(lambda: b.create_gpu_instance(0, "1g.24gb", 1)) == "INVALID_ARGUMENT"  # starts 0, 3, 6, 9
    b.create_gpu_instance(0, "1g.24gb", 9)
    assert b.read(0).instances[0].placement.as_dict() == {"profile": "1g.24gb", "start": 9, "size": 3}
    assert _code(lambda: b.create_gpu_instance(0, "4g.96gb", 0)) == "INSUFFICIENT_RESOURCES"


def test_one_media_engine_set_per_gpu(tmp_path) -> None:
    b = SimulatedBackend(tmp_path / "a30.json", parse_gpus("1x0x20B710DE"))  # A30: 1g.6gb+me and 2g.12gb+me
    b.set_mig_mode(0, True)
    b.reset([0])
    b.create_gpu_instance(0, "1g.6gb+me", 0)
    assert _code(lambda: b.create_gpu_instance(0, "2g.12gb+me", 2)) == "INSUFFICIENT_RESOURCES"


def test_a7_compute_instance_only_in_sizes_the_gi_offers(sim) -> None:
    gi = sim.create_gpu_instance(0, "7g.80gb", 0)
    assert _code(lambda: sim.create_compute_instance(0, gi, 5)) == "NOT_SUPPORTED"  # 7g offers 1,2,3,4,7
    sim.create_compute_instance(0, gi, 4)
    sim.create_compute_instance(0, gi, 3)


def test_state_survives_a_restart_and_a_reboot_keeps_only_the_mode(sim, tmp_path) -> None:
    gi = sim.create_gpu_instance(0, "2g.20gb", 2)
    sim.create_compute_instance(0, gi, 2)
    again = SimulatedBackend(tmp_path / "gpus.json")
    assert again.read(0).instances[0].placement.as_dict() == {"profile": "2g.20gb", "start": 2, "size": 2}
    again.set_mig_mode(1, True)
    again.reboot()
    assert again.read(0).mig_enabled and again.read(0).instances == ()  # instances do not survive a reboot
    assert again.read(1).mig_enabled and again.boots == 1
    with pytest.raises(ValueError, match="not the ones asked for"):
        SimulatedBackend(tmp_path / "gpus.json", parse_gpus("1x0x20B710DE"))


def test_faults(sim) -> None:
    gi = sim.create_gpu_instance(0, "3g.40gb", 0)
    ci = sim.create_compute_instance(0, gi, 3)
    sim.faults_path.write_text(
        json.dumps(
            {
                "in_use": [{"gpu": 0, "start": 0, "pids": [99]}],
                "nvml_error": [{"op": "create_gpu_instance", "code": "UNKNOWN"}],
                "reset_fails": True,
            }
        )
    )
    assert sim.read(0).instances[0].pids == (99,)
    assert _code(lambda: sim.destroy_compute_instance(0, gi, ci)) == "IN_USE"
    assert _code(lambda: sim.create_gpu_instance(0, "3g.40gb", 4)) == "UNKNOWN"
    sim.set_mig_mode(1, True)
    assert _code(lambda: sim.reset([1])) == "RESET_FAILED"
    assert sim.read(1).mode_pending
    sim.faults_path.write_text("{}")
    sim.destroy_compute_instance(0, gi, ci)
    sim.destroy_gpu_instance(0, gi)
    assert sim.ops(0)["destroy_gpu_instance"] == 1 and sim.ops(1)["reset"] == 0

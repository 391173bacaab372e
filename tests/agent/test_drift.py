"""Drift detection without a cluster: what `agent.drift` finds and says, read through the simulated
backend (a second process's change included) and through the NVML backend over the fake pynvml.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest
from fake_pynvml import FakeNvml

from migops.agent.backend import Backend
from migops.agent.desired import desired_on_node, node_models
from migops.agent.drift import check, differences
from migops.agent.nvml import NvmlBackend
from migops.agent.plan import plan_gpu
from migops.agent.probe import _READ_ONLY, ReadOnlyNvml
from migops.agent.simulated import SimulatedBackend, parse_gpus
from migops.agent.state import ConfigRequest
from migops.cli import main
from migops.mig.catalogue import catalogue
from migops.mig.spec import parse_config

H100 = catalogue().resolve("0x233010DE")
CONFIG = parse_config((Path(__file__).resolve().parents[2] / "examples" / "nvidia-default-config.yaml").read_text())


def _request(name: str) -> ConfigRequest:
    return ConfigRequest(name, CONFIG, None, "mixed", "gpu-operator")


def _apply(backend: Backend, name: str) -> list:
    """What the flow's steps 6-7 do, without Kubernetes: mode, then the diff."""
    models = node_models(backend.devices())
    desired = desired_on_node(_request(name), models)
    for d in desired:
        if not backend.read(d.index).mig_enabled:
            backend.set_mig_mode(d.index, True)
            backend.reset([d.index])
        created: dict = {}
        for step in plan_gpu(backend.read(d.index), d).steps:
            if step.op == "create_gi":
                created[step.placement] = backend.create_gpu_instance(
                    d.index, step.placement.profile, step.placement.start
                )
            elif step.op == "create_ci":
                backend.create_compute_instance(d.index, created[step.placement], step.slices)
    return desired


def _check(backend: Backend, name: str):
    return check(backend, desired_on_node(_request(name), node_models(backend.devices())))


def _sim(tmp_path: Path, count: int = 2) -> SimulatedBackend:
    return SimulatedBackend(tmp_path / "gpus.json", parse_gpus(f"{count}x0x233010DE"), node="n")


def _person(state: Path, *argv: str) -> int:
    return main(["sim", argv[0], "--state-file", str(state), *argv[1:]])


def test_each_kind_of_drift_is_named_per_gpu(tmp_path: Path) -> None:
    agent = _sim(tmp_path, 4)
    _apply(agent, "all-2g.20gb")
    assert _check(agent, "all-2g.20gb").drifts == ()
    state = agent.path
    assert _person(state, "destroy-gi", "--gpu", "0", "--start", "2") == 0  # an instance removed
    assert _person(state, "create-gi", "--gpu", "1", "--profile", "1g.10gb") == 0  # an extra one (at slice 6)
    assert _person(state, "mig-mode", "--gpu", "2", "off") == 0  # MIG off
    assert _person(state, "reset", "--gpu", "3") == 0  # reset: an empty layout
    found = {d.index: d.what for d in _check(agent, "all-2g.20gb").drifts}
    assert found == {
        0: "missing 2g.20gb",
        1: "extra 1g.10gb@6",
        2: "MIG disabled (config: enabled)",
        3: "missing 3 x 2g.20gb; no instances left",
    }


def test_a_partly_destroyed_instance_and_a_pending_mode_are_drift(tmp_path: Path) -> None:
    agent = _sim(tmp_path, 2)
    _apply(agent, "all-balanced")
    assert _person(agent.path, "destroy-ci", "--gpu", "0", "--start", "4") == 0  # 3g.40gb's CI gone, GI stays
    # nvidia-smi -mig 0 without the reset: the mode change stays pending (the sim destroys instances first).
    assert _person(agent.path, "mig-mode", "--gpu", "1", "off", "--pending") == 0
    found = {d.index: d.what for d in _check(agent, "all-balanced").drifts}
    assert found == {
        0: "missing 3g.40gb; extra 3g.40gb[-]@4",
        1: "MIG mode change to disabled pending (config: enabled)",
    }


def test_the_backend_reads_the_file_as_it_is_now_and_writers_do_not_lose_changes(tmp_path: Path) -> None:
    agent = _sim(tmp_path, 8)
    person = SimulatedBackend(agent.path, out_of_band=True)
    for i in range(8):
        person.set_mig_mode(i, True)
    person.reset(list(range(8)))
    assert all(agent.read(i).mig_enabled for i in range(8))  # no copy from start-up

    # Two writers at once (the agent and a person), 7 x 1g.10gb on each GPU from two threads: the lock
    # makes every read-modify-write see the previous one; without it creations would be lost.
    def fill(backend: SimulatedBackend, gpus: range) -> None:
        for g in gpus:
            for start in range(7):
                backend.create_gpu_instance(g, "1g.10gb", start)

    threads = [
        threading.Thread(target=fill, args=(agent, range(0, 8, 2))),
        threading.Thread(target=fill, args=(person, range(1, 8, 2))),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [len(agent.read(i).instances) for i in range(8)] == [7] * 8
    # The person's calls are not the agent's: `ops` counts only the agent's.
    assert [agent.ops(i)["create_gpu_instance"] for i in range(8)] == [7, 0] * 4


def test_migops_sim_refuses_what_the_driver_refuses(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    agent = _sim(tmp_path, 1)
    _apply(agent, "all-balanced")
    assert _person(agent.path, "create-gi", "--gpu", "0", "--profile", "1g.10gb", "--start", "4") == 1
    assert "INSUFFICIENT_RESOURCES" in capsys.readouterr().err
    assert _person(agent.path, "destroy-gi", "--gpu", "0", "--start", "5") == 2  # no instance there: usage
    assert "no GPU instance starting at slice 5" in capsys.readouterr().err
    (agent.faults_path).write_text('{"in_use": [{"gpu": 0, "start": 0, "pids": [77]}]}')
    assert _person(agent.path, "destroy-gi", "--gpu", "0", "--start", "0") == 1  # processes: IN_USE
    assert _person(agent.path, "show") == 0
    out = capsys.readouterr().out
    assert "GPU 0  H100-SXM5-80GB  MIG on  1g.10gb@0[1] pids 77, 1g.10gb@1[1], 2g.20gb@2[2], 3g.40gb@4[3]" in out


_RENAMES: list[tuple[str, str]] = []  # (src, dst) of every os.replace/os.rename while a test listens
_LISTENING: list[bool] = []


def _audit(event: str, args: tuple) -> None:
    if _LISTENING and event == "os.rename":
        _RENAMES.append((str(args[0]), str(args[1])))


sys.addaudithook(_audit)


def test_each_migops_sim_action_is_one_write_seen_whole_or_not_at_all(tmp_path: Path) -> None:
    """`mig-mode off` is eight driver calls (three CIs, three GIs, the mode, the reset): the agent reads
    the file between any two writes, so the action must be one write, or the agent can see (and start
    repairing) a change half-made."""
    agent = _sim(tmp_path, 2)
    _apply(agent, "all-2g.20gb")
    _RENAMES.clear()
    _LISTENING.append(True)
    try:
        assert _person(agent.path, "mig-mode", "--gpu", "0", "off") == 0
    finally:
        _LISTENING.clear()
    assert [dst for _, dst in _RENAMES] == [str(agent.path)]
    assert not agent.read(0).mig_enabled and agent.read(0).instances == ()
    assert [d.what for d in _check(agent, "all-2g.20gb").drifts] == ["MIG disabled (config: enabled)"]
    # A refused step leaves the GPUs as they were: processes on the last instance of GPU 1.
    agent.faults_path.write_text('{"in_use": [{"gpu": 1, "start": 4, "pids": [77]}]}')
    assert _person(agent.path, "mig-mode", "--gpu", "1", "off") == 1
    assert agent.read(1).mig_enabled and [i.start for i in agent.read(1).instances] == [0, 2, 4]
    assert [c.what for c in _check(agent, "all-2g.20gb").drifts] == ["MIG disabled (config: enabled)"]
    # The agent's own calls stay one write each.
    _RENAMES.clear()
    _LISTENING.append(True)
    try:
        agent.set_mig_mode(0, True)
        agent.reset([0])
    finally:
        _LISTENING.clear()
    assert len(_RENAMES) == 2


def test_the_nvml_check_is_read_only_and_sees_out_of_band_changes() -> None:
    fake = FakeNvml([H100, H100])
    # nvidia-smi -r -i <bus IDs>: the fake's bus IDs are 00000000:<0x18 + index>:00.0
    nvml = NvmlBackend(
        fake, reset=lambda argv: fake.reset([int(b.split(":")[1], 16) - 0x18 for b in argv[-1].split(",")])
    )
    _apply(nvml, "all-balanced")
    assert _check(nvml, "all-balanced").drifts == ()
    before = len(fake.calls)
    check = _check(nvml, "all-balanced")
    made = fake.calls[before:]
    assert made and all(_READ_ONLY.match(name) for name in made), sorted(set(made))
    assert "nvmlDeviceGetGpuInstances" in made and "nvmlGpuInstanceGetComputeInstances" in made
    assert check.drifts == ()
    # Out of band, as nvidia-smi would (straight to the driver, not through the agent's backend):
    gi = next(g for g in fake.gpus[0].gis.values() if g.start == 4)  # the 3g.40gb
    gi.cis.clear()
    del fake.gpus[0].gis[gi.id]
    fake.gpus[1].gis.clear()
    fake.gpus[1].mig = [0, 0]
    found = {d.index: d.what for d in _check(nvml, "all-balanced").drifts}
    assert found == {0: "missing 3g.40gb", 1: "MIG disabled (config: enabled)"}
    # MIG enabled again out of band: the profiles are read afresh, the empty GPU is seen as empty.
    fake.gpus[1].mig = [1, 1]
    assert {d.index: d.what for d in _check(nvml, "all-balanced").drifts}[1] == (
        "missing 2 x 1g.10gb, 2g.20gb, 3g.40gb; no instances left"
    )


def test_the_nvml_reads_go_through_the_read_only_wrapper() -> None:
    nvml = NvmlBackend(FakeNvml([H100]))
    with pytest.raises(PermissionError, match="read-only"):
        nvml.reader.nvmlDeviceSetMigMode  # noqa: B018 - the attribute access itself is refused
    assert isinstance(nvml.reader, ReadOnlyNvml)


def test_differences_of_a_gpu_no_entry_covers_are_none(tmp_path: Path) -> None:
    agent = _sim(tmp_path, 1)
    desired = desired_on_node(_request("all-disabled"), node_models(agent.devices()))
    assert differences([agent.read(0)], desired) == ()

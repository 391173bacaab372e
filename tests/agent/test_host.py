"""Host systemd GPU clients through `chroot <root> systemctl` (fake executables: no systemd here)."""

from __future__ import annotations

import pytest
from fake_host import calls, make_host, unit_state

from migops.agent.host import HostCommands, HostError, Systemd, parse_gpu_clients


@pytest.fixture
def host(tmp_path):
    env = make_host(
        tmp_path / "host",
        {
            "nvsm.service": "active",
            "nvidia-dcgm.service": "failed",
            "dcgm-exporter.service": "inactive",
            "nv_peer_mem.service": "oneshot",
            "kubelet.service": "active",
        },
    )
    return tmp_path / "host", HostCommands("/host", env=env, timeout=20)


def test_stops_running_and_failed_units_and_starts_them_again(host, tmp_path) -> None:
    root, commands = host
    systemd = Systemd(commands, journal=tmp_path / "journal.json")
    stopped = systemd.stop(
        ["nvsm.service", "nvidia-dcgm.service", "dcgm-exporter.service", "nv_peer_mem.service", "missing.service"]
    )
    assert stopped == ["nvsm.service", "nvidia-dcgm.service"]
    assert unit_state(root, "nvsm.service") == "inactive"
    assert (root / "chroot.log").read_text().split() == ["/host"] * len(calls(root))  # every call in the host's root
    assert systemd.pending() == stopped  # journalled: a killed agent still restarts them
    assert Systemd(commands, journal=tmp_path / "journal.json").pending() == stopped
    systemd.start()
    assert unit_state(root, "nvsm.service") == "active" and unit_state(root, "nvidia-dcgm.service") == "active"
    assert "start --no-block -- nvsm.service" in calls(root)
    assert systemd.pending() == []


def test_a_failing_stop_is_reported_with_the_command(host, tmp_path) -> None:
    root, commands = host
    (root / "fail-stop").touch()
    with pytest.raises(HostError, match="systemctl stop -- nvsm.service exited 1: Failed to stop nvsm.service"):
        Systemd(commands, journal=tmp_path / "j.json").stop(["nvsm.service"])
    assert Systemd(commands, journal=tmp_path / "j.json").pending() == ["nvsm.service"]  # tried: restart it


def test_reboot_runs_in_the_host(host) -> None:
    root, commands = host
    Systemd(commands).reboot()
    assert (root / "rebooted").exists()


def test_gpu_clients_file() -> None:
    text = (
        "version: v1\nsystemd-services: [nvsm.service, nvsm-mqtt.service, nvidia-dcgm.service, dcgm-exporter.service]\n"
    )
    assert parse_gpu_clients(text)[0] == "nvsm.service"
    assert parse_gpu_clients("version: v1\n") == ()
    with pytest.raises(ValueError, match="version must be"):
        parse_gpu_clients("version: v2\nsystemd-services: []\n")
    with pytest.raises(ValueError, match="unexpected field"):
        parse_gpu_clients("version: v1\nservices: [a]\n")
    with pytest.raises(ValueError, match="list of unit names"):
        parse_gpu_clients("version: v1\nsystemd-services: nvsm.service\n")

"""The agent under the NVIDIA container runtime: GPU resets use the nvidia-smi the runtime injects.

With the GPU Operator's driver container the host root has no nvidia-smi (it lives under
/run/nvidia/driver), so `chroot /host nvidia-smi -r` cannot reset a GPU; the runtime puts the driver's
nvidia-smi into the agent's container for NVIDIA_DRIVER_CAPABILITIES=utility (manifests/base/agent).
Without one in the container, the host's is used through chroot, as before.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from migops.agent.main import reset_commands


def _fake_nvidia_smi(bindir: Path, record: Path) -> None:
    bindir.mkdir()
    tool = bindir / "nvidia-smi"
    tool.write_text(f'#!/bin/sh\necho "$@" >> {record}\n')
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)


def test_the_injected_nvidia_smi_resets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    record = tmp_path / "calls"
    _fake_nvidia_smi(tmp_path / "bin", record)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    commands = reset_commands("/host")
    assert commands.prefix == ()
    commands(["nvidia-smi", "-r", "-i", "00000000:18:00.0"])
    assert record.read_text() == "-r -i 00000000:18:00.0\n"


def test_without_one_the_host_root_is_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi anywhere on it
    assert reset_commands("/host").prefix == ("chroot", "/host")

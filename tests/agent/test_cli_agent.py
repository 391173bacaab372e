"""`migops agent` and `migops gpus --probe` on the command line."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

from agent_harness import ROOT
from fake_pynvml import FakeNvml

from migops.cli.agent import cmd_probe
from migops.mig.catalogue import catalogue


def _migops(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "migops", *args], capture_output=True, text=True, timeout=60, cwd=ROOT, env=env
    )


def test_probe_without_a_driver_says_so() -> None:
    result = _migops("gpus", "--probe")
    assert result.returncode == 1
    assert "NVML is not available here" in result.stderr


def test_probe_output_with_the_fake(capsys) -> None:
    fake = FakeNvml([catalogue().resolve("0x233010DE")] * 2)
    assert cmd_probe(argparse.Namespace(output="text"), fake) == 0
    out = capsys.readouterr().out
    assert "read-only probe, nothing was changed" in out and out.count("matches the catalogue") == 2
    assert cmd_probe(argparse.Namespace(output="json"), fake) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["gpus"][1]["device_id"] == "0x233010DE" and doc["gpus"][1]["mig_capable"]


def test_agent_usage_errors(tmp_path) -> None:
    env = {"PATH": "/usr/bin:/bin"}
    result = _migops("agent", "--backend", "simulated", env=env)
    assert result.returncode == 2 and "--node" in result.stderr
    result = _migops(
        "agent",
        "--node",
        "n",
        "--backend",
        "simulated",
        "--gpus",
        "0x12345678",
        "--state-file",
        str(tmp_path / "g.json"),
        env=env,
    )
    assert result.returncode == 2 and "unknown GPU" in result.stderr and "not NVIDIA's" in result.stderr
    result = _migops(
        "agent", "--node", "n", "--backend", "simulated", "--state-file", str(tmp_path / "g.json"), env=env
    )
    assert result.returncode == 2 and "name the GPUs" in result.stderr
    result = _migops("agent", "--node", "n", "--backend", "nvml", "--gpus", "8x0x233010DE", env=env)
    assert result.returncode == 2 and "for --backend simulated" in result.stderr
    result = _migops(
        "agent",
        "--node",
        "n",
        "--backend",
        "simulated",
        "--gpus",
        "1x0x233010DE",
        "--state-file",
        str(tmp_path / "g.json"),
        "--config-map",
        "nope",
        env=env,
    )
    assert result.returncode == 2 and "NAMESPACE/NAME" in result.stderr

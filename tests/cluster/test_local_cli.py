"""`migops local up/status/env/down` end to end, as a new user would run them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from local_cli import down_on_exit, migops_local
from polling import until

from migops.local.controlplane import identifying_arguments
from migops.local.process import find_by_argument

MIGOPS = Path(sys.executable).parent / "migops"


def _run(home: Path, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return migops_local(home, *args, timeout=timeout)


def _processes_mentioning(fragment: str) -> list[str]:
    """Any live process whose command line mentions `fragment` (broader than our own lookup)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if fragment in cmdline and state != "Z" and int(entry.name) != os.getpid():
                found.append(f"{entry.name}: {cmdline}")
    return found


@pytest.fixture
def home(control_plane, tmp_path: Path):
    path = tmp_path / "migops-home"
    with down_on_exit(path):
        yield path
    _run(path, "down")  # never leave a cluster behind, even when an assertion failed


def test_up_env_kubectl_status_down(home: Path) -> None:
    assert MIGOPS.exists(), f"console script missing: {MIGOPS}"
    up = _run(home, "up", "--nodes", "3", "--gpu", "0x233010DE")
    assert up.returncode == 0, up.stderr
    assert "up at https://127.0.0.1:" in up.stdout

    env = _run(home, "env")
    assert env.returncode == 0, env.stderr
    assert "export KUBECONFIG=" in env.stdout and "export PATH=" in env.stdout

    # Exactly what the README tells a user to type, in a fresh shell.
    shell = subprocess.run(
        [
            "bash",
            "-c",
            f'eval "$(MIGOPS_HOME={home} {MIGOPS} local env)"; command -v kubectl; kubectl get nodes --show-labels',
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert shell.returncode == 0, shell.stderr
    lines = shell.stdout.splitlines()
    assert lines[0].endswith("/kubectl") and lines[0] != "/usr/bin/kubectl"
    rows = [line for line in lines if line.startswith("gpu-node-")]
    assert [r.split()[0] for r in rows] == ["gpu-node-1", "gpu-node-2", "gpu-node-3"]
    for row in rows:
        assert row.split()[1] == "Ready"
        for label in (
            "nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3",
            "nvidia.com/gpu.count=8",
            "nvidia.com/mig.capable=true",
            "nvidia.com/mig.strategy=single",
            "nvidia.com/mig.config=all-disabled",
            "migops.io/gpu.device-id=0x233010DE",
        ):
            assert label in row, f"{label} missing from {row}"

    policy = subprocess.run(
        [
            "bash",
            "-c",
            f'eval "$(MIGOPS_HOME={home} {MIGOPS} local env)"; '
            "kubectl get clusterpolicy cluster-policy -o jsonpath='{.spec.mig.strategy}'",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert policy.stdout == "single", policy.stderr

    again = _run(home, "up", "--nodes", "3")
    assert again.returncode == 0 and "already up" in again.stderr

    status = _run(home, "status")
    assert status.returncode == 0
    assert "up at https://127.0.0.1:" in status.stdout and "gpu-node-3" in status.stdout
    assert "kube-scheduler:" in status.stdout

    servers = [r for a in identifying_arguments(home / "local") for r in find_by_argument(a)]
    assert len(servers) == 3  # etcd, kube-apiserver, kube-scheduler

    down = _run(home, "down")
    assert down.returncode == 0, down.stderr
    assert _processes_mentioning(str(home)) == []
    assert not (home / "local").exists()
    assert _run(home, "status").returncode == 1
    assert _run(home, "env").returncode == 1


def test_down_cleans_up_after_a_crashed_server(home: Path) -> None:
    up = _run(home, "up", "--strategy", "mixed", "--gpu", "NVIDIA-A100-SXM4-40GB")
    assert up.returncode == 0, up.stderr
    etcd = find_by_argument(identifying_arguments(home / "local")[0])
    assert len(etcd) == 1
    os.kill(etcd[0].pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and find_by_argument(identifying_arguments(home / "local")[0]):
        time.sleep(0.1)

    status = _run(home, "status")
    assert status.returncode == 1 and "stale" in status.stdout
    down = _run(home, "down")
    assert down.returncode == 0, down.stderr
    assert _processes_mentioning(str(home)) == []


def test_unknown_gpu_is_a_usage_error_and_starts_nothing(home: Path) -> None:
    bad = _run(home, "up", "--gpu", "NVIDIA-GTX-1080")
    assert bad.returncode == 2
    assert "unknown GPU 'NVIDIA-GTX-1080'" in bad.stderr
    assert not (home / "local").exists()


def test_up_with_a_directory_that_is_no_repository_commits_it_into_a_throwaway_one(home: Path) -> None:
    """The suggest quick-start as a new user types it in a checkout: examples/config-repo is a directory of
    the checkout, not a repository git can fetch. `up` commits its files into a repository of its own,
    says so, and the reconciler syncs from it."""
    root = Path(__file__).resolve().parents[2]
    up = subprocess.run(
        [str(MIGOPS), "local", "up", "--strategy", "mixed", "--nodes", "2", "--repo", "examples/config-repo"],
        cwd=root,
        env={**os.environ, "MIGOPS_HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert up.returncode == 0, up.stderr
    assert (
        "examples/config-repo is not a git repository: its files were committed once into that throwaway" in up.stdout
    )
    followed = Path(up.stdout.split("reconciler: following ", 1)[1].split()[0])
    assert followed.is_relative_to(home / "local"), up.stdout
    files = subprocess.run(
        ["git", "-C", str(followed), "ls-tree", "--name-only", "HEAD"], capture_output=True, text=True
    )
    assert files.stdout.split() == ["README.md", "config.yaml", "nodes.yaml"]

    def status() -> subprocess.CompletedProcess[str]:
        shell = f'eval "$(MIGOPS_HOME={home} {MIGOPS} local env)"; migops status'
        return subprocess.run(["bash", "-c", shell], capture_output=True, text=True, timeout=60, check=False)

    ready = until(lambda: (out := status()).returncode == 0 and out, timeout=120, what="MigSync migops Ready")
    assert "True" in ready.stdout and str(followed) not in ready.stderr, ready.stdout
    assert _run(home, "status").stdout.count(f"config repo:    {followed}") == 1
    down = _run(home, "down")
    assert down.returncode == 0 and not followed.exists()


def test_a_test_process_stopped_by_sigterm_takes_its_local_stack_down(home: Path) -> None:
    """CI cancelling the job (SIGTERM) runs no fixture's `finally`: a stack started in sessions of its own
    is taken down by `down_on_exit`, and the process still ends by the signal."""
    script = f"""
import os, signal, sys, time
sys.path.insert(0, {str(Path(__file__).parents[1])!r})
from pathlib import Path
from local_cli import down_on_exit, migops_local
home = Path({str(home)!r})
with down_on_exit(home):
    up = migops_local(home, "up", "--nodes", "1")
    print("up" if up.returncode == 0 else up.stderr, flush=True)
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(60)
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.stdout.strip() == "up", proc.stdout + proc.stderr
    assert proc.returncode == -signal.SIGTERM, proc.stderr
    assert _processes_mentioning(str(home)) == []
    assert not (home / "local").exists()

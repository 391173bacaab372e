"""No etcd or kube-apiserver outlives its owner: clean stop, crash, SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from migops.local.controlplane import ControlPlane, identifying_arguments
from migops.local.process import find_by_argument, is_alive


def _servers(workdir: Path) -> list:
    return [ref for arg in identifying_arguments(workdir) for ref in find_by_argument(arg)]


def _wait_until(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


def test_stop_leaves_no_process_and_no_files(control_plane, tmp_path) -> None:
    plane = ControlPlane(control_plane.binaries)
    plane.start()
    refs = list(plane.processes.values())
    assert [r for r in refs if is_alive(r)] == refs
    assert len(_servers(plane.workdir)) == 2
    plane.stop()
    assert not any(is_alive(r) for r in refs)
    assert _servers(plane.workdir) == []
    assert not plane.workdir.exists()
    plane.stop()  # idempotent


def test_servers_die_with_a_sigkilled_owner(control_plane, tmp_path) -> None:
    """The one exit no finaliser sees: the watchdog notices the owner's pipe closing."""
    workdir = tmp_path / "cp"
    script = textwrap.dedent(f"""
        import os, signal
        from pathlib import Path
        from migops.local.binaries import Binaries
        from migops.local.controlplane import ControlPlane
        plane = ControlPlane(Binaries(Path({str(control_plane.binaries.directory)!r})), Path({str(workdir)!r}))
        plane.start()
        print("up", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert proc.stdout.strip() == "up"
    assert _wait_until(lambda: _servers(workdir) == [], timeout=20), f"left behind: {_servers(workdir)}"


def test_a_failed_start_cleans_up_and_says_why(control_plane, tmp_path) -> None:
    """A server that cannot start: the error carries its log, nothing is left running."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name in ("etcd", "kubectl"):
        os.symlink(control_plane.binaries.directory / name, bindir / name)
    fake = bindir / "kube-apiserver"
    fake.write_text("#!/bin/sh\necho 'fake apiserver: refusing to start' >&2\nexit 3\n")
    fake.chmod(0o755)
    from migops.local.binaries import Binaries
    from migops.local.controlplane import ControlPlaneError

    plane = ControlPlane(Binaries(bindir), tmp_path / "cp", start_timeout=30)
    try:
        plane.start()
    except ControlPlaneError as exc:
        assert "kube-apiserver exited during startup" in str(exc)
        assert "refusing to start" in str(exc)
    else:
        raise AssertionError("start() succeeded with a broken kube-apiserver")
    assert _servers(tmp_path / "cp") == []
    assert (tmp_path / "cp" / "logs" / "kube-apiserver.log").exists()  # kept for diagnosis

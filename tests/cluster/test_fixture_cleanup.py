"""The session fixture leaves nothing behind when a test fails, on Ctrl-C, and on SIGTERM.

Each case runs a tiny pytest session in a subprocess with this suite's conftest, its temporary
directory redirected (TMPDIR) so every server it starts can be found by command line.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

# The suite's conftest and the module it stops its servers with.
SUITE_FILES = tuple(Path(__file__).resolve().parents[1] / name for name in ("conftest.py", "last_resort.py"))

FAILING = """
from kubernetes import client
def test_fails(admin):
    assert client.CoreV1Api(admin).read_namespace("default")
    assert False, "deliberate failure"
"""

HANGING = """
import time, os
from kubernetes import client
def test_hangs(admin):
    client.CoreV1Api(admin).read_namespace("default")
    open(os.environ["READY_MARKER"], "w").close()
    time.sleep(120)
"""


def _servers_under(directory: Path) -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if (
            state != "Z"
            and any(str(directory).encode() in a for a in cmd[1:])
            and Path(cmd[0].decode(errors="replace")).name in ("etcd", "kube-apiserver")
        ):
            found.append(f"{entry.name}: {b' '.join(cmd).decode(errors='replace')}")
    return found


def _session(tmp_path: Path, body: str) -> tuple[subprocess.Popen[str], dict[str, str], Path]:
    suite = tmp_path / "suite"
    suite.mkdir()
    for source in SUITE_FILES:
        shutil.copy(source, suite / source.name)
    (suite / "test_it.py").write_text(body)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp), "READY_MARKER": str(tmp_path / "ready")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(suite), str(suite)],
        cwd=suite,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        # Ctrl-C as a terminal delivers it: a shell that started this suite in the background (`cmd &`
        # without job control) made SIGINT ignored, and the child would inherit that.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    return proc, env, tmp


def _no_servers_left(tmp: Path, timeout: float = 20.0) -> list[str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and _servers_under(tmp):
        time.sleep(0.1)
    return _servers_under(tmp)


def test_a_failing_test_leaves_no_servers(control_plane, tmp_path: Path) -> None:
    proc, _, tmp = _session(tmp_path, FAILING)
    out, _ = proc.communicate(timeout=180)
    assert proc.returncode == 1, out
    assert "deliberate failure" in out
    assert _no_servers_left(tmp, timeout=1) == []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_an_interrupted_session_leaves_no_servers(control_plane, tmp_path: Path, sig: signal.Signals) -> None:
    proc, env, tmp = _session(tmp_path, HANGING)
    marker = Path(env["READY_MARKER"])
    deadline = time.monotonic() + 150
    while not marker.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"inner session never got its cluster up:\n{proc.communicate()[0]}")
        time.sleep(0.1)
    assert len(_servers_under(tmp)) == 2
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=150)  # its teardown stops etcd and kube-apiserver: slow on a busy machine
    assert proc.returncode != 0, out
    assert _no_servers_left(tmp) == [], out

"""Start server processes in their own process group and stop them for certain.

Each server is a session leader (`start_new_session=True`), so a Ctrl-C in the terminal does
not reach it before its owner can shut it down in order, and killing the group also kills
anything it forked. Identity is (pid, start time) so a stale PID file never kills a stranger.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ProcessRef:
    """A process we started: its pid and kernel start time (clock ticks since boot)."""

    pid: int
    start_time: int

    def to_json(self) -> dict[str, int]:
        return {"pid": self.pid, "start_time": self.start_time}

    @classmethod
    def from_json(cls, data: dict[str, int]) -> ProcessRef:
        return cls(int(data["pid"]), int(data["start_time"]))


def spawn(
    argv: Sequence[str], log_path: Path, *, pass_fds: Sequence[int] = (), env: Mapping[str, str] | None = None
) -> tuple[subprocess.Popen[bytes], ProcessRef]:
    """Start `argv` detached from our terminal and session, output appended to `log_path`.

    stdin is /dev/null and no other descriptor is inherited (but `pass_fds`, e.g. a lock the
    process is to hold), so a caller reading our stdout through a pipe (e.g.
    `subprocess.run(capture_output=True)` on `migops local up`) is not kept waiting by the
    servers we leave running.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
            pass_fds=tuple(pass_fds),
            env=None if env is None else dict(env),
        )
    return proc, ProcessRef(proc.pid, _start_time(proc.pid) or 0)


def is_alive(ref: ProcessRef) -> bool:
    """True if that very process still runs (not a zombie, not a recycled pid)."""
    stat = _stat_fields(ref.pid)
    if stat is None or stat[0] in ("Z", "X"):
        return False
    return int(stat[19]) == ref.start_time


def stop(ref: ProcessRef, *, timeout: float = 10.0, popen: subprocess.Popen[bytes] | None = None) -> None:
    """SIGTERM the process group, then SIGKILL it after `timeout`; return once it is gone.

    Pass `popen` when we are the parent so the child is reaped instead of lingering as a zombie.
    """
    if not is_alive(ref):
        _reap(popen)
        return
    _signal_group(ref, signal.SIGTERM)
    if _wait_gone(ref, timeout, popen):
        return
    _signal_group(ref, signal.SIGKILL)
    if not _wait_gone(ref, 10.0, popen):
        raise RuntimeError(f"process {ref.pid} survived SIGKILL")


def kill(ref: ProcessRef, *, popen: subprocess.Popen[bytes] | None = None) -> None:
    """SIGKILL the process group at once, as a crash or the OOM killer ends a server; return once it is gone."""
    if is_alive(ref):
        _signal_group(ref, signal.SIGKILL)
        if not _wait_gone(ref, 10.0, popen):
            raise RuntimeError(f"process {ref.pid} survived SIGKILL")
    _reap(popen)


def _signal_group(ref: ProcessRef, sig: signal.Signals) -> None:
    # The server leads its own group (pgid == pid); signal the group so helpers die too.
    try:
        os.killpg(ref.pid, sig)
    except ProcessLookupError:
        pass
    except PermissionError:
        os.kill(ref.pid, sig)


def _wait_gone(ref: ProcessRef, timeout: float, popen: subprocess.Popen[bytes] | None) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        _reap(popen)
        if not is_alive(ref):
            return True
        time.sleep(0.05)
    return False


def _reap(popen: subprocess.Popen[bytes] | None) -> None:
    if popen is not None:
        popen.poll()


def _stat_fields(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name: [state, ppid, ...]."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # The command name is in parentheses and may itself contain spaces or parentheses.
    return raw[raw.rindex(")") + 2 :].split()


def _start_time(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return int(fields[19]) if fields else None


def find_by_argument(argument: str) -> list[ProcessRef]:
    """Live processes that were given exactly `argument` (e.g. `--data-dir=<workdir>/etcd`).

    A safety net for `migops local down`: finds servers even when the state file is lost,
    without matching a shell or test process that merely mentions the path.
    """
    return _find(lambda entry: argument.encode() in (entry / "cmdline").read_bytes().split(b"\0")[1:])


def find_by_environment(name: str, value: str) -> list[ProcessRef]:
    """Live processes started with `name=value` in their environment: `find_by_argument` for
    programs that take no argument naming their working directory (Flux's controllers)."""
    wanted = f"{name}={value}".encode()
    return _find(lambda entry: wanted in (entry / "environ").read_bytes().split(b"\0"))


def _find(match: Callable[[Path], bool]) -> list[ProcessRef]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            matched = match(entry)
        except OSError:
            continue
        if matched:
            start = _start_time(int(entry.name))
            if start is not None:
                ref = ProcessRef(int(entry.name), start)
                if is_alive(ref):
                    found.append(ref)
    return found

"""Kill a control plane's servers when its owner dies, however it dies.

The owner (a test session) starts this as `python -m migops.local.watchdog` with a pipe on
stdin and writes `watch <pid> <start_time>` for each server it starts and `release <pid>`
for each it stops itself. When the pipe reaches EOF, i.e. when the owner exited, crashed or
was SIGKILLed (the one case no atexit hook or signal handler can cover), every server still
watched is stopped. This needs no preexec_fn / prctl(PR_SET_PDEATHSIG) in the children.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from typing import IO

from migops.local.process import ProcessRef, stop


def watchdog_command() -> list[str]:
    """argv that starts a watchdog with the interpreter running us."""
    return [sys.executable, "-m", "migops.local.watchdog"]


def start_watchdog() -> subprocess.Popen[str]:
    """A watchdog in its own session (a terminal's Ctrl-C must not kill it before it acts)."""
    return subprocess.Popen(
        watchdog_command(),
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
        close_fds=True,
    )


def serve(commands: IO[str]) -> None:
    """Follow the owner's commands until EOF, then stop whatever is still watched."""
    watched: dict[int, ProcessRef] = {}
    for line in commands:
        parts = line.split()
        if len(parts) == 3 and parts[0] == "watch":
            ref = ProcessRef(int(parts[1]), int(parts[2]))
            watched[ref.pid] = ref
        elif len(parts) == 2 and parts[0] == "release":
            watched.pop(int(parts[1]), None)
    # Servers were started in order (etcd first); stop them in reverse.
    for ref in reversed(list(watched.values())):
        try:
            stop(ref, timeout=5.0)
        except RuntimeError:
            pass


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # only EOF on stdin ends us
    serve(sys.stdin)

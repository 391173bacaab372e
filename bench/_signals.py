"""A bench stopped by SIGTERM or SIGHUP (timeout, kill, a closed terminal) still stops what it started.

Python's default for those signals ends the process at once, skipping every `finally` and `with`
exit, so a webhook, control plane or reconciler a bench spawned would be left running. Raising
SystemExit instead unwinds the bench's own cleanup, as Ctrl-C does.
"""

from __future__ import annotations

import signal
import sys


def exit_on_signals() -> None:
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda signum, frame: sys.exit(128 + signum))

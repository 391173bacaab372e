"""`migops local ...` run as a user runs it: this virtualenv's `migops`, a MIGOPS_HOME of the test's own."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from last_resort import stopped_on_exit

MIGOPS = Path(sys.executable).parent / "migops"


def migops_local(home: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(MIGOPS), "local", *args],
        env={**os.environ, "MIGOPS_HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@contextmanager
def down_on_exit(home: Path) -> Iterator[None]:
    """While inside, `migops local down` for `home` also runs when the test process is stopped (SIGTERM,
    SIGHUP) or exits without its teardown: the stack runs in sessions of its own and would outlive it."""
    with stopped_on_exit(lambda: migops_local(home, "down", timeout=300)):
        yield

"""`migops local ...` run as a user runs it: this virtualenv's `migops`, a MIGOPS_HOME of the test's own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

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

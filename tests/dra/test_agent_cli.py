"""`migops agent --dra`: the stand-in publisher is refused with real GPUs, before anything is touched."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

MIGOPS = Path(sys.executable).parent / "migops"


def test_publish_is_refused_with_the_nvml_backend() -> None:
    done = subprocess.run(
        [str(MIGOPS), "agent", "--node", "n1", "--backend", "nvml", "--dra", "publish"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "--dra publish stands in for the DRA driver with simulated GPUs" in done.stderr

"""Fixtures of the chart tests: the helm binary (built once into the cache by hack/helm-binary.sh)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def helm() -> Path:
    out = subprocess.run([str(ROOT / "hack" / "helm-binary.sh")], capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        pytest.fail(f"cannot build helm: {out.stderr[-2000:]}", pytrace=False)
    return Path(out.stdout.strip().splitlines()[-1])

"""Output for a person at a terminal: `migops gpus` fits its width (-o wide: every column, one line per
GPU); in catalogue mode, a problem the core reports once per GPU family is one line naming the families."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from migops.cli import main
from migops.mig.catalogue import catalogue

ROOT = Path(__file__).resolve().parents[2]
INVALID = str(ROOT / "examples" / "invalid-configs.yaml")
TOO_MANY = 'mig-configs.too-many[0].mig-devices."1g.10gb"'


def _gpus(columns: int, *args: str) -> list[str]:
    env = {**os.environ, "COLUMNS": str(columns)}
    out = subprocess.run(
        [sys.executable, "-m", "migops", "gpus", *args], env=env, capture_output=True, text=True, timeout=60, check=True
    )
    return out.stdout.splitlines()


@pytest.mark.parametrize("columns", [80, 120])
def test_gpus_fits_the_terminal(columns: int) -> None:
    lines = _gpus(columns)
    assert max(map(len, lines)) <= columns
    assert lines[0].split()[:6] == ["DEVICE", "ID", "NAME", "ARCH", "C/M", "SLICES"]
    assert "PROFILES (MAX COUNT)" in "\n".join(lines[:2])  # beside the others, or below them when narrow
    # every profile of every GPU is still there, wrapped under its column
    text = " ".join(lines)
    assert all(f"{p.name}({p.max_count})" in text for g in catalogue().gpus for p in g.profiles)


def test_gpus_wide_has_every_column_on_one_line() -> None:
    lines = _gpus(80, "-o", "wide")
    assert len(lines) == len(catalogue().gpus) + 1
    assert {"PRODUCT", "INFERRED"} <= set(lines[0].split())
    assert max(map(len, lines)) > 200


def test_catalogue_problems_merged_across_families(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", INVALID]) == 1
    lines = [line for line in capsys.readouterr().out.splitlines() if f": error: {TOO_MANY}:" in line]
    unknown = [line for line in lines if line.endswith("[unknown-profile]")]
    assert len(unknown) == 1, lines  # one line per family before (13 families)
    assert "on A30, H100-NVL" in unknown[0] and "GPU families): profile '1g.10gb' does not exist" in unknown[0]
    assert "--gpu MODEL or -o json" in unknown[0]
    # JSON keeps each family's own detail (what profiles it has)
    assert main(["validate", "-o", "json", INVALID]) == 1
    (source,) = json.loads(capsys.readouterr().out)["sources"]
    (config,) = [c for c in source["configs"] if c["name"] == "too-many"]
    families = [p for p in config["problems"] if p["path"] == TOO_MANY and p["rule"] == "unknown-profile"]
    assert len(families) > 5 and len({p["message"] for p in families}) == len(families)


def test_with_gpu_nothing_is_merged(capsys: pytest.CaptureFixture[str]) -> None:
    main(["validate", "--gpu", "0x20F110DE", INVALID])  # one GPU: nothing repeats across families
    assert "GPU families" not in capsys.readouterr().out

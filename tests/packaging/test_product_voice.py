"""The product speaks of the product: no file of the repository (code, comments, messages, docs, README,
CHANGELOG, bench output) mentions tracker numbers, work sessions or the machine it was written on.
Upstream projects' public issues ("mig-parted #100") are another thing and stay. The pattern and the
samples below are spelled so that this file does not match itself."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = r"issue [0-9]+|this[ ]session|last[ ]session|next[ ]session|a[ ]session later|this[ ]machine"


def test_no_tracker_numbers_sessions_or_this_machine() -> None:
    out = subprocess.run(
        ["git", "grep", "-nEi", "-I", FORBIDDEN], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert out.returncode in (0, 1), out.stderr  # 1: nothing found; anything else: git failed
    assert out.stdout == "", "say it in the product's voice (TEAM.md, Standards):\n" + out.stdout


def test_the_pattern_finds_what_it_forbids(tmp_path: Path) -> None:
    """The same git grep, on a scratch repository holding one line of each kind, finds every one."""
    s = " session"
    lines = [
        "see issue" + " 40",
        "in this" + s,
        "Last" + s + "'s",
        "the next" + s,
        "a" + s + " later",
        "This" + " machine",
    ]
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "notes.md").write_text("\n".join(lines) + "\nmig-parted #100 stays\n")
    subprocess.run(["git", "-C", str(tmp_path), "add", "notes.md"], check=True)
    out = subprocess.run(["git", "grep", "-nEi", "-I", FORBIDDEN], cwd=tmp_path, capture_output=True, text=True)
    assert out.stdout.count("\n") == len(lines), out.stdout

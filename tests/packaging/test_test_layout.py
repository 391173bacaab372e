"""Test modules are imported by basename (pytest's prepend import mode, no __init__.py in tests/): two
files with one name in different folders stop the whole collection, so each name must be unique."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_test_module_names_are_unique() -> None:
    names = Counter(p.name for p in TESTS.rglob("*.py") if p.name != "conftest.py")
    assert [n for n, c in names.items() if c > 1] == []

"""What a command line names: input files (files, directories searched for configs, `-` for stdin) and
GPU models of the catalogue. Beneath the commands that read them (validate, plan, gpus, gpus --check)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from migops.cli.usage import UsageError

if TYPE_CHECKING:
    from migops.mig.catalogue import GpuModel

SUFFIXES = (".yaml", ".yml", ".json")


def read_input(name: str) -> bytes:
    if name == "-":
        return sys.stdin.buffer.read()
    path = Path(name)
    if not path.exists():
        raise UsageError(f"{name}: no such file")
    if path.is_dir():
        raise UsageError(f"{name}: is a directory")
    try:
        return path.read_bytes()
    except OSError as exc:
        raise UsageError(f"{name}: {exc.strerror}") from None


def expand_inputs(names: Sequence[str]) -> Iterator[tuple[str, bool]]:
    """(file name, found by walking a directory) for each input: files as given, directories searched
    recursively (sorted, hidden entries skipped) for *.yaml, *.yml and *.json, `-` for stdin."""
    for name in names:
        if name != "-" and Path(name).is_dir():
            found = False
            for root, dirs, files in os.walk(name):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                for f in sorted(files):
                    if f.endswith(SUFFIXES) and not f.startswith("."):
                        found = True
                        yield os.path.join(root, f), True
            if not found:
                raise UsageError(f"{name}: no *.yaml, *.yml or *.json file in this directory")
        else:
            yield name, False


def resolve_gpus(names: Sequence[str]) -> list[GpuModel]:
    from migops.mig.catalogue import UnknownGpuError, catalogue

    cat = catalogue()
    try:
        return [cat.resolve(n) for n in names]
    except UnknownGpuError as exc:
        raise UsageError(str(exc)) from None

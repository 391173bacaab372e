"""`migops local ...`: the local control plane (filled in by the local-stack work)."""
from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:  # noqa: SLF001 - argparse's own type
    """Placeholder registration, replaced by the local control plane commands."""

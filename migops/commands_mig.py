"""`migops validate`, `migops plan`, `migops gpus`: the MIG core on the command line."""
from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:  # noqa: SLF001
    pass

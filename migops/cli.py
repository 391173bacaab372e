"""The `migops` command line: one argparse tree, each command group registered by its own module."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version

from migops import (
    commands_agent,
    commands_mig,
    commands_reconcile,
    commands_sim,
    commands_suggest,
    commands_webhook,
    local_cli,
)
from migops.usage import EXIT_OK, EXIT_USAGE, UsageError


def package_version() -> str:
    """The installed distribution's version (pyproject.toml's, the one place it is written)."""
    try:
        return version("migops")
    except PackageNotFoundError:  # a source tree on sys.path, never installed
        return "0+unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="migops",
        description="Validate, plan and apply NVIDIA MIG geometries, the GitOps way.",
    )
    parser.add_argument("--version", action="version", version=f"migops {package_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    commands_mig.register(sub)
    commands_reconcile.register(sub)
    commands_suggest.register(sub)
    local_cli.register(sub)
    commands_agent.register(sub)
    commands_sim.register(sub)
    commands_webhook.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except UsageError as exc:
        print(f"migops {args.command}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())

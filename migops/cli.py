"""The `migops` command line: one argparse tree, each command group registered by its own module."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

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
    from importlib.metadata import PackageNotFoundError, version  # ~20 ms: only when the version is shown

    try:
        return version("migops")
    except PackageNotFoundError:  # a source tree on sys.path, never installed
        return "0+unknown"


class _Version(argparse.Action):
    """`--version`, argparse's own action except that the version is read only when it is shown."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option: Any = None
    ) -> None:
        print(f"migops {package_version()}")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="migops",
        description="Validate, plan and apply NVIDIA MIG geometries, the GitOps way.",
    )
    parser.add_argument("--version", action=_Version, help="show program's version number and exit")
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

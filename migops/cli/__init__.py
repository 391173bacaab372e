"""The `migops` command line: one argparse tree, each command group registered by its own module of this
package (mig: validate/plan/gpus; reconcile: reconcile/diff/status; fleet: inventory/fleet; suggest; local;
agent; sim; webhook)."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from typing import Any

from migops.cli.usage import COMMAND_PARSER, EXIT_OK, EXIT_USAGE, CommandParser, UsageError

# Each command's group module, in the order `migops --help` lists them. A command line registers only
# its own group: importing every group costs what `migops validate` in a pre-commit hook must not pay
# (the logging setup, the cluster client's arguments, subprocess, datetime). tests/cli/test_startup.py
# checks that this table names exactly the commands the groups register, with the same arguments.
COMMANDS: dict[str, str] = {
    "validate": "mig",
    "plan": "mig",
    "gpus": "mig",
    "reconcile": "reconcile",
    "diff": "reconcile",
    "status": "reconcile",
    "inventory": "fleet",
    "fleet": "fleet",
    "suggest": "suggest",
    "local": "local",
    "agent": "agent",
    "sim": "sim",
    "webhook": "webhook",
    "certs": "webhook",
}


def package_version() -> str:
    """The installed distribution's version (pyproject.toml's, the one place it is written)."""
    from importlib.metadata import PackageNotFoundError, version  # costly to import: only when the version is shown

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


def _register_local(sub: argparse._SubParsersAction) -> None:
    """`migops local`: the local cluster harness (local/, migops.local) ships in a checkout and the development
    install, not in the runtime image, which holds only what runs in the cluster."""
    try:
        from migops.local import cli as local_cli
    except ModuleNotFoundError as exc:
        if exc.name is None or not exc.name.startswith("migops.local"):
            raise

        def missing(args: argparse.Namespace) -> int:
            raise UsageError(
                "the local cluster harness is not installed here (the runtime image holds only what runs in the "
                "cluster): run it from a checkout, or install one for development (pip install -e .)"
            )

        local = sub.add_parser(
            "local",
            help="run a local Kubernetes control plane with GPU nodes (from a checkout)",
            description="The local cluster harness runs from a checkout or a development install only.",
        )
        local.add_argument("rest", nargs=argparse.REMAINDER)
        local.set_defaults(func=missing)
        return
    local_cli.register(sub)


def _registrar(group: str) -> Callable[[argparse._SubParsersAction], None]:
    if group == "local":
        return _register_local
    register: Callable[[argparse._SubParsersAction], None] = importlib.import_module(f"migops.cli.{group}").register
    return register


def build_parser(groups: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The command tree; with `groups`, only those groups' commands (what one command line needs)."""
    parser = CommandParser(
        prog="migops",
        description="Validate, plan and apply NVIDIA MIG geometries, the GitOps way.",
    )
    parser.add_argument("--version", action=_Version, help="show program's version number and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for group in dict.fromkeys(COMMANDS.values()) if groups is None else groups:
        _registrar(group)(sub)
    return parser


def groups_needed(argv: Sequence[str]) -> list[str] | None:
    """The groups a command line needs: its command's (the first argument, as the parser reads it: the top
    level has only options without values), none for a bare `--version`, else every one (help, a usage
    error listing the commands)."""
    if argv and argv[0] in COMMANDS:
        return [COMMANDS[argv[0]]]
    if list(argv) == ["--version"]:
        return []
    return None


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(groups_needed(argv))
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except UsageError as exc:
        command: argparse.ArgumentParser = getattr(args, COMMAND_PARSER, parser)
        command.print_usage(sys.stderr)
        print(f"{command.prog}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())

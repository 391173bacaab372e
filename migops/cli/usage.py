"""Exit codes, the usage error and the argument parser shared by every `migops` command."""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Sequence
from typing import Any

EXIT_OK = 0
EXIT_INVALID = 1  # the input was read and is invalid (problems printed)
EXIT_USAGE = 2  # the invocation is wrong: unknown GPU, missing file, bad flag

# The namespace attribute that names the command's own parser (CommandParser), for usage errors.
COMMAND_PARSER = "command_parser"


class UsageError(Exception):
    """Bad invocation: printed after the command's usage as `migops <command>: <message>`, exit 2."""


class CommandParser(argparse.ArgumentParser):
    """argparse's parser, except that the command given (the parser with no subcommands of its own)
    answers for what it was given: an argument it does not take is reported with its usage and its
    nearest option (argparse hands a subcommand's leftovers to the top-level parser, whose usage names
    no option of the command), and the namespace names it (COMMAND_PARSER) for later usage errors."""

    def parse_known_args(self, args: Iterable[str] | None = None, namespace: Any = None) -> tuple[Any, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        if self._subparsers is None:
            if extras:
                self.error(self._unrecognized(extras))
            if getattr(parsed, COMMAND_PARSER, None) is None:
                setattr(parsed, COMMAND_PARSER, self)
        return parsed, extras

    def _unrecognized(self, extras: Sequence[str]) -> str:
        from migops.mig.text import nearest  # only on this error: `migops --version` loads no MIG module

        message = f"unrecognized arguments: {' '.join(extras)}"
        options = [o for o in self._option_string_actions if o.startswith("--")]
        flag = next((e.split("=", 1)[0] for e in extras if e.startswith("--")), None)
        near = nearest(flag, options) if flag else None
        return f"{message} (did you mean {near}?)" if near else message

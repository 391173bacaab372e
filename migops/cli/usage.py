"""Exit codes and the usage error shared by every `migops` command."""

EXIT_OK = 0
EXIT_INVALID = 1  # the input was read and is invalid (problems printed)
EXIT_USAGE = 2  # the invocation is wrong: unknown GPU, missing file, bad flag


class UsageError(Exception):
    """Bad invocation: printed as `migops <command>: <message>`, exit 2."""

"""Problems found in MIG input, and the one exception type the core raises.

Every problem names the place (a path such as `mig-configs.custom[1].mig-devices."1g.10gb"`) and the
rule it breaks, so a person, a webhook denial and a test can all point at the same thing. Where the
text is known, a problem also carries the line and column (1-based) of the offending key or value; the
core's validator works on parsed values and leaves them out, and callers that hold the text attach them
by looking the path up in the reader's location index (`MigPartedConfig.locate`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal, cast

Severity = Literal["error", "warning"]

_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")


def key_part(key: object) -> str:
    """How a path spells a mapping key: as it is if a plain word, else quoted (dots, spaces, ...)."""
    text = str(key)
    return text if _PLAIN_KEY.match(text) else '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


@lru_cache(maxsize=4096)  # bounded: the keys are untrusted, and an unbounded cache grows with every new name
def key_path(parent: str, key: object) -> str:
    """Append a mapping key to a path, quoting keys that are not plain words (dots, spaces, ...)."""
    part = key_part(key)
    return f"{parent}.{part}" if parent else part


def index_path(parent: str, index: int) -> str:
    return f"{parent}[{index}]"


def parent_path(path: str) -> str | None:
    """The path one level up (`a.b[2]` -> `a.b`, `a."x.y"` -> `a`, `a` -> ""); None above the root."""
    if not path:
        return None
    if path.endswith("]"):
        return path[: path.rindex("[")]
    if path.endswith('"'):
        # a quoted key: find its opening quote (quotes inside are escaped with a backslash)
        i = len(path) - 2
        while i >= 0:
            if path[i] == '"':
                slashes = 0
                j = i - 1
                while j >= 0 and path[j] == "\\":
                    slashes += 1
                    j -= 1
                if slashes % 2 == 0:
                    break
            i -= 1
        return path[: max(i - 1, 0)]
    dot = path.rfind(".")
    return path[:dot] if dot >= 0 else ""


_Setter = Callable[[object, object], None]


def slot_setters(cls: type, names: str) -> tuple[_Setter, ...]:
    """The setters of these slots of a frozen, slotted dataclass, for an __init__ of its own: the
    generated one calls object.__setattr__ per field, which finds the slot's descriptor by name on
    every call; its own setter is a third faster, and a large file's verdict makes ~100,000 problems."""
    return tuple(cast("_Setter", cls.__dict__[name].__set__) for name in names.split())


@dataclass(frozen=True, slots=True, init=False)
class Problem:
    """One finding: where, which rule, what is wrong; errors make the input invalid, warnings do not."""

    path: str
    rule: str
    message: str
    severity: Severity = "error"
    line: int | None = None  # 1-based, in the whole file (also inside a ConfigMap's block scalar)
    column: int | None = None  # 1-based, in characters

    # Not the generated __init__: set through the slots' own setters (`slot_setters`), about three
    # times as fast (slots: 35% smaller).
    def __init__(
        self,
        path: str,
        rule: str,
        message: str,
        severity: Severity = "error",
        line: int | None = None,
        column: int | None = None,
    ) -> None:
        _set_path(self, path)
        _set_rule(self, rule)
        _set_message(self, message)
        _set_severity(self, severity)
        _set_line(self, line)
        _set_column(self, column)

    def __str__(self) -> str:
        where = self.path or "(document)"
        return f"{where}: {self.message} [{self.rule}]"

    def at(self, line: int | None, column: int | None) -> Problem:
        """The same problem with a location (kept if it already has one)."""
        if self.line is not None or line is None:
            return self
        # Not dataclasses.replace, which looks the fields up on every call: a large file's verdict
        # places thousands of problems.
        return Problem(self.path, self.rule, self.message, self.severity, line, column)

    def as_dict(self) -> dict[str, object]:
        out: dict[str, object] = {
            "path": self.path,
            "rule": self.rule,
            "message": self.message,
            "severity": self.severity,
        }
        if self.line is not None:
            out["line"] = self.line
            out["column"] = self.column
        return out


_set_path, _set_rule, _set_message, _set_severity, _set_line, _set_column = slot_setters(
    Problem, "path rule message severity line column"
)


class MigError(Exception):
    """The only exception type the MIG core raises on bad input; carries the problems found."""

    def __init__(self, problems: list[Problem] | tuple[Problem, ...]) -> None:
        self.problems: tuple[Problem, ...] = tuple(problems)
        super().__init__("; ".join(str(p) for p in self.problems) or "invalid input")


def errors_only(problems: tuple[Problem, ...] | list[Problem]) -> tuple[Problem, ...]:
    return tuple(p for p in problems if p.severity == "error")

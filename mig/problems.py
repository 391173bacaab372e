"""Problems found in MIG input, and the one exception type the core raises.

Every problem names the place (a path such as `mig-configs.custom[1].mig-devices."1g.10gb"`) and the
rule it breaks, so a person, a webhook denial and a test can all point at the same thing.
"""
from __future__ import annotations

import re
from functools import lru_cache
from dataclasses import dataclass
from typing import Literal

Severity = Literal["error", "warning"]

_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")


@lru_cache(maxsize=65536)
def key_path(parent: str, key: object) -> str:
    """Append a mapping key to a path, quoting keys that are not plain words (dots, spaces, ...)."""
    text = str(key)
    part = text if _PLAIN_KEY.match(text) else '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return f"{parent}.{part}" if parent else part


def index_path(parent: str, index: int) -> str:
    return f"{parent}[{index}]"


@dataclass(frozen=True)
class Problem:
    """One finding: where, which rule, what is wrong; errors make the input invalid, warnings do not."""

    path: str
    rule: str
    message: str
    severity: Severity = "error"

    def __str__(self) -> str:
        where = self.path or "(document)"
        return f"{where}: {self.message} [{self.rule}]"

    def as_dict(self) -> dict[str, str]:
        return {"path": self.path, "rule": self.rule, "message": self.message, "severity": self.severity}


class MigError(Exception):
    """The only exception type the MIG core raises on bad input; carries the problems found."""

    def __init__(self, problems: list[Problem] | tuple[Problem, ...]) -> None:
        self.problems: tuple[Problem, ...] = tuple(problems)
        super().__init__("; ".join(str(p) for p in self.problems) or "invalid input")


def errors_only(problems: tuple[Problem, ...] | list[Problem]) -> tuple[Problem, ...]:
    return tuple(p for p in problems if p.severity == "error")

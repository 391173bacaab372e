"""The shell blocks of the README and the user docs, and how tests/docs/test_doc_commands.py runs them.

A block is a fence whose info string is `sh`, `bash`, `shell` or `console`. An HTML comment on the line
right before the fence says how it is tested:

    (none)                          run from the repository's root
    <!-- doc-test: in DIR -->       run from DIR (relative to the root)
    <!-- doc-test: needs WHAT -->   not run (WHAT: a real cluster, a GPU, root, a registry, ...); each
                                    command is parsed instead: a `migops` command line must be accepted
                                    by migops's own argument parser, a `make` target must exist

The blocks of one page run in order in one environment (what `eval "$(migops local env)"` exports
carries on to the next block) with a fresh MIGOPS_HOME, and `migops local down` ends the page. An `sh`
block runs as one `bash -eo pipefail` script and must exit 0. A `console` block is commands (`$ ...`,
continued with a trailing backslash) each followed by the output it prints, stdout and stderr together,
whatever its exit status; the output must be what the page shows, with this normalisation:

- a command shown without output is run but its output is not compared;
- a line that is only `...` stands for any number of lines (none included);
- `...` inside a line stands for any text on that line;
- trailing spaces are ignored.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KINDS = ("sh", "bash", "shell", "console")
MARK = re.compile(r"^<!-- doc-test: (needs|in) (.+?) -->$")
FENCE = re.compile(r"^(\s*)```(\w*)\s*$")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # the opening fence's, 1-based
    kind: str
    text: str
    needs: str | None = None  # the marker's WHAT: parsed, not run
    cwd: str | None = None

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def user_pages() -> list[Path]:
    """The README and the user docs (docs/development/ and the generated troubleshooting page aside)."""
    docs = sorted(p for p in (ROOT / "docs").glob("*.md") if p.name != "troubleshooting.md")
    return [ROOT / "README.md", *docs]


def blocks(page: Path) -> list[Block]:
    lines = page.read_text().splitlines()
    found, i = [], 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        indent, kind = opening.group(1), opening.group(2)
        end = next(j for j in range(i + 1, len(lines)) if lines[j].strip().startswith("```"))
        if kind in KINDS:
            body = "\n".join(line.removeprefix(indent) for line in lines[i + 1 : end])
            mark = MARK.match(lines[i - 1].strip()) if i else None
            needs = mark.group(2) if mark and mark.group(1) == "needs" else None
            cwd = mark.group(2) if mark and mark.group(1) == "in" else None
            found.append(Block(page, i + 1, kind, body, needs, cwd))
        i = end + 1
    return found


def commands(block: Block) -> list[str]:
    """The command lines of a block: continuations joined, comments and console output left out."""
    out: list[str] = []
    pending = ""
    heredoc: str | None = None
    for raw in block.text.splitlines():
        if heredoc is not None:  # the body of a here-document is data
            heredoc = None if raw.strip() == heredoc else heredoc
            continue
        if block.kind == "console" and not pending:
            if not raw.startswith("$ "):
                continue
            raw = raw[2:]
        line = pending + raw.strip()
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        pending = ""
        if line and not line.startswith("#"):
            out.append(line)
            opened = re.search(r"<<-?\s*'?(\w+)'?", line)
            heredoc = opened.group(1) if opened else None
    return out


def console_steps(block: Block) -> list[tuple[str, list[str]]]:
    """(command, the output lines shown after it) of a console block."""
    steps: list[tuple[str, list[str]]] = []
    pending = ""
    for raw in block.text.splitlines():
        if pending or raw.startswith("$ "):
            line = pending + (raw[2:] if not pending else raw.strip())
            if line.endswith("\\"):
                pending = line[:-1] + " "
                continue
            pending = ""
            steps.append((line, []))
        elif steps:
            steps[-1][1].append(raw)
    return steps


def matches(expected: list[str], actual: str) -> bool:
    """`actual` is what `expected` shows, under the normalisation in this module's docstring."""
    while expected and not expected[-1].strip():
        expected = expected[:-1]
    parts = []
    for line in expected:
        if line.strip() == "...":
            parts.append(r"(?:[^\n]*\n)*?")
        else:
            pieces = [re.escape(p) for p in line.rstrip().split("...")]
            parts.append(r"[^\n]*?".join(pieces) + r"[ \t]*\n")
    text = "\n".join(line.rstrip() for line in actual.rstrip("\n").split("\n")) + "\n" if actual.strip() else ""
    return re.fullmatch("".join(parts), text, re.S) is not None


def split_words(command: str) -> list[list[str]]:
    """The simple commands of a command line (split at |, &&, ||, ;), as words; env assignments dropped."""
    words = shlex.split(command, comments=True)
    out: list[list[str]] = [[]]
    for w in words:
        if w in ("|", "&&", "||", ";"):
            out.append([])
        else:
            out[-1].append(w)
    simple = []
    for cmd in out:
        while cmd and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", cmd[0]):
            cmd = cmd[1:]
        if cmd:
            simple.append(cmd)
    return simple

"""Run the benchmark scripts in bench/ (each `*.py` but this one and `_*.py`), in name order, each in its
own interpreter from the repository root; print their output as it comes and write it to bench/README.md,
the one place measured figures are kept. `make bench` runs every script; `bench/run.py NAME...` runs
those and keeps the other sections of bench/README.md as they were, each with the date, the commit and
the machine (cores, CPU model, memory, load average) it was measured on.

Benchmarks print figures, not verdicts; the exit status is non-zero only if a script crashes.
"""

from __future__ import annotations

import os
import platform
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
PAGE = BENCH / "README.md"
HEAD = """# Measured figures

<!-- Written by `make bench` (bench/run.py): edit the benchmarks, not this page. -->

Each section is one benchmark script's output, with when, on which commit and on what machine it ran.
The figures move with the machine and with whatever else it runs (the load average is printed): compare
ratios, CPU times and counts rather than wall-clock times from different sections. What each bench
measures and its targets are in the script's docstring and in the docs that link here.
"""
SECTION = re.compile(r"^## `(bench/[a-z0-9_]+\.py)`$", re.M)


@dataclass(frozen=True)
class Run:
    script: Path
    status: str  # "ok" or "FAILED (exit N)"
    seconds: float
    output: str
    when: str
    machine: str


def scripts() -> list[Path]:
    return sorted(p for p in BENCH.glob("*.py") if p.name != Path(__file__).name and not p.name.startswith("_"))


def machine() -> str:
    """Cores, CPU model, memory, kernel and Python: what a reader needs to weigh the figures."""
    model = "unknown CPU"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        found = re.search(r"^model name\s*:\s*(.+)$", cpuinfo.read_text(), re.M)
        model = found.group(1).strip() if found else model
    memory = ""
    meminfo = Path("/proc/meminfo")
    if meminfo.exists():
        found = re.search(r"^MemTotal:\s*(\d+) kB", meminfo.read_text(), re.M)
        memory = f", {int(found.group(1)) / 1024**2:.0f} GiB memory" if found else ""
    return (
        f"{os.cpu_count()} cores ({model}){memory}, {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}"
    )


def commit() -> str:
    out = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True)
    return (out.stdout.strip() or "unknown") + (" (with local changes)" if dirty.stdout.strip() else "")


def run(script: Path) -> Run:
    """The script's output, printed as it comes and kept."""
    print(f"=== {script.relative_to(ROOT)} ===", flush=True)
    load = os.getloadavg()[0]
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, str(script)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        print(line, end="", flush=True)
        lines.append(line)
    code = proc.wait()
    took = time.monotonic() - started
    status = "ok" if code == 0 else f"FAILED (exit {code})"
    print(f"=== {script.name}: {status}, {took:.1f} s ===\n", flush=True)
    when = (
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, commit {commit()}, "
        f"load average {load:.2f} at the start and {os.getloadavg()[0]:.2f} at the end"
    )
    return Run(script, status, took, "".join(lines), when, machine())


def section(r: Run) -> str:
    output = r.output.rstrip("\n").replace("```", "'''")
    return (
        f"## `{r.script.relative_to(ROOT)}`\n\n{r.when}; {r.status}, {r.seconds:.0f} s.\n"
        f"Machine: {r.machine}.\n\n```\n{output}\n```\n"
    )


def kept_sections(text: str) -> dict[str, str]:
    """The sections of an earlier page, by script."""
    marks = list(SECTION.finditer(text))
    return {
        m.group(1): text[m.start() : (marks[i + 1].start() if i + 1 < len(marks) else len(text))].rstrip() + "\n"
        for i, m in enumerate(marks)
    }


def page(runs: list[Run], earlier: str) -> str:
    sections = kept_sections(earlier)
    for r in runs:
        sections[str(r.script.relative_to(ROOT))] = section(r)
    listed = [str(p.relative_to(ROOT)) for p in scripts()]
    body = [sections.get(name, f"## `{name}`\n\nNot run yet: `bench/run.py {Path(name).stem}`.\n") for name in listed]
    return HEAD + "".join("\n" + s for s in body)


def main(argv: list[str]) -> int:
    chosen = scripts()
    if argv:
        chosen = [p for p in chosen if p.stem in argv or p.name in argv]
        if not chosen:
            print(f"no benchmark named {' '.join(argv)}; have: {', '.join(p.stem for p in scripts())}", file=sys.stderr)
            return 2
    runs = [run(script) for script in chosen]
    PAGE.write_text(page(runs, PAGE.read_text() if PAGE.exists() else ""))
    print(f"wrote {PAGE.relative_to(ROOT)}")
    failed = [r.script.name for r in runs if r.status != "ok"]
    if failed:
        print(f"benchmark scripts that crashed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

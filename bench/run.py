"""Run every benchmark script in bench/ (each `*.py` but this one and `_*.py`), in name order, each in
its own interpreter from the repository root, and print their output. `make bench` runs this.

Benchmarks print figures, not verdicts; the exit status is non-zero only if a script crashes.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent


def scripts() -> list[Path]:
    return sorted(p for p in BENCH.glob("*.py") if p.name != Path(__file__).name and not p.name.startswith("_"))


def main(argv: list[str]) -> int:
    chosen = scripts()
    if argv:
        chosen = [p for p in chosen if p.stem in argv or p.name in argv]
        if not chosen:
            print(f"no benchmark named {' '.join(argv)}; have: {', '.join(p.stem for p in scripts())}", file=sys.stderr)
            return 2
    failed = []
    for script in chosen:
        print(f"=== {script.relative_to(ROOT)} ===", flush=True)
        started = time.monotonic()
        result = subprocess.run([sys.executable, str(script)], cwd=ROOT)
        took = time.monotonic() - started
        status = "ok" if result.returncode == 0 else f"FAILED (exit {result.returncode})"
        print(f"=== {script.name}: {status}, {took:.1f} s ===\n", flush=True)
        if result.returncode != 0:
            failed.append(script.name)
    if failed:
        print(f"benchmark scripts that crashed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Start-up of the command line: `migops --version` and `migops validate` of NVIDIA's default
config (examples/nvidia-default-config.yaml, 81 configs, against the catalogue), each as a whole process,
as a pre-commit hook or a PR check runs it. Targets: validate < 0.25 s, --version < 0.15 s.

Each command runs N times (default 11, `--runs N`); the median wall time is the figure, with the fastest
and slowest run and the median CPU time (user + system) beside it: on a shared machine the wall clock
also counts waiting for a core. The bare interpreter (`python -c pass`) is the floor. Two ways of
running:
- bytecode cached: what an installed migops does (pip compiles every module when it installs);
  PYTHONPYCACHEPREFIX points at a fresh directory, filled by one run before the timed ones;
- as this shell runs it: the environment as it is. With PYTHONDONTWRITEBYTECODE=1 (the image's
  default) a source checkout without __pycache__ compiles every migops module it
  imports on every run, which is why a command should import only what it uses.
Prints figures, never a verdict.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MIGOPS = Path(sys.executable).parent / "migops"  # the console script of this environment
DEFAULT = "examples/nvidia-default-config.yaml"
COMMANDS = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "migops --version": [str(MIGOPS), "--version"],
    "migops validate (NVIDIA default)": [str(MIGOPS), "validate", DEFAULT],
}
TARGETS = {"migops --version": 0.15, "migops validate (NVIDIA default)": 0.25}


def _once(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall, CPU) seconds of one run of the whole process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def measure(env: dict[str, str], runs: int) -> dict[str, tuple[float, float, float, float]]:
    """name -> (median wall, fastest, slowest, median CPU)."""
    out = {}
    for name, argv in COMMANDS.items():
        _once(argv, env)  # warm the page cache (and the bytecode cache, where one is written)
        walls, cpus = zip(*(_once(argv, env) for _ in range(runs)))
        out[name] = (statistics.median(walls), min(walls), max(walls), statistics.median(cpus))
    return out


def show(title: str, figures: dict[str, tuple[float, float, float, float]]) -> None:
    print(f"\n  {title}")
    print(f"  {'command':<34} {'median':>8} {'fastest':>8} {'slowest':>8} {'cpu':>7} {'target':>8}")
    for name, (median, fastest, slowest, cpu) in figures.items():
        target = f"< {TARGETS[name]:.2f}s" if name in TARGETS else ""
        print(f"  {name:<34} {median:>7.3f}s {fastest:>7.3f}s {slowest:>7.3f}s {cpu:>6.3f}s {target:>8}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=11, help="runs of each command (default 11)")
    args = parser.parse_args()
    print("migops start-up: whole processes, wall clock, median of", args.runs, "runs")
    print(f"(load average {os.getloadavg()[0]:.2f} at the start: figures from a busy machine are larger)")
    with tempfile.TemporaryDirectory(prefix="migops-pycache-") as prefix:
        cached = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        cached["PYTHONPYCACHEPREFIX"] = prefix
        show("bytecode cached (an installed migops)", measure(cached, args.runs))
    as_is = dict(os.environ)
    no_write = as_is.get("PYTHONDONTWRITEBYTECODE", "") != ""
    pycache = (ROOT / "migops" / "mig" / "__pycache__").is_dir()
    show(
        f"as this shell runs it (PYTHONDONTWRITEBYTECODE {'set' if no_write else 'unset'}, "
        f"{'a' if pycache else 'no'} __pycache__ in the source tree)",
        measure(as_is, args.runs),
    )
    print(f"\n(load average {os.getloadavg()[0]:.2f} at the end)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

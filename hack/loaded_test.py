"""`make test` on clean clones while a CPU-bound process runs beside it: the suite's reliability under load.

    python hack/loaded_test.py [--runs 3] [--hogs 1] [--keep-logs DIR]

Each run clones the repository's HEAD into a new temporary directory and runs `make test` there (the
README's command, as CI does), with `--hogs` busy-looping processes started first and kept running to
the end. A line per run says its exit status, its counts and its wall time; the exit status is 0 only
when every run passed. The clones, the hogs and (unless `--keep-logs`) the logs are removed at the end,
also when interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COUNTS = re.compile(r"^tests: (?P<counts>.+)$", re.MULTILINE)


@dataclass(frozen=True)
class LoadedRun:
    number: int
    returncode: int
    counts: str
    seconds: float

    def line(self) -> str:
        verdict = "passed" if self.returncode == 0 else f"FAILED (make exit {self.returncode})"
        return f"run {self.number}: {verdict:<24} {self.counts:<40} {self.seconds / 60:6.1f} min"


@contextmanager
def cpu_hogs(count: int) -> Iterator[list[subprocess.Popen[bytes]]]:
    """`count` processes that each keep one core busy, in process groups of their own."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True) for _ in range(count)]
    try:
        yield hogs
    finally:
        for hog in hogs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(hog.pid, signal.SIGKILL)
            hog.wait()


def stop_group(proc: subprocess.Popen[bytes], grace: float = 300.0) -> None:
    """SIGTERM to `make test`'s whole process group (hack/run_tests.py and the tiers' conftest stop their
    control planes and nodes on it), waited for until none is left, SIGKILL after `grace` seconds."""
    deadline = time.monotonic() + grace
    sig = signal.SIGTERM
    while True:
        proc.poll()  # reaps `make` once it exits: its zombie would keep the group in existence
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        if time.monotonic() > deadline:
            sig = signal.SIGKILL
        time.sleep(1)


def one_run(number: int, log_dir: Path) -> LoadedRun:
    """A fresh clone of HEAD and `make test` in it; the clone is removed afterwards."""
    clone = Path(tempfile.mkdtemp(prefix=f"migops-loaded-{number}-"))
    log = log_dir / f"run-{number}.log"
    started = time.monotonic()
    try:
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        with log.open("wb") as out:
            proc = subprocess.Popen(
                ["make", "test"], cwd=clone, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
            try:
                returncode = proc.wait()
            except BaseException:
                stop_group(proc)  # before the clone is removed: the tiers clean up from it
                raise
    finally:
        shutil.rmtree(clone, ignore_errors=True)
    found = COUNTS.findall(log.read_text(errors="replace"))
    return LoadedRun(number, returncode, found[-1] if found else "no counts printed", time.monotonic() - started)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="clean-clone `make test` runs in a row (default 3)")
    parser.add_argument("--hogs", type=int, default=1, help="CPU-bound processes beside them (default 1)")
    parser.add_argument("--keep-logs", type=Path, help="keep each run's output in this directory")
    args = parser.parse_args(argv)
    # Started in the background by a shell, SIGINT is ignored: both signals stop the runs the same way.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _interrupt)
    log_dir = args.keep_logs or Path(tempfile.mkdtemp(prefix="migops-loaded-logs-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    runs: list[LoadedRun] = []
    try:
        with cpu_hogs(args.hogs):
            print(f"{args.runs} x make test on a clean clone of HEAD, {args.hogs} CPU-bound process(es) beside")
            print(f"cores: {os.cpu_count()}", flush=True)
            for number in range(1, args.runs + 1):
                runs.append(one_run(number, log_dir))
                print(runs[-1].line(), flush=True)
                if runs[-1].returncode != 0:
                    print((log_dir / f"run-{number}.log").read_text(errors="replace")[-4000:], flush=True)
    finally:
        if args.keep_logs is None:
            shutil.rmtree(log_dir, ignore_errors=True)
    passed = sum(r.returncode == 0 for r in runs)
    print(f"{passed}/{args.runs} runs passed")
    return 0 if runs and passed == args.runs else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt as stopped:
        print(f"stopped ({stopped}): the run in progress was stopped and removed", file=sys.stderr)
        sys.exit(130)

"""`make test`: every build and every test, arranged so that the 2 cores are never idle waiting for either.

1. The control plane's binaries (etcd, kube-apiserver, kube-scheduler, kubectl) are built first: every
   cluster test needs them.
2. In the background, in order: the host packages, the real node's binaries, helm, Flux (and Argo CD
   where its script is in the tree), then the tiers that need them (`node`: the real node, the image,
   the chart; `gitops`: Flux and Argo CD) in one pytest session of their own.
3. Meanwhile, in the foreground, the `core` tier: every other test, which needs only the control plane.

Each build's time and one line per tier (tests, seconds) close the output, so a regression in either
shows in every CI log; the last line is the whole run's `N passed, N failed`. Exit status 0 only when
every build succeeded and every tier ran at least one test and passed (pytest's exit 5, no tests, fails).

    python hack/run_tests.py [PYTEST ARGS...]     extra arguments go to every tier's pytest
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HACK = ROOT / "hack"


@dataclass(frozen=True)
class Build:
    name: str
    argv: tuple[str, ...]


@dataclass(frozen=True)
class Tier:
    name: str
    paths: tuple[str, ...]  # test directories, relative to the root; () = every test not in another tier


@dataclass
class Outcome:
    """What a build or a tier did; written by the thread that ran it, read after it is joined."""

    name: str
    seconds: float = 0.0
    returncode: int | None = None
    counts: dict[str, int] = field(default_factory=dict)
    log: str = ""


CONTROL_PLANE = Build(
    "control plane (etcd, kube-apiserver, kube-scheduler, kubectl)", ("hack/k8s-binaries.sh", "control-plane")
)
BACKGROUND_BUILDS = (
    Build("host packages", ("hack/host-packages.sh",)),
    Build("real node (kubelet, kube-controller-manager, kube-proxy, containerd)", ("hack/k8s-binaries.sh", "all")),
    Build("helm", ("hack/helm-binary.sh",)),
    Build("flux", ("hack/flux-binaries.sh",)),
    Build("argo cd", ("hack/argocd-binaries.sh",)),
)
NODE = Tier("node", ("tests/e2e", "tests/deploy", "tests/helm"))
GITOPS = Tier("gitops", ("tests/flux", "tests/argocd"))
CORE = Tier("core", ())
RESULT = re.compile(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed|deselected)")


def present(paths: tuple[str, ...]) -> list[str]:
    return [p for p in paths if (ROOT / p).is_dir()]


def build(step: Build, stream: bool) -> Outcome:
    """Run a build script (instant when its cache is warm); its output goes to our stderr when `stream`,
    else it is kept for the report and shown only when the build fails."""
    out = Outcome(step.name)
    if not (ROOT / step.argv[0]).is_file():
        out.returncode, out.log = 0, "(no script in this tree)"
        return out
    start = time.monotonic()
    proc = subprocess.run(
        ["bash", *step.argv],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=None if stream else subprocess.PIPE,
        text=True,
        check=False,
    )
    out.seconds, out.returncode, out.log = time.monotonic() - start, proc.returncode, proc.stderr or ""
    return out


def pytest(tier: Tier, args: list[str], ignore: list[str], log: Path | None) -> Outcome:
    """One pytest session for a tier; its output streams to ours, or to `log` for a background tier."""
    out = Outcome(tier.name)
    argv = [
        sys.executable,
        "-m",
        "pytest",
        "--durations=15",
        *present(tier.paths),
        *(f"--ignore={p}" for p in ignore),
        *args,
    ]
    start = time.monotonic()
    if log is None:
        lines = []
        with subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, text=True, errors="replace") as proc:
            assert proc.stdout is not None
            for line in proc.stdout:
                sys.stdout.write(line)
                sys.stdout.flush()
                lines.append(line)
        text, code = "".join(lines), proc.returncode
    else:
        with log.open("w") as f:
            code = subprocess.run(argv, cwd=ROOT, check=False, stdout=f, stderr=subprocess.STDOUT).returncode
        text = log.read_text(errors="replace")
    out.seconds, out.returncode, out.log = time.monotonic() - start, code, text
    closing = [line for line in text.splitlines() if line.startswith("=") and " in " in line]
    for count, word in RESULT.findall(closing[-1] if closing else ""):
        out.counts["errors" if word.startswith("error") else word] = int(count)
    return out


def background(args: list[str], builds: list[Outcome], tiers: list[Outcome], log: Path) -> None:
    for step in BACKGROUND_BUILDS:
        builds.append(done := build(step, stream=False))
        if done.returncode != 0:
            return
    paths = present(NODE.paths + GITOPS.paths)
    if paths:
        tiers.append(pytest(Tier("node+gitops", tuple(paths)), args, [], log))


def main(args: list[str]) -> int:
    os.chdir(ROOT)
    builds: list[Outcome] = []
    tiers: list[Outcome] = []
    first = build(CONTROL_PLANE, stream=True)
    builds.append(first)
    if first.returncode != 0:
        print(f"make test: the control plane's binaries did not build (exit {first.returncode})", file=sys.stderr)
        return 1
    log = ROOT / ".pytest_cache" / "background-tiers.log"
    log.parent.mkdir(exist_ok=True)
    behind: list[Outcome] = []
    worker = threading.Thread(target=background, args=(args, behind, tiers, log), daemon=True)
    worker.start()
    tiers.insert(0, pytest(CORE, args, present(NODE.paths + GITOPS.paths), None))
    worker.join()
    builds.extend(behind)
    if log.exists() and tiers[-1].name != CORE.name:
        print(f"\n---- the node and gitops tiers (run in the background, {log.relative_to(ROOT)}) ----")
        print(tiers[-1].log, end="")
    return report(builds, tiers)


def report(builds: list[Outcome], tiers: list[Outcome]) -> int:
    print("\n==== make test: builds ====")
    for b in builds:
        state = "ok" if b.returncode == 0 else f"FAILED (exit {b.returncode})"
        print(f"  {b.name:<72} {b.seconds:7.1f} s  {state}")
        if b.returncode != 0 and b.log:
            print(b.log[-4000:])
    print("==== make test: tiers ====")
    ok = all(b.returncode == 0 for b in builds)
    passed = failed = 0
    for t in tiers:
        failures = t.counts.get("failed", 0) + t.counts.get("errors", 0)
        passed, failed = passed + t.counts.get("passed", 0), failed + failures
        words = ", ".join(f"{n} {w}" for w, n in sorted(t.counts.items())) or "no tests"
        print(f"  {t.name:<12} {words:<48} {t.seconds:7.1f} s  (pytest exit {t.returncode})")
        ok = ok and t.returncode == 0
    if len(tiers) < 2:
        ok = False
        print("  the node and gitops tiers did not run: a background build failed (above)")
    print(f"tests: {passed} passed, {failed} failed")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

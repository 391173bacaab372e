"""`make test`: every build and every test, arranged so that the 2 cores are never idle waiting for either.

Most of the suite's time is waiting (API servers, watches, pods starting, controllers syncing), so it runs
as seven pytest processes side by side, each with its own control plane (free loopback ports, its own
temporary directories and MIGOPS_HOMEs; tests/conftest.py). Four tiers kept the 2 cores about two thirds
busy and the longest tier set the pace; seven keep them busy to the end:

  agent            agent, packaging, certs, logs                  needs the control plane only
  reconciler+mig   reconciler, mig                                needs the control plane only
  cluster+webhook  cluster, webhook, kube                         needs the control plane only
  rest             every other directory (cli, dra, demo,         needs the control plane only
                   suggest, gitops, local, ...)
  real-node        e2e, helm (the machine's one real node)        host packages, the real node, helm
  deploy+flux      deploy (the manifests, the image), flux,       host packages, Flux
                   verdicts
  argocd           argocd                                         host packages, Argo CD

Only e2e and helm use the real node; Flux, Argo CD and deploy start control planes of their own. The
tiers are balanced by the seconds each directory took (the per-directory lines each tier's pytest prints
at its end), about 350 s a tier with seven side by side; Argo CD's build comes last, so its tier holds
only tests/argocd (on a cold machine the run ends with it).

1. The control plane's binaries (etcd, kube-apiserver, kube-scheduler, kubectl) are built first: every
   tier needs them. The four tiers that need nothing else then start.
2. Meanwhile, in one background thread and in order: the host packages, the real node's binaries, helm,
   Flux (then real-node and deploy+flux start) and Argo CD (then argocd starts). On a warm machine every build
   is instant and every tier starts at once.

Each tier's output goes to .pytest_cache/tier-<name>.log and is printed whole when the tier ends (no
interleaving). Each build's time and one line per tier (tests, seconds, CPU seconds: the tier's share
of the 2 cores, so a slow run shows whether it waited or computed) close the output, so a regression
in either shows in every CI log; the last line is the whole run's `tests: N passed, N failed`. Exit status
0 only when every build succeeded and every tier ran at least one test and passed (pytest's exit 5, no
tests, fails).

    python hack/run_tests.py [PYTEST ARGS...]     extra arguments go to every tier's pytest
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOGS = ROOT / ".pytest_cache"


@dataclass(frozen=True)
class Build:
    name: str
    argv: tuple[str, ...]


@dataclass(frozen=True)
class Tier:
    name: str
    paths: tuple[str, ...]  # test directories, relative to the root; () = every test not in another tier
    needs: tuple[Build, ...] = ()  # background builds that must succeed before it starts


@dataclass
class Outcome:
    """What a build or a tier did; written by the thread that ran it, read after it is joined."""

    name: str
    seconds: float = 0.0
    returncode: int | None = None  # None: never ran
    cpu: float = 0.0  # CPU seconds (user + system) of a tier's pytest and the processes it reaped
    counts: dict[str, int] = field(default_factory=dict)
    log: str = ""


CONTROL_PLANE = Build(
    "control plane (etcd, kube-apiserver, kube-scheduler, kubectl)", ("hack/k8s-binaries.sh", "control-plane")
)
HOST = Build("host packages", ("hack/host-packages.sh",))
REAL_NODE = Build(
    "real node (kubelet, kube-controller-manager, kube-proxy, containerd)", ("hack/k8s-binaries.sh", "all")
)
HELM = Build("helm", ("hack/helm-binary.sh",))
FLUX = Build("flux", ("hack/flux-binaries.sh",))
ARGOCD = Build("argo cd", ("hack/argocd-binaries.sh",))
BACKGROUND_BUILDS = (HOST, REAL_NODE, HELM, FLUX, ARGOCD)  # in this order, one at a time (2 cores)

# Balanced by the seconds each directory took (warm clean clone, seven tiers at once, 2026-12-02): e2e 330
# + helm 122; deploy 456 (232 of them building the image's install tree, now ~20 with the lock's layer
# cached) + flux 100 + verdicts 94; argocd 254; agent 347 + packaging 112 + certs 9 + logs 8; reconciler
# 252 + mig 238; cluster 220 + webhook 224 + kube 45; the rest (cli 224, demo 84, dra 73, gitops 12, ...).
AGENT = Tier("agent", ("tests/agent", "tests/packaging", "tests/certs", "tests/logs"))
RECONCILER = Tier("reconciler+mig", ("tests/reconciler", "tests/mig"))
CLUSTER = Tier("cluster+webhook", ("tests/cluster", "tests/webhook", "tests/kube"))
NODE = Tier("real-node", ("tests/e2e", "tests/helm"), (HOST, REAL_NODE, HELM))
DEPLOY = Tier("deploy+flux", ("tests/deploy", "tests/flux", "tests/verdicts"), (HOST, FLUX))
ARGO = Tier("argocd", ("tests/argocd",), (HOST, ARGOCD))
REST = Tier("rest", ())  # every other directory: a new test directory lands here without editing this file
TIERS = (AGENT, RECONCILER, CLUSTER, REST, NODE, DEPLOY, ARGO)
FINAL = re.compile(r" in [0-9.]+s\b")
RESULT = re.compile(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed|deselected)")


# The tiers' pytest processes now running. CI cancelling the job (SIGTERM, SIGHUP) reaches this process:
# each tier gets SIGTERM (tests/conftest.py then stops its control plane and real node) and no tier or
# build starts after it.
RUNNING: dict[int, subprocess.Popen[bytes]] = {}
_RUNNING_LOCK = threading.Lock()  # never taken by the main thread, where the signal handler runs
STOPPING = threading.Event()


def _stop(signum: int, frame: object) -> None:
    STOPPING.set()
    for proc in list(RUNNING.values()):
        proc.send_signal(signal.SIGTERM)


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


def argv_of(tier: Tier, args: list[str]) -> list[str]:
    """The tier's pytest command line: its directories, or (rest) the testpaths minus every other tier's."""
    if tier.paths:
        selection = present(tier.paths)
    else:
        selection = [f"--ignore={p}" for t in TIERS if t.paths for p in present(t.paths)]
    return [sys.executable, "-m", "pytest", "--durations=15", *selection, *args]


def pytest(tier: Tier, args: list[str], log: Path) -> Outcome:
    """One pytest session for a tier, its output in `log`."""
    out = Outcome(tier.name)
    start = time.monotonic()
    with log.open("w") as f:
        with _RUNNING_LOCK:
            if STOPPING.is_set():
                out.log = "not run: make test was stopped"
                return out
            proc = subprocess.Popen(
                argv_of(tier, args), cwd=ROOT, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
            RUNNING[proc.pid] = proc
        # wait4, not wait: the CPU time of pytest and of every process it reaped (the control planes,
        # agents, controllers it started), so the summary shows whether the cores or the waits set the pace.
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = code = os.waitstatus_to_exitcode(status)
        with _RUNNING_LOCK:
            RUNNING.pop(proc.pid, None)
    text = log.read_text(errors="replace")
    out.seconds, out.returncode, out.log = time.monotonic() - start, code, text
    out.cpu = usage.ru_utime + usage.ru_stime
    # pytest's last line, "== 3 passed, 1 failed in 9.81s ==" (without the rules under -q)
    closing = [line for line in text.splitlines() if FINAL.search(line) and RESULT.search(line)]
    for count, word in RESULT.findall(closing[-1] if closing else ""):
        out.counts["errors" if word.startswith("error") else word] = int(count)
    return out


class Run:
    """The background builds and the tiers' threads; each tier waits for the builds it needs."""

    def __init__(self, args: list[str]) -> None:
        self.args = args
        self.lock = threading.Lock()
        self.builds: list[Outcome] = []
        self.tiers: dict[str, Outcome] = {}
        self.built: dict[str, threading.Event] = {b.name: threading.Event() for b in BACKGROUND_BUILDS}
        self.failed_builds: set[str] = set()

    def background_builds(self) -> None:
        for step in BACKGROUND_BUILDS:
            done = build(step, stream=False) if not STOPPING.is_set() else Outcome(step.name, log="stopped")
            with self.lock:
                self.builds.append(done)
                if done.returncode != 0:
                    self.failed_builds.add(step.name)
            self.built[step.name].set()
            if done.returncode != 0:
                # Later builds may need this one (Argo CD needs redis from the host packages): stop here;
                # every tier that needs one of them is reported as not run.
                for rest in BACKGROUND_BUILDS[BACKGROUND_BUILDS.index(step) + 1 :]:
                    with self.lock:
                        self.failed_builds.add(rest.name)
                    self.built[rest.name].set()
                return

    def tier(self, tier: Tier) -> None:
        for step in tier.needs:
            self.built[step.name].wait()
        with self.lock:
            missing = [b.name for b in tier.needs if b.name in self.failed_builds]
        if missing:
            out = Outcome(tier.name, log=f"not run: the build of {', '.join(missing)} failed or did not run")
        else:
            out = pytest(tier, self.args, LOGS / f"tier-{tier.name}.log")
        with self.lock:
            self.tiers[tier.name] = out
            print(
                f"\n---- tier {tier.name}: {summary(out)} ({out.seconds:.0f} s, {out.cpu:.0f} cpu-s; "
                f".pytest_cache/tier-{tier.name}.log) ----"
            )
            print(out.log, end="" if out.log.endswith("\n") else "\n", flush=True)


def summary(t: Outcome) -> str:
    if t.returncode is None:
        return "not run"
    return ", ".join(f"{n} {w}" for w, n in sorted(t.counts.items())) or "no tests"


def main(args: list[str]) -> int:
    os.chdir(ROOT)
    first = build(CONTROL_PLANE, stream=True)
    if first.returncode != 0:
        print(f"make test: the control plane's binaries did not build (exit {first.returncode})", file=sys.stderr)
        return 1
    LOGS.mkdir(exist_ok=True)
    run = Run(args)
    print(
        f"make test: tiers {', '.join(t.name for t in TIERS)} in parallel; each prints its log when it ends", flush=True
    )
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _stop)
    threads = [threading.Thread(target=run.background_builds, daemon=True)]
    threads += [threading.Thread(target=run.tier, args=(t,), daemon=True) for t in TIERS]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return report([first, *run.builds], [run.tiers[t.name] for t in TIERS])


def report(builds: list[Outcome], tiers: list[Outcome]) -> int:
    print("\n==== make test: builds ====")
    for b in builds:
        state = "ok" if b.returncode == 0 else f"FAILED (exit {b.returncode})"
        print(f"  {b.name:<72} {b.seconds:7.1f} s  {state}")
        if b.returncode != 0 and b.log:
            print(b.log[-4000:])
    print("==== make test: tiers ====")
    ok = len(builds) == 1 + len(BACKGROUND_BUILDS) and all(b.returncode == 0 for b in builds)
    passed = failed = 0
    for t in tiers:
        failures = t.counts.get("failed", 0) + t.counts.get("errors", 0)
        passed, failed = passed + t.counts.get("passed", 0), failed + failures
        code = "a build it needs failed (above)" if t.returncode is None else f"pytest exit {t.returncode}"
        print(f"  {t.name:<16} {summary(t):<46} {t.seconds:7.1f} s  {t.cpu:7.1f} cpu-s  ({code})")
        ok = ok and t.returncode == 0
    print(f"tests: {passed} passed, {failed} failed")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""`make demo` runs start to finish: the README's first command stays true.

Runs the demo as `make demo` does (its own MIGOPS_HOME, so it never meets a cluster a developer left
up) and checks that every step said what it shows, and that nothing is left running afterwards.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from migops.local.process import find_by_argument

ROOT = Path(__file__).resolve().parents[2]


def _printed(out: str, heading: str, end: str | None) -> list[str]:
    lines = out[out.index(heading) + len(heading) :].splitlines()[1:]
    block = lines[: lines.index(end)] if end else lines
    return [line.strip() for line in block if line.startswith("  ")]


# Slow on purpose (30-90 s in make test): the README's `make demo` as a user runs it, every step, then
# the printed explore commands; a shorter demo would not be the one the README promises.
def test_demo_runs_every_step_and_leaves_nothing_running(tmp_path: Path) -> None:
    """Run as `KEEP=1 make demo`: then every command it prints is run as printed, in a new shell that has
    nothing of this one (no virtualenv on PATH, no KUBECONFIG), the last one (`migops local down`) too."""
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if k not in ("KEEP", "KUBECONFIG")}
    try:
        done = subprocess.run(
            [sys.executable, "-m", "migops.local.demo"],
            cwd=ROOT,
            env={**env, "MIGOPS_HOME": str(home), "KEEP": "1"},
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        out = done.stdout
        assert done.returncode == 0, out[-6000:] + done.stderr[-3000:]
        explore = _printed(out, "Left running (KEEP=1). Explore:", "Stop everything:")
        stop = _printed(out, "Stop everything:", None)
        assert explore[0].startswith('eval "$(') and stop == ["migops local down"], out[-3000:]
        shell = subprocess.run(
            ["bash", "--noprofile", "--norc", "-c", "set -e\n" + "\n".join(explore + stop)],
            env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert shell.returncode == 0, shell.stdout[-3000:] + shell.stderr[-3000:]
        assert "gpu-node-3" in shell.stdout and "nodes in sync" in shell.stdout, shell.stdout[-3000:]
    finally:
        subprocess.run(
            [sys.executable, "-m", "migops", "local", "down"],
            env={**env, "MIGOPS_HOME": str(home)},
            capture_output=True,
            timeout=300,
            check=False,
        )
        for line in out.splitlines() if "out" in locals() else ():
            if line.strip().startswith("git -C "):  # the demo's config repo, left for KEEP=1
                shutil.rmtree(Path(shlex.split(line.strip())[2]).parent, ignore_errors=True)
    for expected in (
        "Step 1: first sync from git",
        "initial sync: every node success",
        "[placement-infeasible]",
        "not applied: the cluster keeps",
        'admission webhook "configmaps.validate.migops.io" denied the request',
        "[unknown-profile]",
        'admission webhook "nodes.validate.migops.io" denied the request',
        "[config-not-found]",
        "at most 1 node reconfiguring at a time",
        "migops.io/mig.drift: GPU 0: missing 3g.40gb",
        "Event Normal MigDriftRepaired",
        "the GPUs are what git says again",
        "Insufficient nvidia.com/mig-3g.40gb",
        "the Pods are bound, not executed",
        "gpu-node-3  2 x A100-SXM4-40GB  a100-training   success",
        "every step behaved as described",
    ):
        assert expected in out, f"{expected!r} missing from the demo's output:\n{out[-6000:]}"
    assert not (home / "local").exists()
    assert not find_by_argument(f"--data-dir={home / 'local' / 'etcd'}")

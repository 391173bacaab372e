"""`make demo` runs start to finish: the README's first command stays true.

Runs the demo as `make demo` does (its own MIGOPS_HOME, so it never meets a cluster a developer left
up) and checks that every step said what it shows, and that nothing is left running afterwards.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from migops.local.process import find_by_argument

ROOT = Path(__file__).resolve().parents[2]


def test_demo_runs_every_step_and_leaves_nothing_running(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if k not in ("KEEP", "KUBECONFIG")}
    done = subprocess.run([sys.executable, "-m", "migops.demo"], cwd=ROOT, env={**env, "MIGOPS_HOME": str(home)},
                          capture_output=True, text=True, timeout=600, check=False)
    out = done.stdout
    assert done.returncode == 0, out[-6000:] + done.stderr[-3000:]
    for expected in (
        "Step 1: first sync from git", "initial sync: every node success",
        "[placement-infeasible]", "not applied: the cluster keeps",
        'admission webhook "configmaps.validate.migops.io" denied the request', "[unknown-profile]",
        'admission webhook "nodes.validate.migops.io" denied the request', "[config-not-found]",
        "at most 1 node reconfiguring at a time",
        "migops.io/mig.drift: GPU 0: missing 3g.40gb", "Event Normal MigDriftRepaired",
        "the GPUs are what git says again",
        "Insufficient nvidia.com/mig-3g.40gb", "the Pods are bound, not executed",
        "gpu-node-3  2 x A100-SXM4-40GB  a100-training   success",
        "every step behaved as described",
    ):
        assert expected in out, f"{expected!r} missing from the demo's output:\n{out[-6000:]}"
    assert not (home / "local").exists()
    assert not find_by_argument(f"--data-dir={home / 'local' / 'etcd'}")

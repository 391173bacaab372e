"""`migops local up` starts the webhook and registers it; `down` stops it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml
from local_cli import down_on_exit

from migops.local.binaries import locate
from migops.local.process import find_by_argument
from migops.local.webhook import identifying_arguments

MIGOPS = Path(sys.executable).parent / "migops"
BAD = {
    "apiVersion": "v1",
    "kind": "ConfigMap",
    "metadata": {"name": "custom", "namespace": "default", "labels": {"migops.io/mig-config": "true"}},
    "data": {
        "config.yaml": "version: v1\nmig-configs:\n  a: [{devices: all, mig-enabled: true, mig-devices: {1g.9gb: 1}}]\n"
    },
}


def test_local_up_registers_the_webhook_and_down_stops_it(tmp_path: Path) -> None:
    env = {**os.environ, "MIGOPS_HOME": str(tmp_path)}

    def migops(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(MIGOPS), "local", *args], env=env, capture_output=True, text=True, timeout=240)

    with down_on_exit(tmp_path):
        try:
            up = migops("up")
            assert up.returncode == 0, up.stderr
            assert "webhook:    https://127.0.0.1:" in up.stdout
            kubeconfig = tmp_path / "local" / "admin.kubeconfig"
            out = subprocess.run(
                [str(locate().kubectl), "apply", "--dry-run=server", "-f", "-"],
                input=yaml.safe_dump(BAD),
                env={**env, "KUBECONFIG": str(kubeconfig)},
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert out.returncode == 1 and "[unknown-profile]" in out.stderr, out.stderr
            assert find_by_argument(identifying_arguments(tmp_path / "local")[0])
        finally:
            down = migops("down")
    assert down.returncode == 0, down.stderr
    assert not find_by_argument(identifying_arguments(tmp_path / "local")[0])

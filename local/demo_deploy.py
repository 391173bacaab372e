"""`make demo-deploy`: migops as a user deploys it, every part in pods on a real node (root).

1. `migops local up --real-node` with examples/config-repo (committed to a throwaway git repository);
2. `migops local image`: the product image from the repository's Dockerfile (a Debian base, no
   registry; minutes the first time, seconds once cached), loaded into migops-node's containerd;
3. `migops local deploy`: manifests/overlays/local, until every workload is Available;
4. the in-cluster reconciler gives migops-node its config, the agent pod applies it to the node's
   simulated GPUs, and a verification Pod asking for a MIG device runs there for real and logs;
5. `migops local down`. KEEP=1 leaves it running.

Not part of `make demo` (which stays under 3 minutes on a fresh clone): the first image build alone
takes longer, and the real node needs root. Exit status 0 when every step behaved, 1 otherwise.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from migops.api.names import MIG_CONFIG_LABEL, MIG_CONFIG_STATE_LABEL, MIG_RESOURCE_PREFIX, STATE_SUCCESS
from migops.local.binaries import locate
from migops.local.deploy import ROOT
from migops.mig.gfd import resource_name

NODE = "migops-node"
RESOURCE = resource_name("1g.10gb")


def _say(text: str) -> None:
    print(f"\n== {text}", flush=True)


def _run(*argv: str, env: dict[str, str], capture: bool = False) -> str:
    proc = subprocess.run(list(argv), env=env, text=True, check=False, stdout=subprocess.PIPE if capture else None)
    if proc.returncode != 0:
        raise SystemExit(f"demo-deploy: {' '.join(argv)} failed (exit {proc.returncode})")
    return proc.stdout or ""


def _until(check, timeout: float, what: str):  # noqa: ANN001, ANN202
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(1)
    raise SystemExit(f"demo-deploy: {what} not within {timeout:.0f}s")


def main() -> int:
    home = Path(tempfile.mkdtemp(prefix="migops-demo-deploy-"))
    env = {**os.environ, "MIGOPS_HOME": str(home / "home")}
    migops = [sys.executable, "-m", "migops"]
    repo = home / "config-repo"
    shutil.copytree(ROOT / "examples" / "config-repo", repo)
    git = ["git", "-C", str(repo), "-c", "user.name=demo", "-c", "user.email=demo@example.com"]
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "demo config"], check=True)
    began = time.monotonic()
    try:
        _say("migops local up --real-node (one simulated GPU node, and migops-node that runs pods)")
        _run(
            *migops,
            "local",
            "up",
            "--real-node",
            "--nodes",
            "1",
            "--gpus-per-node",
            "2",
            "--strategy",
            "mixed",
            "--repo",
            str(repo),
            env=env,
        )
        kubeconfig = str(home / "home" / "local" / "admin.kubeconfig")
        kubectl = [str(locate().kubectl), f"--kubeconfig={kubeconfig}"]
        _say("migops local image (the Dockerfile, on a Debian base; no registry)")
        _run(*migops, "local", "image", env=env)
        _say("migops local deploy (manifests/overlays/local)")
        _run(*migops, "local", "deploy", env=env)
        _run(*kubectl, "-n", "migops-system", "get", "pods", "-o", "wide", env=env)

        _say(f"the in-cluster reconciler and the agent pod give {NODE} its config (examples/config-repo)")

        def applied() -> dict | None:
            node = json.loads(_run(*kubectl, "get", "node", NODE, "-o", "json", env=env, capture=True))
            labels = node["metadata"]["labels"]
            ok = (
                labels.get(MIG_CONFIG_STATE_LABEL) == STATE_SUCCESS
                and int(node["status"].get("allocatable", {}).get(RESOURCE, "0")) > 0
            )
            return node if ok else None

        node = _until(applied, 180, f"{NODE}: a MIG config applied with {RESOURCE} allocatable")
        mig = {k: v for k, v in node["status"]["allocatable"].items() if k.startswith(MIG_RESOURCE_PREFIX)}
        print(f"{NODE}: {MIG_CONFIG_LABEL}={node['metadata']['labels'][MIG_CONFIG_LABEL]}, allocatable {mig}")

        _say(f"a verification Pod asking for one {RESOURCE}, running for real on {NODE}")
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "mig-verify", "namespace": "default"},
            # The simulated node offers MIG devices too, but runs nothing: pinned to the real one.
            "spec": {
                "restartPolicy": "Never",
                "nodeSelector": {"kubernetes.io/hostname": NODE},
                "securityContext": {"runAsNonRoot": True, "runAsUser": 65532},
                "containers": [
                    {
                        "name": "verify",
                        "image": "migops:0.1.0",
                        "imagePullPolicy": "Never",
                        "command": [
                            "python",
                            "-c",
                            "import socket; print('MIG workload running on', socket.gethostname())",
                        ],
                        "resources": {"limits": {RESOURCE: "1"}},
                        "securityContext": {"readOnlyRootFilesystem": True, "allowPrivilegeEscalation": False},
                    }
                ],
            },
        }
        subprocess.run([*kubectl, "apply", "-f", "-"], input=json.dumps(pod), text=True, env=env, check=True)
        _until(
            lambda: (
                _run(*kubectl, "get", "pod", "mig-verify", "-o", "jsonpath={.status.phase}", env=env, capture=True)
                == "Succeeded"
            ),
            120,
            "the verification pod Succeeded",
        )
        _run(*kubectl, "get", "pod", "mig-verify", "-o", "wide", env=env)
        _run(*kubectl, "logs", "mig-verify", env=env)
        print(f"\ndemo-deploy: every step behaved ({time.monotonic() - began:.0f}s)")
        return 0
    finally:
        if os.environ.get("KEEP") == "1":
            print(
                f'\nleft running: MIGOPS_HOME={home / "home"} ... ; eval "$(MIGOPS_HOME={home / "home"} migops local env)"'
            )
        else:
            subprocess.run([*migops, "local", "down"], env=env, check=False)
            shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

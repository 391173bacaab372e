"""`migops local up --repo URL`: the GitOps reconciler next to the local control plane.

It runs as its own detached process (`migops reconcile`, one replica, no Lease), with the MigSync CRD
installed and a MigSync `migops` in `migops-system` recording what it follows, so `migops status` and
`kubectl get migsync -A` work as in a real cluster. Its log is `<workdir>/logs/reconciler.log`;
migops.local.stack records it with the servers, so `down` stops it before them.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import secrets
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from migops.local.ports import free_ports
from migops.local.process import ProcessRef, spawn
from migops.local.process import stop as stop_process

NAMESPACE = "migops-system"
# Its own identity (a client certificate, in system:masters like the rest of the local stack), not the
# admin's: the webhook lets only the reconciler change a managed node's nvidia.com/mig.config, and a
# person's kubectl in `migops local` is the admin.
LOCAL_RECONCILER_USER = "migops-reconciler"


def add_arguments(up: argparse.ArgumentParser) -> None:
    up.add_argument(
        "--repo",
        metavar="URL",
        help="also run the GitOps reconciler on this config repo "
        "(config.yaml + nodes.yaml; a path, file://, https:// or ssh:// URL)",
    )
    up.add_argument("--ref", metavar="REF", help="with --repo: branch, tag or commit (default: the remote's HEAD)")
    up.add_argument("--path", default="", metavar="P", help="with --repo: directory of config.yaml and nodes.yaml")


def identifying_arguments(workdir: Path) -> tuple[str]:
    """The one argument that identifies this workdir's reconciler among all processes."""
    return (f"--cache-dir={workdir / 'reconciler-git'}",)


@dataclass(frozen=True)
class LocalReconciler:
    popen: subprocess.Popen[bytes]
    ref: ProcessRef
    url: str  # http://127.0.0.1:PORT: /healthz, /readyz, /metrics, POST /hook
    hook_secret: Path  # the HMAC secret a push webhook signs with (`notify` uses it)


def hook_secret_file(workdir: Path) -> Path:
    return workdir / "reconciler-hook.secret"


def start(
    api: object,
    workdir: Path,
    kubeconfig: Path,
    repo: str,
    ref: str | None = None,
    path: str = "",
    interval: str = "10s",
    timeout: float = 60.0,
) -> LocalReconciler:
    """Install the CRD and namespace, start the reconciler, wait until it serves /readyz; the caller
    records the process (migops.local.stack). It polls every `interval` (a local repo is cheap to
    fetch) and syncs at once on a signed POST /hook, as a git host's push webhook would send it."""
    from kubernetes import client as k8s

    from migops.kube.names import LOCAL_MANAGER
    from migops.reconciler.status import install_crd

    k8s.CoreV1Api(api).patch_namespace(
        NAMESPACE,
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        field_manager=LOCAL_MANAGER,
        _content_type="application/apply-patch+yaml",
    )
    install_crd(api, field_manager=LOCAL_MANAGER)
    if "://" not in repo and Path(repo).exists():
        repo = str(Path(repo).resolve())
    (port,) = free_ports(1)
    secret = hook_secret_file(workdir)
    secret.write_text(secrets.token_hex(32))
    secret.chmod(0o600)
    argv = [
        str(Path(sys.executable).parent / "migops"),
        "reconcile",
        "--repo",
        repo,
        "--path",
        path,
        "--kubeconfig",
        str(kubeconfig),
        "--namespace",
        NAMESPACE,
        "--no-leader-elect",
        "--http-address",
        f"127.0.0.1:{port}",
        "--interval",
        interval,
        "--hook-secret-file",
        str(secret),
        *identifying_arguments(workdir),
        "--log-level=info",
    ]
    if ref:
        argv += ["--ref", ref]
    log = workdir / "logs" / "reconciler.log"
    import urllib.request  # here, not with the module: `migops validate` registers this module's arguments

    popen, ref_ = spawn(argv, log)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if popen.poll() is not None:
            raise RuntimeError(f"the reconciler exited ({popen.returncode}); see {log}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as resp:
                if resp.status == 200:
                    return LocalReconciler(popen, ref_, f"http://127.0.0.1:{port}", secret)
        except OSError:
            pass
        time.sleep(0.2)
    stop_process(ref_, popen=popen)
    raise RuntimeError(f"the reconciler did not become ready in {timeout:.0f}s; see {log}")


def notify(url: str, secret_file: Path, revision: str = "") -> int:
    """POST a push event to the reconciler's /hook, signed as GitHub signs it (X-Hub-Signature-256):
    what a git host does after a push, so the commit is synced at once. The HTTP status."""
    import urllib.request

    body = json.dumps({"ref": "refs/heads/main", "after": revision}).encode()
    signature = hmac.new(secret_file.read_bytes().strip(), body, hashlib.sha256).hexdigest()
    request = urllib.request.Request(
        f"{url}/hook",
        data=body,
        method="POST",
        headers={
            "Content-Type": "application/json",
            "X-GitHub-Event": "push",
            "X-Hub-Signature-256": f"sha256={signature}",
        },
    )
    with urllib.request.urlopen(request, timeout=10) as resp:
        return resp.status

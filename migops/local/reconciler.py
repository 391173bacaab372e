"""`migops local up --repo URL`: the GitOps reconciler next to the local control plane.

It runs as its own detached process (`migops reconcile`, one replica, no Lease), with the MigSync CRD
installed and a MigSync `migops` in `migops-system` recording what it follows, so `migops status` and
`kubectl get migsync -A` work as in a real cluster. Its log is `<workdir>/logs/reconciler.log`;
migops.local.stack records it with the servers, so `down` stops it before them.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from migops.local.ports import free_ports
from migops.local.process import ProcessRef, spawn, stop as stop_process

NAMESPACE = "migops-system"


def add_arguments(up: argparse.ArgumentParser) -> None:
    up.add_argument("--repo", metavar="URL", help="also run the GitOps reconciler on this config repo "
                    "(config.yaml + nodes.yaml; a path, file://, https:// or ssh:// URL)")
    up.add_argument("--ref", metavar="REF", help="with --repo: branch, tag or commit (default: the remote's HEAD)")
    up.add_argument("--path", default="", metavar="P", help="with --repo: directory of config.yaml and nodes.yaml")


def identifying_arguments(workdir: Path) -> tuple[str]:
    """The one argument that identifies this workdir's reconciler among all processes."""
    return (f"--cache-dir={workdir / 'reconciler-git'}",)


def start(api: object, workdir: Path, kubeconfig: Path, repo: str, ref: str | None = None, path: str = "",
          timeout: float = 60.0) -> tuple[subprocess.Popen[bytes], ProcessRef]:
    """Install the CRD and namespace, start the reconciler, wait until it serves /readyz; the caller
    records the process (migops.local.stack)."""
    from kubernetes import client as k8s

    from migops.kube.names import LOCAL_MANAGER
    from migops.reconciler.status import install_crd

    k8s.CoreV1Api(api).patch_namespace(NAMESPACE, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
                                       field_manager=LOCAL_MANAGER, _content_type="application/apply-patch+yaml")
    install_crd(api, field_manager=LOCAL_MANAGER)  # type: ignore[arg-type]
    if "://" not in repo and Path(repo).exists():
        repo = str(Path(repo).resolve())
    (port,) = free_ports(1)
    argv = [str(Path(sys.executable).parent / "migops"), "reconcile", "--repo", repo, "--path", path,
            "--kubeconfig", str(kubeconfig), "--namespace", NAMESPACE, "--no-leader-elect",
            "--http-address", f"127.0.0.1:{port}", *identifying_arguments(workdir), "-v"]
    if ref:
        argv += ["--ref", ref]
    log = workdir / "logs" / "reconciler.log"
    popen, ref_ = spawn(argv, log)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if popen.poll() is not None:
            raise RuntimeError(f"the reconciler exited ({popen.returncode}); see {log}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as resp:
                if resp.status == 200:
                    return popen, ref_
        except OSError:
            pass
        time.sleep(0.2)
    stop_process(ref_, popen=popen)
    raise RuntimeError(f"the reconciler did not become ready in {timeout:.0f}s; see {log}")

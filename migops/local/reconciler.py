"""`migops local up --repo URL`: the GitOps reconciler next to the local control plane.

It runs as its own detached process (`migops reconcile`, one replica, no Lease), with the MigSync CRD
installed and a MigSync `migops` in `migops-system` recording what it follows, so `migops status` and
`kubectl get migsync -A` work as in a real cluster. Its log is `<workdir>/logs/reconciler.log`; `down`
stops it (found by the state file, else by its command line) before the servers.
"""
from __future__ import annotations

import argparse
import json
import socket
import sys
import time
import urllib.request
from pathlib import Path

from migops.local.process import ProcessRef, find_by_argument, is_alive, spawn, stop as stop_process

STATE_FILE = "reconciler.json"
NAMESPACE = "migops-system"


def add_arguments(up: argparse.ArgumentParser) -> None:
    up.add_argument("--repo", metavar="URL", help="also run the GitOps reconciler on this config repo "
                    "(config.yaml + nodes.yaml; a path, file://, https:// or ssh:// URL)")
    up.add_argument("--ref", metavar="REF", help="with --repo: branch, tag or commit (default: the remote's HEAD)")
    up.add_argument("--path", default="", metavar="P", help="with --repo: directory of config.yaml and nodes.yaml")


def _marker(workdir: Path) -> str:
    """The one argument that identifies this workdir's reconciler among all processes."""
    return f"--cache-dir={workdir / 'reconciler-git'}"


def start(api: object, workdir: Path, kubeconfig: Path, repo: str, ref: str | None = None, path: str = "",
          timeout: float = 60.0) -> ProcessRef:
    """Install the CRD and namespace, start the reconciler, wait until it serves /readyz."""
    from kubernetes import client as k8s

    from migops.kube.names import LOCAL_MANAGER
    from migops.reconciler.status import install_crd

    k8s.CoreV1Api(api).patch_namespace(NAMESPACE, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
                                       field_manager=LOCAL_MANAGER, _content_type="application/apply-patch+yaml")
    install_crd(api, field_manager=LOCAL_MANAGER)  # type: ignore[arg-type]
    if "://" not in repo and Path(repo).exists():
        repo = str(Path(repo).resolve())
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = [str(Path(sys.executable).parent / "migops"), "reconcile", "--repo", repo, "--path", path,
            "--kubeconfig", str(kubeconfig), "--namespace", NAMESPACE, "--no-leader-elect",
            "--http-address", f"127.0.0.1:{port}", _marker(workdir), "-v"]
    if ref:
        argv += ["--ref", ref]
    popen, ref_ = spawn(argv, workdir / "logs" / "reconciler.log")
    (workdir / STATE_FILE).write_text(json.dumps({**ref_.to_json(), "port": port, "repo": repo}))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if popen.poll() is not None:
            raise RuntimeError(f"the reconciler exited ({popen.returncode}); see {workdir / 'logs' / 'reconciler.log'}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as resp:
                if resp.status == 200:
                    return ref_
        except OSError:
            pass
        time.sleep(0.2)
    stop_process(ref_, popen=popen)
    raise RuntimeError(f"the reconciler did not become ready in {timeout:.0f}s; see {workdir / 'logs' / 'reconciler.log'}")


def start_from_args(args: argparse.Namespace, api: object, workdir: Path, kubeconfig: Path) -> str | None:
    """For `local up`: start it when --repo was given; a line for the summary."""
    if not args.repo:
        return None
    ref = start(api, workdir, kubeconfig, args.repo, args.ref, args.path)
    return f"pid {ref.pid}, following {args.repo} (log {workdir / 'logs' / 'reconciler.log'}; `migops status`)"


def stop(workdir: Path) -> list[int]:
    """Stop this workdir's reconciler; pids that survived."""
    refs: list[ProcessRef] = []
    try:
        refs.append(ProcessRef.from_json(json.loads((workdir / STATE_FILE).read_text())))
    except (OSError, ValueError, KeyError):
        pass
    refs += [r for r in find_by_argument(_marker(workdir)) if r not in refs]
    for ref in refs:
        try:
            stop_process(ref, timeout=15)
        except RuntimeError:
            pass
    return [r.pid for r in refs if is_alive(r)]

"""`migops local up --repo URL`: the GitOps reconciler next to the local control plane.

It runs as its own detached process (`migops reconcile`, one replica, no Lease), as the manifests'
Deployment runs it: with the MigSync CRD installed, a MigSync `migops` in `migops-system` holding the
spec (repo, ref, path, interval: `kubectl edit migsync migops` changes it), and the identity of
manifests/base/reconciler (ServiceAccount migops-reconciler, its RBAC, the applied record's admission
policy: migops.local.identity), never system:masters. `migops status` and `kubectl get migsync -A`
work as in a real cluster. Its log is `<workdir>/logs/reconciler.log`; migops.local.stack records it
with the servers, so `down` stops it before them.
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
from typing import TYPE_CHECKING

from migops.local.ports import free_ports
from migops.local.process import ProcessRef, spawn
from migops.local.process import stop as stop_process

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

NAMESPACE = "migops-system"
MIGSYNC = "migops"  # the name the manifests' Deployment and RBAC (its applied record's Role) expect


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
    repo: str  # what it follows: the --repo given, or the repository its plain directory was committed into
    # ("" when it follows the MigSync a GitOps tool applies)


def plain_directory(repo: str) -> Path | None:
    """The directory `repo` names when it is a local directory git cannot fetch from: not a repository's
    top (a plain directory, or one inside another repository's work tree, such as examples/config-repo of
    a checkout). None for a URL or a repository. ValueError when a local path names no directory."""
    if "://" in repo or ":" in repo.split("/")[0]:
        return None  # a URL, or scp-style host:path
    path = Path(repo).expanduser()
    if not path.is_dir():
        raise ValueError(f"--repo {repo}: {'not a directory' if path.exists() else 'no such directory'}")
    probe = subprocess.run(
        ["git", "-C", str(path), "rev-parse", "--is-bare-repository", "--show-prefix"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    bare, _, prefix = probe.stdout.partition("\n")
    top = probe.returncode == 0 and (bare == "true" or prefix.strip() == "")
    return None if top else path.resolve()


def commit_directory(directory: Path, workdir: Path) -> str:
    """Commit the text files of `directory` into a new repository under `workdir` (deleted with it by
    `migops local down`); its path, for the reconciler to follow. Later edits to `directory` are not in it."""
    from migops.local import gitserver

    bare = gitserver.init_bare(workdir, "config-repo")
    gitserver.commit(bare, text_files(directory), f"the files of {directory}, as `migops local up --repo` found them")
    return str(bare)


def text_files(directory: Path) -> dict[str, str]:
    """The text files under `directory` (path relative to it -> text), .git left out."""
    files = {}
    for path in sorted(directory.rglob("*")):
        relative = path.relative_to(directory)
        if path.is_file() and not path.is_symlink() and ".git" not in relative.parts:
            try:
                files[relative.as_posix()] = path.read_text()
            except UnicodeDecodeError:
                continue  # a MIG config repository is YAML: the reconciler reads nothing else
    return files


def hook_secret_file(workdir: Path) -> Path:
    return workdir / "reconciler-hook.secret"


def kubeconfig_path(workdir: Path) -> Path:
    return workdir / "reconciler.kubeconfig"


def start(
    api: ApiClient,
    workdir: Path,
    kubeconfig: Path,
    repo: str | None,
    ref: str | None = None,
    path: str = "",
    interval: str = "10s",
    timeout: float = 60.0,
) -> LocalReconciler:
    """Install the CRD, namespace and MigSync (with `api`, the admin's; no MigSync when `repo` is None:
    a GitOps tool applies it, as a fleet's does), start the reconciler with
    `kubeconfig` (its own identity), wait until it serves /readyz; the caller records the process
    (migops.local.stack). It polls every `interval` (a local repo is cheap to fetch) and syncs at once
    on a signed POST /hook, as a git host's push webhook would send it."""
    from kubernetes import client as k8s

    from migops.api.migsync import SyncSpec, TrustPolicy, migsync_object
    from migops.api.names import LOCAL_MANAGER
    from migops.api.schema import parse_duration
    from migops.kube import ssa
    from migops.reconciler.status import install_crd

    k8s.CoreV1Api(api).patch_namespace(
        NAMESPACE,
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        field_manager=LOCAL_MANAGER,
        _content_type="application/apply-patch+yaml",
    )
    install_crd(api, field_manager=LOCAL_MANAGER)
    if repo is not None:
        plain = plain_directory(repo)
        if plain is not None:
            repo = commit_directory(plain, workdir)
        elif "://" not in repo and Path(repo).exists():
            repo = str(Path(repo).resolve())
        spec = SyncSpec(repo, ref or "", path or "", parse_duration(interval), False, TrustPolicy())
        ssa.apply(api, migsync_object(MIGSYNC, NAMESPACE, spec), field_manager=LOCAL_MANAGER, force=True)
    (port,) = free_ports(1)
    secret = hook_secret_file(workdir)
    secret.write_text(secrets.token_hex(32))
    secret.chmod(0o600)
    argv = [
        str(Path(sys.executable).parent / "migops"),
        "reconcile",
        "--kubeconfig",
        str(kubeconfig),
        "--name",
        MIGSYNC,
        "--namespace",
        NAMESPACE,
        "--no-leader-elect",
        "--http-address",
        f"127.0.0.1:{port}",
        "--hook-secret-file",
        str(secret),
        *identifying_arguments(workdir),
        "--log-level=info",
    ]
    log = workdir / "logs" / "reconciler.log"
    import urllib.request  # here, not with the module: `migops validate` registers this module's arguments

    popen, ref_ = spawn(argv, log)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if popen.poll() is not None:
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise RuntimeError(f"the reconciler exited ({popen.returncode}); {log} ends:\n{tail}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as resp:
                if resp.status == 200:
                    return LocalReconciler(popen, ref_, f"http://127.0.0.1:{port}", secret, repo or "")
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

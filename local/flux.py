"""Flux beside `migops local`: source-controller and kustomize-controller as processes, each as its own user.

`migops local up --flux` and the Flux tests (tests/flux) both run this: the binaries and CRDs built by
hack/flux-binaries.sh (pinned in hack/flux-versions.env, never committed), the CRDs installed, the
RBAC of local/data/flux-rbac.yaml (each controller a client-certificate user bound to Roles of
only what it needs), then both controllers on loopback ports, watching `flux-system` only, with leader
election off (one replica). Processes, not pods: `migops local` runs no kubelet (the real-node work
may later run them as pods; the objects and the verdicts would be the same).

The objects Flux is driven by (`git_repository`, `kustomization`) are built here too, so the tests, the
CLI and docs/gitops-tools.md show the same ones.
"""

from __future__ import annotations

import os
import subprocess
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s
from kubernetes.client import ApiClient

from migops.api.names import LOCAL_MANAGER
from migops.kube import crds, ssa
from migops.local import gitserver
from migops.local.binaries import BinariesUnavailable, run_script
from migops.local.ports import LOOPBACK, free_ports
from migops.local.process import ProcessRef, spawn, stop

NAMESPACE = "flux-system"
SOURCE_USER = "flux-source-controller"
KUSTOMIZE_USER = "flux-kustomize-controller"
FLUX_MANAGER = "kustomize-controller"  # the field manager of everything Flux applies
SCRIPT = Path(__file__).resolve().parents[1] / "hack" / "flux-binaries.sh"
# In both controllers' environment: how `down` finds them when state.json is lost (they take no
# argument that names the workdir).
WORKDIR_ENV = "MIGOPS_LOCAL_WORKDIR"

Kubeconfig = Callable[[str], Path]  # user -> a client-certificate kubeconfig (ControlPlane.kubeconfig_for)


@dataclass(frozen=True)
class FluxBinaries:
    directory: Path  # source-controller, kustomize-controller, crds/*.yaml

    @property
    def crds(self) -> list[Path]:
        return sorted((self.directory / "crds").glob("*.yaml"))


@dataclass(frozen=True)
class Controller:
    name: str
    popen: subprocess.Popen[bytes]
    ref: ProcessRef
    health: str  # http://127.0.0.1:PORT (/readyz, /healthz)


def locate(*, echo_build: bool = False) -> FluxBinaries:
    """Build (once; a long cold build) or find the controllers and their CRDs."""
    if not SCRIPT.is_file():
        raise BinariesUnavailable(
            f"{SCRIPT} not found; build Flux with the repository's hack/flux-binaries.sh and set MIGOPS_FLUX_BIN"
        )
    found = FluxBinaries(run_script(SCRIPT, echo_build=echo_build))
    missing = [n for n in ("source-controller", "kustomize-controller") if not (found.directory / n).is_file()]
    if missing or not found.crds:
        raise BinariesUnavailable(f"{SCRIPT} reported {found.directory} but it lacks {missing or 'crds/'}")
    return found


def rbac() -> list[dict[str, Any]]:
    """The Roles, ClusterRole and bindings of local/data/flux-rbac.yaml."""
    text = resources.files("migops.local").joinpath("data/flux-rbac.yaml").read_text()
    return [d for d in yaml.safe_load_all(text) if d]


def install(api: ApiClient, binaries: FluxBinaries, *, timeout: float = 60.0) -> None:
    """The namespace, every CRD the controllers watch (Established before they start), the RBAC."""
    for ns in (NAMESPACE, "gpu-operator"):
        ssa.apply(api, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}, field_manager=LOCAL_MANAGER)
    # Our own build's files (trusted, and far beyond the MIG reader's limits): plain PyYAML.
    found = [crd for path in binaries.crds for crd in yaml.safe_load_all(path.read_text()) if crd]
    crds.install(api, found, field_manager=LOCAL_MANAGER, force=True, timeout=timeout)
    for body in rbac():
        ssa.apply(api, body, field_manager=LOCAL_MANAGER, force=True)


def start(
    binaries: FluxBinaries, workdir: Path, kubeconfig_for: Kubeconfig, *, timeout: float = 90.0
) -> list[Controller]:
    """Start source-controller, then kustomize-controller; return once both serve /readyz. The caller
    adopts them (ControlPlane.adopt) so they are stopped with the stack; on failure both are stopped."""
    base = workdir / "flux"
    (base / "storage").mkdir(parents=True, exist_ok=True)  # source-controller refuses a missing one
    storage, s_metrics, s_health, k_metrics, k_health = free_ports(5)
    common = [
        "--watch-all-namespaces=false",
        "--enable-leader-election=false",
        "--log-level=info",
        "--log-encoding=console",
    ]
    plans = [
        (
            "source-controller",
            SOURCE_USER,
            s_health,
            [
                f"--storage-path={base / 'storage'}",
                f"--storage-addr={LOOPBACK}:{storage}",
                f"--storage-adv-addr={LOOPBACK}:{storage}",
                f"--metrics-addr={LOOPBACK}:{s_metrics}",
            ],
        ),
        (
            "kustomize-controller",
            KUSTOMIZE_USER,
            k_health,
            [f"--metrics-addr={LOOPBACK}:{k_metrics}", "--no-remote-bases=true", "--requeue-dependency=2s"],
        ),
    ]
    started: list[Controller] = []
    try:
        for name, user, health, extra in plans:
            identity = base / f"{name}.kubeconfig"
            identity.write_bytes(kubeconfig_for(user).read_bytes())
            identity.chmod(0o600)
            argv = [str(binaries.directory / name), *common, f"--health-addr={LOOPBACK}:{health}", *extra]
            env = {**os.environ, "KUBECONFIG": str(identity), "RUNTIME_NAMESPACE": NAMESPACE, WORKDIR_ENV: str(workdir)}
            popen, ref = spawn(argv, workdir / "logs" / f"{name}.log", env=env)
            started.append(Controller(name, popen, ref, f"http://{LOOPBACK}:{health}"))
        for c in started:
            _wait_ready(c, workdir / "logs" / f"{c.name}.log", timeout)
    except BaseException:
        for c in reversed(started):
            stop(c.ref, popen=c.popen)
        raise
    return started


def _wait_ready(c: Controller, log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if c.popen.poll() is not None:
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:]) if log.exists() else ""
            raise RuntimeError(
                f"{c.name} exited ({c.popen.returncode}) during startup; last log lines ({log}):\n{tail}"
            )
        try:
            with urllib.request.urlopen(f"{c.health}/readyz", timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{c.name} did not become ready in {timeout:.0f}s; see {log}")


# ------------------------------------------------------------------------------------------- objects
def git_repository(name: str, url: str, *, interval: str = "1m", branch: str = "main") -> dict[str, Any]:
    """A GitRepository following `branch` of `url` (http(s) or ssh; Flux has no file://)."""
    return {
        "apiVersion": "source.toolkit.fluxcd.io/v1",
        "kind": "GitRepository",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"interval": interval, "url": url, "ref": {"branch": branch}, "timeout": "20s"},
    }


def kustomization(
    name: str,
    source: str,
    path: str,
    *,
    interval: str = "10m",
    retry: str = "1m",
    depends_on: tuple[str, ...] = (),
    timeout: str = "1m",
) -> dict[str, Any]:
    """A Kustomization applying `path` of GitRepository `source`, waiting for what it applied to be
    healthy (`wait: true`), never pruning (a MIG ConfigMap or a Node must not vanish with a file)."""
    spec: dict[str, Any] = {
        "interval": interval,
        "retryInterval": retry,
        "timeout": timeout,
        "sourceRef": {"kind": "GitRepository", "name": source},
        "path": path,
        "prune": False,
        "wait": True,
    }
    if depends_on:
        spec["dependsOn"] = [{"name": d} for d in depends_on]
    return {
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
        "kind": "Kustomization",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": spec,
    }


def apply(api: ApiClient, *bodies: dict[str, Any]) -> None:
    for body in bodies:
        ssa.apply(api, body, field_manager=LOCAL_MANAGER, force=True)


def ready_condition(api: ApiClient, kind: str, name: str) -> dict[str, Any] | None:
    """The Ready condition of a Flux object in flux-system (None before the controller set one)."""
    group, plural = {
        "GitRepository": ("source.toolkit.fluxcd.io", "gitrepositories"),
        "Kustomization": ("kustomize.toolkit.fluxcd.io", "kustomizations"),
    }[kind]
    obj = k8s.CustomObjectsApi(api).get_namespaced_custom_object(group, "v1", NAMESPACE, plural, name)
    return next((c for c in (obj.get("status") or {}).get("conditions") or () if c.get("type") == "Ready"), None)


def status(api: ApiClient, name: str) -> dict[str, Any]:
    """A Kustomization's status (lastAppliedRevision, lastAttemptedRevision, conditions, ...)."""
    obj = k8s.CustomObjectsApi(api).get_namespaced_custom_object(
        "kustomize.toolkit.fluxcd.io", "v1", NAMESPACE, "kustomizations", name
    )
    return obj.get("status") or {}


def request_reconcile(api: ApiClient, kind: str, name: str) -> None:
    """What `flux reconcile` does: a new reconcile.fluxcd.io/requestedAt makes the controller act now."""
    group, plural = {
        "GitRepository": ("source.toolkit.fluxcd.io", "gitrepositories"),
        "Kustomization": ("kustomize.toolkit.fluxcd.io", "kustomizations"),
    }[kind]
    k8s.CustomObjectsApi(api).patch_namespaced_custom_object(
        group,
        "v1",
        NAMESPACE,
        plural,
        name,
        {"metadata": {"annotations": {"reconcile.fluxcd.io/requestedAt": f"{time.time():.6f}"}}},
    )


# ------------------------------------------------------------------------------------------- `up --flux`
REPO = "mig-config"  # the bare repository `up --flux` serves, and the GitRepository/Kustomization name
CONFIG_DIR = "mig-config"  # the directory in it Flux applies (config.yaml + kustomization.yaml)


def git_root(workdir: Path) -> Path:
    return workdir / "git"


def config_kustomization(namespace: str, name: str, *, unmanaged: bool = False) -> str:
    """kustomization.yaml making the MIG ConfigMap from config.yaml beside it, under its fixed name
    (mig-manager and the ClusterPolicy name it; kustomize's default hash suffix would rename it). The
    same config.yaml is what `migops validate` and the reconciler read. `unmanaged`: labelled
    migops.io/unmanaged=true, so that Flux keeps it while a MigSync's reconciler writes the labels."""
    labels = ", labels: {migops.io/unmanaged: 'true'}" if unmanaged else ""
    return (
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nconfigMapGenerator:\n"
        f"  - name: {name}\n    namespace: {namespace}\n    files: [config.yaml]\n"
        f"    options: {{disableNameSuffixHash: true{labels}}}\n"
    )


def up(api: ApiClient, plane: Any, progress: Callable[[str], None], *, interval: str = "30s") -> str:
    """Everything `migops local up --flux` adds, each process adopted by `plane` (a ControlPlane) as it
    starts: the git server with repository mig-config (first commit: the cluster's MIG ConfigMap as it is),
    the CRDs and RBAC, both controllers, a GitRepository and a Kustomization applying ./mig-config, and
    the first sync. Returns the URL to clone and push to."""
    from migops.local.agents import MIG_CONFIGMAP

    binaries = locate(echo_build=True)
    root = git_root(plane.workdir)
    bare = gitserver.init_bare(root, REPO)
    namespace, name = MIG_CONFIGMAP
    current = k8s.CoreV1Api(api).read_namespaced_config_map(name, namespace).data["config.yaml"]
    if not gitserver.has_commits(bare):
        gitserver.commit(
            bare,
            {
                f"{CONFIG_DIR}/config.yaml": current,
                f"{CONFIG_DIR}/kustomization.yaml": config_kustomization(namespace, name),
            },
            "the GPU Operator's MIG config, as migops local seeded it",
        )
    popen, ref, base = gitserver.start(root, plane.logs / "gitserver.log", probe=REPO)
    plane.adopt("flux-git", popen, ref)
    install(api, binaries)
    for c in start(binaries, plane.workdir, plane.kubeconfig_for):
        plane.adopt(c.name, c.popen, c.ref)
    url = f"{base}/{REPO}.git"
    apply(
        api,
        git_repository(REPO, url, interval=interval),
        kustomization(REPO, REPO, f"./{CONFIG_DIR}", interval=interval, retry=interval),
    )
    wait_applied(api, REPO, gitserver.head(bare))
    progress(
        f"Flux {binaries.directory.name} syncing {url} ./{CONFIG_DIR} -> ConfigMap {namespace}/{name} "
        f"(Kustomization {NAMESPACE}/{REPO}, every {interval})"
    )
    return url


def serve_fleet(api: ApiClient, plane: Any, progress: Callable[[str], None], repo: str) -> str:
    """A fleet's canary (`migops local up --clusters N --flux`): the git server with an empty bare
    repository `repo`, the CRDs and RBAC, both controllers, and no object of their own: the fleet's
    GitRepository and Kustomizations come once every cluster is up (migops.local.fleet_gitops). The URL."""
    binaries = locate(echo_build=True)
    root = git_root(plane.workdir)
    gitserver.init_bare(root, repo)
    popen, ref, base = gitserver.start(root, plane.logs / "gitserver.log", probe=repo)
    plane.adopt("flux-git", popen, ref)
    install(api, binaries)
    for c in start(binaries, plane.workdir, plane.kubeconfig_for):
        plane.adopt(c.name, c.popen, c.ref)
    progress(f"Flux {binaries.directory.name}: source- and kustomize-controller, serving {base}/{repo}.git")
    return f"{base}/{repo}.git"


def wait_applied(api: ApiClient, name: str, sha: str, *, timeout: float = 120.0) -> dict[str, Any]:
    """Wait until Kustomization `name` is Ready=True at commit `sha`; its status. A Ready=False for that
    commit is raised at once (RuntimeError with Flux's message): nothing will change by waiting."""
    deadline = time.monotonic() + timeout
    last: dict[str, Any] = {}
    while time.monotonic() < deadline:
        last = status(api, name)
        ready: dict[str, Any] = next((c for c in last.get("conditions") or () if c.get("type") == "Ready"), {})
        if last.get("lastAttemptedRevision", "").endswith(sha):
            if ready.get("status") == "True" and last.get("lastAppliedRevision", "").endswith(sha):
                return last
            if ready.get("status") == "False" and ready.get("reason") != "Progressing":
                raise RuntimeError(f"Kustomization {NAMESPACE}/{name}: {ready.get('reason')}: {ready.get('message')}")
        time.sleep(0.25)
    raise TimeoutError(f"Kustomization {NAMESPACE}/{name} not applied at {sha[:12]} after {timeout:.0f}s: {last}")

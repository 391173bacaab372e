"""Argo CD beside `migops local`: redis, argocd-repo-server and argocd-application-controller as processes.

`migops local up --argocd` and the Argo CD tests (tests/argocd) both run this: the one binary built by
hack/argocd-binaries.sh (pinned in hack/argocd-versions.env, never committed; the component is chosen by
the name it runs under), Argo CD's CRDs and the RBAC of Argo CD's own install.yaml from the same module
version, the `argocd` namespace with argocd-cm / argocd-rbac-cm / argocd-cmd-params-cm / argocd-secret
and the `default` AppProject (argocd-server creates it in a cluster; no server runs here), Debian's
redis-server, then both components on loopback ports.

Identities: the application-controller runs with a bound token of ServiceAccount
argocd/argocd-application-controller, bound to the Role and ClusterRole install.yaml gives it, never
system:masters. The repo-server gets no Kubernetes credentials at all (install.yaml binds nothing to
its ServiceAccount, and it needs none: it only clones git and renders manifests). The local API server
is Argo CD's `in-cluster` destination: Argo CD's own switch for running the controller outside a pod,
ARGOCD_FAKE_IN_CLUSTER=true, makes `https://kubernetes.default.svc` use the controller's KUBECONFIG.

Processes, not pods (`migops local` runs no kubelet); the objects and the verdicts are the same.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
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

from migops.api.names import LOCAL_MANAGER, MIG_CONFIG_LABEL
from migops.kube import crds, ssa
from migops.local import flux, gitserver
from migops.local.binaries import BinariesUnavailable, run_script
from migops.local.ports import LOOPBACK, free_ports
from migops.local.process import ProcessRef, spawn, stop

NAMESPACE = "argocd"
CONTROLLER = "argocd-application-controller"
REPO_SERVER = "argocd-repo-server"
# Progressive Syncs (RollingSync) are the ApplicationSet controller's, a role of the same binary (chosen by
# ARGOCD_BINARY_NAME, Argo CD's own switch, where the image has a symlink), run for a fleet only.
APPSET_CONTROLLER = "argocd-applicationset-controller"
REDIS = "argocd-redis"
PROJECT = "default"
IN_CLUSTER = "in-cluster"
ARGOCD_MANAGER = "argocd-controller"  # the field manager of Argo CD's server-side applies
SCRIPT = Path(__file__).resolve().parents[1] / "hack" / "argocd-binaries.sh"
# Every Argo CD process carries the workdir in this variable (Flux's too): `down` finds them by it
# when state.json is lost.
WORKDIR_ENV = flux.WORKDIR_ENV
PART_OF = {"app.kubernetes.io/part-of": "argocd"}  # Argo CD's settings informers select on this label
# How often the controller refreshes every Application (git and live state); Argo CD's own variable,
# read as the default of --app-resync, so a caller (the tests) can shorten it. Argo CD's default: 120s.
RESYNC_ENV = "ARGOCD_RECONCILIATION_TIMEOUT"
DEFAULT_RESYNC = "30s"
# How long RollingSync waits after a new commit before it refreshes the Applications that have not been
# refreshed since, and moves on (Argo CD's variable; its default is 30 s). Three refresh periods unless
# set: with one, an Application of an earlier step can still look done at its previous commit
# (docs/fleet.md).
GRACE_ENV = "ARGOCD_APPLICATIONSET_CONTROLLER_REFRESH_GRACE_PERIOD_SECONDS"
# The Lua health check of a MigSync (the reconciler's status conditions): shipped as a file, referenced
# from docs/gitops-tools.md and the chart's NOTES, installed into argocd-cm here.
HEALTH_KEY = "resource.customizations.health.migops.io_MigSync"

Kubeconfig = Callable[..., Path]


@dataclass(frozen=True)
class ArgoCDBinaries:
    directory: Path  # argocd (+ role symlinks), crds/*.yaml, manifests/install.yaml

    @property
    def crds(self) -> list[Path]:
        return sorted((self.directory / "crds").glob("*.yaml"))

    @property
    def install_manifest(self) -> Path:
        return self.directory / "manifests" / "install.yaml"

    def role(self, name: str) -> Path:
        return self.directory / name


@dataclass(frozen=True)
class Component:
    name: str
    popen: subprocess.Popen[bytes]
    ref: ProcessRef


def locate(*, echo_build: bool = False) -> ArgoCDBinaries:
    """Build (once; a long cold build) or find Argo CD's binary, CRDs and install manifest."""
    if not SCRIPT.is_file():
        raise BinariesUnavailable(
            f"{SCRIPT} not found; build Argo CD with the repository's hack/argocd-binaries.sh and set MIGOPS_ARGOCD_BIN"
        )
    found = ArgoCDBinaries(run_script(SCRIPT, echo_build=echo_build))
    missing = [n for n in (CONTROLLER, REPO_SERVER, "git-verify-wrapper.sh") if not os.access(found.role(n), os.X_OK)]
    if missing or not found.crds or not found.install_manifest.is_file():
        raise BinariesUnavailable(
            f"{SCRIPT} reported {found.directory} but it lacks {missing or 'crds/ or manifests/'}"
        )
    return found


def redis_server() -> str:
    path = shutil.which("redis-server")
    if path is None:
        raise BinariesUnavailable(
            "redis-server is not on PATH (Debian: apt-get install redis-server; hack/host-packages.sh)"
        )
    return path


def health_lua() -> str:
    """The MigSync health check (reconciler/data/argocd-migsync-health.lua: it reads the status the
    reconciler writes, so it lives with the reconciler)."""
    return resources.files("migops.reconciler").joinpath("data/argocd-migsync-health.lua").read_text()


# ------------------------------------------------------------------------------------------- install
def rbac(binaries: ArgoCDBinaries) -> list[dict[str, Any]]:
    """The application-controller's, repo-server's and ApplicationSet controller's ServiceAccounts and the
    controllers' Roles, ClusterRoles and bindings, exactly as Argo CD's install.yaml of this version gives them."""
    wanted = {CONTROLLER, REPO_SERVER, APPSET_CONTROLLER}
    kinds = {"ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"}
    out = []
    for doc in yaml.safe_load_all(binaries.install_manifest.read_text()):
        if doc and doc.get("kind") in kinds and doc["metadata"]["name"] in wanted:
            if doc["kind"] not in ("ClusterRole", "ClusterRoleBinding"):
                doc["metadata"]["namespace"] = NAMESPACE
            out.append(doc)
    return out


def settings(*, secret_key: str) -> list[dict[str, Any]]:
    """argocd-cm (the MigSync health check, the in-cluster destination on), argocd-rbac-cm,
    argocd-cmd-params-cm and argocd-secret, labelled as Argo CD's settings manager selects them."""

    def meta(name: str) -> dict[str, Any]:
        return {"name": name, "namespace": NAMESPACE, "labels": dict(PART_OF)}

    return [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": meta("argocd-cm"),
            "data": {
                "cluster.inClusterEnabled": "true",
                # Argo CD's own tracking label (app.kubernetes.io/instance) could collide with chart labels;
                # an annotation is what Argo CD recommends.
                "application.resourceTrackingMethod": "annotation",
                HEALTH_KEY: health_lua(),
            },
        },
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta("argocd-rbac-cm"), "data": {"policy.default": ""}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta("argocd-cmd-params-cm"), "data": {}},
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": meta("argocd-secret"),
            "type": "Opaque",
            "stringData": {"server.secretkey": secret_key},
        },
    ]


def default_project() -> dict[str, Any]:
    """The `default` AppProject argocd-server would create: any repository, any destination."""
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "AppProject",
        "metadata": {"name": PROJECT, "namespace": NAMESPACE},
        "spec": {
            "sourceRepos": ["*"],
            "destinations": [{"server": "*", "namespace": "*", "name": "*"}],
            "clusterResourceWhitelist": [{"group": "*", "kind": "*"}],
        },
    }


def install(api: ApiClient, binaries: ArgoCDBinaries, *, timeout: float = 60.0) -> None:
    """The namespace, Argo CD's CRDs (Established before the controller starts), its RBAC, settings and
    the default AppProject."""
    for ns in (NAMESPACE, "gpu-operator"):
        ssa.apply(api, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}, field_manager=LOCAL_MANAGER)
    # Our own build's files (trusted, and far beyond the MIG reader's limits): plain PyYAML.
    found = [crd for path in binaries.crds for crd in yaml.safe_load_all(path.read_text()) if crd]
    crds.install(api, found, field_manager=LOCAL_MANAGER, force=True, timeout=timeout)
    for body in rbac(binaries):
        ssa.apply(api, body, field_manager=LOCAL_MANAGER, force=True)
    try:
        k8s.CoreV1Api(api).read_namespaced_secret("argocd-secret", NAMESPACE)
        key = None  # keep the existing key (an `up` over a kept etcd)
    except k8s.ApiException as exc:
        if exc.status != 404:
            raise
        key = secrets.token_urlsafe(32)
    for body in settings(secret_key=key or ""):
        if key is None and body["kind"] == "Secret":
            continue
        ssa.apply(api, body, field_manager=LOCAL_MANAGER, force=True)
    ssa.apply(api, default_project(), field_manager=LOCAL_MANAGER, force=True)


# ------------------------------------------------------------------------------------------- processes
def start(
    binaries: ArgoCDBinaries,
    workdir: Path,
    kubeconfig_for_service_account: Kubeconfig,
    *,
    timeout: float = 120.0,
    applicationsets: bool = False,
) -> list[Component]:
    """Start redis, the repo-server, the application-controller and, with `applicationsets`, the
    ApplicationSet controller with Progressive Syncs on; return once each answers. The caller adopts
    them (ControlPlane.adopt) so they stop with the stack; on failure all are stopped."""
    base = workdir / "argocd"
    for sub in ("redis", "tmp", "ssh", "tls", "gpg", "plugins"):
        (base / sub).mkdir(parents=True, exist_ok=True)
    redis_port, repo_port, repo_metrics, ctl_metrics, set_metrics, set_probe, set_hook = free_ports(7)
    logs = workdir / "logs"
    # No inherited kube credentials (a user's KUBECONFIG must not leak into the repo-server).
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    env |= {
        WORKDIR_ENV: str(workdir),
        "TMPDIR": str(base / "tmp"),  # repo-server clones under $TMPDIR/_argocd-repo
        "ARGOCD_ASK_PASS_SOCK": str(base / "askpass.sock"),
        "ARGOCD_SSH_DATA_PATH": str(base / "ssh"),
        "ARGOCD_TLS_DATA_PATH": str(base / "tls"),
        "ARGOCD_GPG_DATA_PATH": str(base / "gpg"),
        "ARGOCD_GNUPGHOME": str(base / "gpg"),
        "ARGOCD_GPG_ENABLED": "false",
        "ARGOCD_PLUGINSOCKFILEPATH": str(base / "plugins"),
        "HOME": str(base),  # git's global config and credential helpers: none of the user's
        # git-verify-wrapper.sh beside the binary, where Argo CD's image has it (/usr/local/bin)
        "PATH": f"{binaries.directory}{os.pathsep}{os.environ.get('PATH', os.defpath)}",
    }
    redis_addr = f"{LOOPBACK}:{redis_port}"
    started: list[Component] = []
    try:
        popen, ref = spawn(
            [
                redis_server(),
                "--bind",
                LOOPBACK,
                "--port",
                str(redis_port),
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(base / "redis"),
                "--protected-mode",
                "yes",
            ],
            logs / "argocd-redis.log",
            env=env,
        )
        started.append(Component(REDIS, popen, ref))
        _wait(started[-1], logs / "argocd-redis.log", timeout, lambda: _redis_ping(redis_port))

        popen, ref = spawn(
            [
                str(binaries.role(REPO_SERVER)),
                f"--address={LOOPBACK}",
                f"--port={repo_port}",
                f"--metrics-address={LOOPBACK}",
                f"--metrics-port={repo_metrics}",
                "--disable-tls",  # loopback only; and no mTLS client CA with it (Argo CD refuses both)
                "--client-ca-path=",
                f"--redis={redis_addr}",
                "--logformat=text",
            ],
            logs / "argocd-repo-server.log",
            env=env,
        )
        started.append(Component(REPO_SERVER, popen, ref))
        _wait(
            started[-1],
            logs / "argocd-repo-server.log",
            timeout,
            lambda: _http_ok(f"http://{LOOPBACK}:{repo_metrics}/healthz?full=true"),
        )

        identity = controller_kubeconfig(workdir)
        identity.write_bytes(
            kubeconfig_for_service_account(NAMESPACE, CONTROLLER, expiration_seconds=7 * 24 * 3600).read_bytes()
        )
        identity.chmod(0o600)
        ctl_env = {
            **env,
            "KUBECONFIG": str(identity),
            "ARGOCD_FAKE_IN_CLUSTER": "true",
            RESYNC_ENV: os.environ.get(RESYNC_ENV, DEFAULT_RESYNC),
            "ARGOCD_RECONCILIATION_JITTER": os.environ.get("ARGOCD_RECONCILIATION_JITTER", "0"),
        }
        popen, ref = spawn(
            [
                str(binaries.role(CONTROLLER)),
                f"--namespace={NAMESPACE}",
                f"--repo-server={LOOPBACK}:{repo_port}",
                "--repo-server-plaintext",
                f"--redis={redis_addr}",
                f"--metrics-port={ctl_metrics}",
                "--logformat=text",
                # No argocd-server runs here to show the resource tree: keep each resource's health (the
                # MigSync check's message among them) in the Application's status, for kubectl.
                "--persist-resource-health",
                "--status-processors=2",
                "--operation-processors=2",
            ],
            logs / "argocd-application-controller.log",
            env=ctl_env,
        )
        started.append(Component(CONTROLLER, popen, ref))
        _wait(
            started[-1],
            logs / "argocd-application-controller.log",
            timeout,
            lambda: _http_ok(f"http://{LOOPBACK}:{ctl_metrics}/healthz"),
        )
        if applicationsets:
            identity = workdir / "argocd" / f"{APPSET_CONTROLLER}.kubeconfig"
            identity.write_bytes(
                kubeconfig_for_service_account(
                    NAMESPACE, APPSET_CONTROLLER, expiration_seconds=7 * 24 * 3600
                ).read_bytes()
            )
            identity.chmod(0o600)
            log = logs / f"{APPSET_CONTROLLER}.log"
            popen, ref = spawn(
                [
                    str(binaries.role("argocd")),
                    f"--namespace={NAMESPACE}",
                    f"--argocd-repo-server={LOOPBACK}:{repo_port}",
                    "--repo-server-plaintext",
                    f"--metrics-addr={LOOPBACK}:{set_metrics}",
                    f"--probe-addr={LOOPBACK}:{set_probe}",
                    f"--webhook-addr={LOOPBACK}:{set_hook}",
                    "--enable-progressive-syncs",
                    "--logformat=text",
                ],
                log,
                env={
                    **env,
                    "KUBECONFIG": str(identity),
                    "ARGOCD_BINARY_NAME": APPSET_CONTROLLER,
                    GRACE_ENV: os.environ.get(GRACE_ENV) or str(round(3 * resync_seconds())),
                },
            )
            started.append(Component(APPSET_CONTROLLER, popen, ref))
            # It registers no health checks (its probe address serves none): its metrics answering is the sign.
            _wait(started[-1], log, timeout, lambda: _http_ok(f"http://{LOOPBACK}:{set_metrics}/metrics"))
    except BaseException:
        for c in reversed(started):
            stop(c.ref, popen=c.popen)
        raise
    return started


def resync_seconds() -> float:
    """The application-controller's refresh period, as `start` gives it."""
    from migops.api.schema import parse_duration

    return parse_duration(os.environ.get(RESYNC_ENV, DEFAULT_RESYNC))


def controller_kubeconfig(workdir: Path) -> Path:
    """The application-controller's identity: a bound token of its ServiceAccount (a week: the local
    stack has no kubelet to rotate it)."""
    return workdir / "argocd" / f"{CONTROLLER}.kubeconfig"


def _redis_ping(port: int) -> bool:
    try:
        with socket.create_connection((LOOPBACK, port), timeout=2) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


def _wait(c: Component, log: Path, timeout: float, ready: Callable[[], bool]) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if c.popen.poll() is not None:
            raise RuntimeError(
                f"{c.name} exited ({c.popen.returncode}) during startup; last log lines ({log}):\n{_tail(log)}"
            )
        if ready():
            return
        time.sleep(0.2)
    # The log goes with the stack's directory when a failed `up` stops it: its end is part of the error.
    raise RuntimeError(f"{c.name} did not become ready in {timeout:.0f}s; last log lines ({log}):\n{_tail(log)}")


def _tail(log: Path) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-20:]) if log.exists() else ""


# ------------------------------------------------------------------------------------------- objects
def application(
    name: str,
    url: str,
    path: str,
    *,
    revision: str = "main",
    automated: bool = True,
    server_side_diff: bool = False,
    retry: int = 1,
) -> dict[str, Any]:
    """An Application syncing `path` of `url` into the in-cluster destination: automated (no prune: a
    MIG ConfigMap or a Node must not vanish with a file), applied server-side (field manager
    argocd-controller, so labels owned by the reconciler or the GPU Operator stay theirs).

    Server-Side Diff is stated explicitly, off by default: Argo CD v3.6 turns it on with
    `ServerSideApply=true`, and a Server-Side Diff denied by the webhook is cached as "no difference",
    so the Application shows Synced at the refused commit and never syncs it (docs/gitops-tools.md).
    `retry`: automated syncs of one commit (Argo CD's default is 5; a denial is not transient)."""
    spec: dict[str, Any] = {
        "project": PROJECT,
        "source": {"repoURL": url, "targetRevision": revision, "path": path},
        "destination": {"name": IN_CLUSTER},
        "syncPolicy": {
            "syncOptions": ["ServerSideApply=true"],
            "retry": {"limit": retry, "backoff": {"duration": "2s", "factor": 2, "maxDuration": "30s"}},
        },
    }
    if automated:
        spec["syncPolicy"]["automated"] = {"prune": False, "selfHeal": True}
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": NAMESPACE,
        "annotations": {"argocd.argoproj.io/compare-options": f"ServerSideDiff={str(server_side_diff).lower()}"},
    }
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": "Application", "metadata": metadata, "spec": spec}


class _Literal(yaml.SafeDumper):
    """Multi-line strings as `|` blocks: the config in git reads as the config.yaml it is."""


def _str(dumper: yaml.SafeDumper, text: str) -> yaml.Node:
    style = "|" if "\n" in text else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


_Literal.add_representer(str, _str)


def configmap_manifest(namespace: str, name: str, config_yaml: str, *, wave: int | None = None) -> str:
    """The MIG ConfigMap as a plain manifest in git (a directory-type Application: no kustomize here)."""
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": {"config.yaml": config_yaml},
    }
    if wave is not None:
        body["metadata"]["annotations"] = {"argocd.argoproj.io/sync-wave": str(wave)}
    return yaml.dump(body, Dumper=_Literal, sort_keys=False, width=1000)


def node_manifest(node: str, config: str, *, wave: int | None = None) -> str:
    """One `nvidia.com/mig.config` label of an existing Node: a partial manifest, applied server-side,
    never pruned or deleted, not validated against the full Node schema."""
    annotations = {"argocd.argoproj.io/sync-options": "ServerSideApply=true,Validate=false,Prune=false,Delete=false"}
    if wave is not None:
        annotations["argocd.argoproj.io/sync-wave"] = str(wave)
    body = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": node, "labels": {MIG_CONFIG_LABEL: config}, "annotations": annotations},
    }
    return yaml.safe_dump(body, sort_keys=False, width=1000)


def apply(api: ApiClient, *bodies: dict[str, Any]) -> None:
    for body in bodies:
        ssa.apply(api, body, field_manager=LOCAL_MANAGER, force=True)


def get_application(api: ApiClient, name: str) -> dict[str, Any]:
    obj: dict[str, Any] = k8s.CustomObjectsApi(api).get_namespaced_custom_object(
        "argoproj.io", "v1alpha1", NAMESPACE, "applications", name
    )
    return obj


def refresh(api: ApiClient, name: str, kind: str = "normal") -> None:
    """What `argocd app get --refresh` (or a git webhook) does: the controller compares at once."""
    k8s.CustomObjectsApi(api).patch_namespaced_custom_object(
        "argoproj.io",
        "v1alpha1",
        NAMESPACE,
        "applications",
        name,
        {"metadata": {"annotations": {"argocd.argoproj.io/refresh": kind}}},
    )


def wait_synced(api: ApiClient, name: str, sha: str, *, timeout: float = 120.0) -> dict[str, Any]:
    """Wait until Application `name` is Synced and Healthy at `sha` with no operation running; its
    status. (A commit that changes nothing in the cluster is Synced without any sync operation.) A
    failed operation for `sha` is raised at once (RuntimeError with Argo CD's message)."""
    deadline = time.monotonic() + timeout
    last: dict[str, Any] = {}
    while time.monotonic() < deadline:
        last = get_application(api, name).get("status") or {}
        sync = last.get("sync") or {}
        op = last.get("operationState") or {}
        op_rev = ((op.get("syncResult") or {}).get("revision")) or ""
        if op_rev == sha and op.get("phase") in ("Failed", "Error"):
            raise RuntimeError(f"Application {NAMESPACE}/{name} at {sha[:12]}: {op.get('phase')}: {op.get('message')}")
        if (
            sync.get("status") == "Synced"
            and sync.get("revision") == sha
            and (last.get("health") or {}).get("status") == "Healthy"
            and op.get("phase") != "Running"
        ):
            return last
        time.sleep(0.25)
    raise TimeoutError(f"Application {NAMESPACE}/{name} not Synced/Healthy at {sha[:12]} after {timeout:.0f}s: {last}")


# ------------------------------------------------------------------------------------------- `up --argocd`
REPO = "argocd-mig-config"  # the bare repository `up --argocd` serves, and the Application's name
CONFIG_DIR = "mig-config"  # the directory in it the Application syncs (configmap.yaml)
CONFIG_FILE = f"{CONFIG_DIR}/configmap.yaml"


def up(api: ApiClient, plane: Any, progress: Callable[[str], None], *, git_base: str | None = None) -> str:
    """Everything `migops local up --argocd` adds, each process adopted by `plane` (a ControlPlane) as it
    starts: repository argocd-mig-config on the loopback git server (started here unless `git_base`, the
    one --flux started, is given; first commit: the cluster's MIG ConfigMap as it is), Argo CD's CRDs,
    RBAC and settings, redis, the repo-server, the application-controller, an automated Application
    syncing ./mig-config, and its first sync. Returns the URL to clone and push to."""
    from migops.local.agents import MIG_CONFIGMAP

    binaries = locate(echo_build=True)
    root = flux.git_root(plane.workdir)
    bare = gitserver.init_bare(root, REPO)
    namespace, name = MIG_CONFIGMAP
    current = k8s.CoreV1Api(api).read_namespaced_config_map(name, namespace).data["config.yaml"]
    if not gitserver.has_commits(bare):
        gitserver.commit(
            bare,
            {CONFIG_FILE: configmap_manifest(namespace, name, current)},
            "the GPU Operator's MIG config, as migops local seeded it",
        )
    if git_base is None:
        popen, ref, git_base = gitserver.start(root, plane.logs / "gitserver.log", probe=REPO)
        plane.adopt("argocd-git", popen, ref)
    install(api, binaries)
    for c in start(binaries, plane.workdir, plane.kubeconfig_for_service_account):
        plane.adopt(c.name, c.popen, c.ref)
    url = f"{git_base}/{REPO}.git"
    apply(api, application(REPO, url, CONFIG_DIR))
    wait_synced(api, REPO, gitserver.head(bare), timeout=180)
    progress(
        f"Argo CD {binaries.directory.name} syncing {url} ./{CONFIG_DIR} -> ConfigMap {namespace}/{name} "
        f"(Application {NAMESPACE}/{REPO}, automated, refreshed every {os.environ.get(RESYNC_ENV, DEFAULT_RESYNC)})"
    )
    return url


def serve_fleet(api: ApiClient, plane: Any, progress: Callable[[str], None], repo: str) -> str:
    """A fleet's canary (`migops local up --clusters N --argocd`): the git server with an empty bare
    repository `repo`, Argo CD's CRDs, RBAC and settings, redis, the repo-server, the
    application-controller and the ApplicationSet controller (Progressive Syncs on), and no Application
    of their own: the fleet's cluster Secrets and ApplicationSet come once every cluster is up
    (migops.local.fleet_gitops). The URL to clone and push to."""
    binaries = locate(echo_build=True)
    root = flux.git_root(plane.workdir)
    gitserver.init_bare(root, repo)
    popen, ref, base = gitserver.start(root, plane.logs / "gitserver.log", probe=repo)
    plane.adopt("argocd-git", popen, ref)
    install(api, binaries)
    for c in start(binaries, plane.workdir, plane.kubeconfig_for_service_account, applicationsets=True):
        plane.adopt(c.name, c.popen, c.ref)
    progress(
        f"Argo CD {binaries.directory.name}: repo-server, application-controller, ApplicationSet controller "
        f"(Progressive Syncs), serving {base}/{repo}.git"
    )
    return f"{base}/{repo}.git"

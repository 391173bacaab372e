"""`migops local deploy`: the product's own manifests, applied to the local cluster, in pods.

The overlay (default manifests/overlays/local) is rendered with kubectl kustomize, adjusted to this
cluster (the agent simulates the real node's GPUs; a config repo on this host is mounted read-only
into the reconciler pods at its own path, so the MigSync's url stays the same), applied server-side,
and waited on until every Deployment and DaemonSet is Available. The webhook, reconciler and agent that
`migops local up` runs as host processes for the real node are stopped first: the pods replace them
(the host webhook's registration, by url, gives way to the overlay's, by Service). The simulated
nodes' host agents stay: no pod can run on a node without a kubelet.
"""

from __future__ import annotations

import copy
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from migops.api.migsync import API_VERSION as MIGSYNC_API_VERSION
from migops.api.migsync import KIND as MIGSYNC_KIND
from migops.kube import ssa

ROOT = Path(__file__).resolve().parents[1]
OVERLAYS = ROOT / "manifests" / "overlays"
NAMESPACE = "migops-system"
MIGSYNC = "migops"
GIT_CONFIG = "migops-local-gitconfig"
WEBHOOK_CONFIGURATIONS = ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")
Log = Callable[[str], None]


class DeployError(RuntimeError):
    """Rendering, applying or waiting failed; the message says what and why."""


def overlay_dir(name: str) -> Path:
    path = Path(name) if "/" in name else OVERLAYS / name
    if not (path / "kustomization.yaml").is_file():
        known = sorted(p.name for p in OVERLAYS.iterdir() if (p / "kustomization.yaml").is_file())
        raise DeployError(f"--overlay {name}: no kustomization.yaml in {path} (overlays: {', '.join(known)})")
    return path


def render(kubectl: Path, overlay: Path) -> list[dict[str, Any]]:
    out = subprocess.run(
        [str(kubectl), "kustomize", str(overlay)], capture_output=True, text=True, timeout=120, check=False
    )
    if out.returncode != 0:
        raise DeployError(f"kubectl kustomize {overlay}: {out.stderr.strip()}")
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def _template(doc: dict[str, Any]) -> dict[str, Any]:
    spec = doc["spec"]
    return spec["jobTemplate"]["spec"]["template"] if doc["kind"] == "CronJob" else spec["template"]


def adjust(docs: Sequence[dict[str, Any]], *, gpus: str | None, repo: str | None) -> list[dict[str, Any]]:
    """The rendered overlay for this cluster: the agent's `--gpus` (COUNTxDEVICE) as the real node's,
    and a repo path mounted read-only into the reconciler at that same path. Names are unchanged, so
    `kubectl delete -k` of the overlay still removes everything."""
    out = copy.deepcopy(list(docs))
    for doc in out:
        if doc["kind"] == "DaemonSet" and doc["metadata"]["name"] == "migops-agent" and gpus:
            container = _template(doc)["spec"]["containers"][0]
            argv = container.get("command") or []
            if "--gpus" in argv:
                argv[argv.index("--gpus") + 1] = gpus
        local = repo_path(repo)
        if doc["kind"] == "Deployment" and doc["metadata"]["name"] == "migops-reconciler" and local:
            repo = local
            spec = _template(doc)["spec"]
            spec.setdefault("volumes", []).append(
                {"name": "config-repo", "hostPath": {"path": repo, "type": "Directory"}}
            )
            container = spec["containers"][0]
            container.setdefault("volumeMounts", []).append(
                {"name": "config-repo", "mountPath": repo, "readOnly": True}
            )
            # The repo belongs to the user who made it, the pod runs as 65532: git may refuse it as
            # "dubious ownership". The reconciler drops GIT_* variables, so the trust is git config of
            # the pod's own ($XDG_CONFIG_HOME/git/config), from a ConfigMap in the overlay's namespace.
            spec["volumes"].append({"name": "git-config", "configMap": {"name": GIT_CONFIG}})
            container["volumeMounts"].append({"name": "git-config", "mountPath": "/etc/migops/xdg", "readOnly": True})
            container.setdefault("env", []).append({"name": "XDG_CONFIG_HOME", "value": "/etc/migops/xdg"})
            out.append(
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {
                        "name": GIT_CONFIG,
                        "namespace": NAMESPACE,
                        "labels": {"app.kubernetes.io/part-of": "migops"},
                    },
                    "data": {"config": f"[safe]\n\tdirectory = {local}\n\tdirectory = {local}/.git\n"},
                }
            )
            for v in spec["volumes"]:
                if v["name"] == "git-config":
                    v["configMap"]["items"] = [{"key": "config", "path": "git/config"}]
    return out


def repo_path(repo: str | None) -> str | None:
    """The directory of a config repo on this host (a path or file:// URL); None for a remote one."""
    if not repo:
        return None
    path = repo.removeprefix("file://")
    return path if Path(path).is_absolute() else None


def migsync(repo: str, ref: str | None, path: str, interval: str = "10s") -> dict[str, Any]:
    spec: dict[str, Any] = {"url": repo, "interval": interval}
    if ref:
        spec["ref"] = ref
    if path:
        spec["path"] = path
    return {
        "apiVersion": MIGSYNC_API_VERSION,
        "kind": MIGSYNC_KIND,
        "metadata": {"name": MIGSYNC, "namespace": NAMESPACE},
        "spec": spec,
    }


def drop_url_registrations(api: ApiClient, docs: Sequence[dict[str, Any]]) -> list[str]:
    """Delete the overlay's webhook configurations where they exist with url clientConfigs (the host
    webhook's): url and service cannot be merged into one object. Returns what was deleted."""
    admission = k8s.AdmissionregistrationV1Api(api)
    ops = {
        "ValidatingWebhookConfiguration": (
            admission.read_validating_webhook_configuration,
            admission.delete_validating_webhook_configuration,
        ),
        "MutatingWebhookConfiguration": (
            admission.read_mutating_webhook_configuration,
            admission.delete_mutating_webhook_configuration,
        ),
    }
    deleted = []
    for doc in docs:
        if doc["kind"] not in ops:
            continue
        read, delete = ops[doc["kind"]]
        try:
            found = read(doc["metadata"]["name"])
        except ApiException as exc:
            if exc.status == 404:
                continue
            raise
        if any(w.client_config.url for w in found.webhooks or ()):
            delete(doc["metadata"]["name"])
            deleted.append(f"{doc['kind']}/{doc['metadata']['name']}")
    return deleted


def apply(kubectl: Path, kubeconfig: Path, docs: Sequence[dict[str, Any]]) -> None:
    """Server-side apply (field manager kubectl, as a user's `kubectl apply --server-side -k`): CRDs
    and namespaces first, so the rest is served when it is applied."""
    first = [d for d in docs if d["kind"] in ("Namespace", "CustomResourceDefinition")]
    rest = [d for d in docs if d not in first]
    for batch in (first, rest):
        if not batch:
            continue
        out = subprocess.run(
            [str(kubectl), "--kubeconfig", str(kubeconfig), "apply", "--server-side", "--force-conflicts", "-f", "-"],
            input=yaml.safe_dump_all(batch),
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        if out.returncode != 0:
            raise DeployError(f"kubectl apply --server-side: {out.stderr.strip()[-3000:]}")
        for crd in (d for d in batch if d["kind"] == "CustomResourceDefinition"):
            subprocess.run(
                [
                    str(kubectl),
                    "--kubeconfig",
                    str(kubeconfig),
                    "wait",
                    "--for=condition=Established",
                    f"crd/{crd['metadata']['name']}",
                    "--timeout=60s",
                ],
                capture_output=True,
                check=False,
            )


def apply_migsync(api: ApiClient, body: dict[str, Any]) -> None:
    ssa.apply(api, body, field_manager="migops-local", force=True)


def unavailable(api: ApiClient, docs: Sequence[dict[str, Any]]) -> list[str]:
    """Workloads of the overlay not Available yet, each with what it lacks."""
    apps = k8s.AppsV1Api(api)
    waiting = []
    for doc in docs:
        name, ns = doc["metadata"]["name"], doc["metadata"].get("namespace", NAMESPACE)
        if doc["kind"] == "Deployment":
            d = apps.read_namespaced_deployment(name, ns)
            want = d.spec.replicas or 0
            ok = (
                (d.status.observed_generation or 0) >= d.metadata.generation
                and (d.status.updated_replicas or 0) == want
                and (d.status.available_replicas or 0) == want
            )
            if not ok:
                waiting.append(f"Deployment {name}: {d.status.available_replicas or 0}/{want} available")
        elif doc["kind"] == "DaemonSet":
            d = apps.read_namespaced_daemon_set(name, ns)
            want = d.status.desired_number_scheduled or 0
            ok = (
                want > 0
                and (d.status.observed_generation or 0) >= d.metadata.generation
                and (d.status.updated_number_scheduled or 0) == want
                and (d.status.number_available or 0) == want
            )
            if not ok:
                waiting.append(f"DaemonSet {name}: {d.status.number_available or 0}/{want} available")
    return waiting


def wait_available(
    api: ApiClient, docs: Sequence[dict[str, Any]], *, timeout: float = 300.0, log: Log = lambda _: None
) -> float:
    began = time.monotonic()
    last: list[str] = []
    while True:
        waiting = unavailable(api, docs)
        if not waiting:
            return time.monotonic() - began
        if waiting != last:
            log("waiting: " + "; ".join(waiting))
            last = waiting
        if time.monotonic() - began > timeout:
            raise DeployError(f"not Available after {timeout:.0f}s: {'; '.join(waiting)}\n{_pod_problems(api)}")
        time.sleep(1.0)


def _pod_problems(api: ApiClient) -> str:
    """Why pods are not ready (waiting reasons, last termination), for the error message."""
    lines = []
    for pod in k8s.CoreV1Api(api).list_namespaced_pod(NAMESPACE).items:
        for status in pod.status.container_statuses or ():
            state = status.state
            if state.waiting:
                lines.append(f"{pod.metadata.name}: {state.waiting.reason}: {state.waiting.message or ''}")
            elif not status.ready:
                lines.append(f"{pod.metadata.name}: not ready (restarts {status.restart_count})")
        if not pod.status.container_statuses:
            lines.append(f"{pod.metadata.name}: {pod.status.phase}")
    return "\n".join(lines)


def image_loaded(node: Any, reference: str) -> bool:
    """Is `reference` (migops:0.1.0) in the real node's containerd, as the kubelet resolves it?"""
    full = reference if "/" in reference else f"docker.io/library/{reference}"
    return full in node.ctr("images", "list", "--quiet").split()


def ensure_image(node: Any, log: Log = lambda _: None) -> str:
    """Build the image (cached: seconds when nothing changed) unless the node has it; import it."""
    from migops.local import image

    ref = image.reference()
    if not image_loaded(node, ref):
        built = image.build(log=log)
        node.load_image(built.archive)
    return ref


def deploy(
    api: ApiClient,
    kubectl: Path,
    kubeconfig: Path,
    *,
    overlay: Path,
    gpus: str | None,
    repo: str | None = None,
    ref: str | None = None,
    path: str = "",
    timeout: float = 300.0,
    log: Log = lambda _: None,
) -> float:
    """Render, adjust, apply the overlay (and the MigSync when a repo is given); seconds until every
    workload was Available."""
    began = time.monotonic()
    docs = adjust(render(kubectl, overlay), gpus=gpus, repo=repo)
    for gone in drop_url_registrations(api, docs):
        log(f"removed the host webhook's registration {gone}")
    apply(kubectl, kubeconfig, docs)
    if repo:
        apply_migsync(api, migsync(repo, ref, path))
    wait_available(api, docs, timeout=timeout, log=log)
    return time.monotonic() - began

"""The agent's writes to its own Node, and what it reads about the GPU clients on it.

Every write is server-side apply as `migops-agent` of the whole set of fields the agent owns (a field
left out of an apply is removed), with force on those fields: the state label, the deploy labels it
pauses and restores, the `migops.io/` annotations and, with the simulated backend, GFD's labels and the
extended resources. Stale GFD labels and resources that another manager co-owns (the seeding of
`migops local`, a GFD that ran before) are removed with a JSON merge patch, as GFD rewrites its label
set. The Node's name is fixed at construction: this module has no way to write any other Node.

Every request is sent until the API server answers it (`migops.kube.errors.until_answered`): an API
server that is down or restarting delays the agent, it never ends it, so the GPU clients it paused are
always restored. A refusal (4xx) is raised at once. Once the agent is stopping, the last failure is
raised instead of waiting on.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from migops.api import objects
from migops.api.names import (
    AGENT_CONTROLLER,
    AGENT_MANAGER,
    DEPLOY_LABEL_PREFIX,
    GPU_RESOURCE,
    MIG_RESOURCE_PREFIX,
    PAUSED_FOR_MIG_CHANGE,
)
from migops.api.objects import NodeFacts, owned_keys
from migops.kube import events, ssa
from migops.kube.errors import until_answered
from migops.kube.informer import Informer
from migops.mig.gfd import is_gfd_label
from migops.mig.text import listed

log = logging.getLogger(__name__)
T = TypeVar("T")

# mig-manager's GPU clients (mig-hardware.md 5.3, step 7): paused by label, their pods waited for.
DEPLOY_COMPONENTS = ("device-plugin", "gpu-feature-discovery", "dcgm-exporter", "dcgm", "nvsm")
CLIENT_COMPONENT = "client"  # third-party clients: paused only when the label exists
CLIENT_POD_APPS = ("nvidia-device-plugin-daemonset", "gpu-feature-discovery", "nvidia-dcgm-exporter", "nvidia-dcgm")
VALIDATOR_APPS = ("nvidia-cuda-validator", "nvidia-device-plugin-validator")
OPERATOR_VALIDATOR_APP = "nvidia-operator-validator"


def is_gpu_resource(key: str) -> bool:
    return key == GPU_RESOURCE or key.startswith(MIG_RESOURCE_PREFIX)


def deploy_values_paused(labels: Mapping[str, str]) -> dict[str, str]:
    """Each GPU-client deploy label -> paused-for-mig-change; `false` stays `false`; the `client`
    label only when present."""
    out = {}
    for component in (*DEPLOY_COMPONENTS, CLIENT_COMPONENT):
        key = DEPLOY_LABEL_PREFIX + component
        if component == CLIENT_COMPONENT and key not in labels:
            continue
        out[key] = "false" if labels.get(key) == "false" else PAUSED_FOR_MIG_CHANGE
    return out


def deploy_values_restored(labels: Mapping[str, str]) -> dict[str, str]:
    """Paused labels back to `true` (what mig-manager writes; `false` stays `false`). Labels that are
    not paused are left as they are."""
    return {k: "true" for k, v in labels.items() if k.startswith(DEPLOY_LABEL_PREFIX) and v == PAUSED_FOR_MIG_CHANGE}


@dataclass(frozen=True)
class ClientPod:
    namespace: str
    name: str
    app: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


def is_client_pod(pod: Mapping[str, Any], clients_namespace: str) -> bool:
    """A GPU client pod as mig-manager selects them: the operator's four by `app` label in its
    namespace, and any DaemonSet pod whose nodeSelector names `nvidia.com/gpu.deploy.client`."""
    meta = objects.meta(pod)
    labels = meta.get("labels") or {}
    if meta.get("namespace") == clients_namespace and labels.get("app") in CLIENT_POD_APPS:
        return True
    owners = meta.get("ownerReferences") or ()
    selector = (pod.get("spec") or {}).get("nodeSelector") or {}
    return any(o.get("kind") == "DaemonSet" for o in owners) and DEPLOY_LABEL_PREFIX + CLIENT_COMPONENT in selector


class NodeIO:
    """Writes to one Node (this agent's) and watches the pods bound to it."""

    def __init__(
        self, api: k8s.ApiClient, node: str, *, manager: str = AGENT_MANAGER, stop: threading.Event | None = None
    ) -> None:
        self.api = api
        self.node = node
        self.manager = manager
        self.stop = stop or threading.Event()  # set: requests are no longer sent again
        self.core = k8s.CoreV1Api(api)
        self.labels: dict[str, str] = {}
        self.annotations: dict[str, str] = {}
        self.resources: dict[str, str] = {}
        self.pods_changed = threading.Event()
        self.pods: Informer | None = None

    # ------------------------------------------------------------------ ownership
    def load(self) -> dict[str, Any]:
        """Learn which fields a previous agent process owned (so this one keeps sending them)."""
        node = self.api.sanitize_for_serialization(
            self._answered("read the Node", lambda: self.core.read_node(self.node))
        )
        labels, annotations = objects.labels(node), objects.annotations_of(node)
        self.labels = {k: labels[k] for k in owned_keys(node, self.manager, ("metadata", "labels")) if k in labels}
        self.annotations = {
            k: annotations[k] for k in owned_keys(node, self.manager, ("metadata", "annotations")) if k in annotations
        }
        capacity = (node.get("status") or {}).get("capacity") or {}
        self.resources = {
            k: capacity[k]
            for k in owned_keys(node, self.manager, ("status", "capacity"), subresource="status")
            if k in capacity
        }
        return node

    def apply(self, labels: Mapping[str, str | None] = {}, annotations: Mapping[str, str | None] = {}) -> None:
        """Change some owned fields (None drops one) and apply the whole owned set. The owned set is
        kept only once the write is accepted: a refused write (the own-node policy denies, say, a digest
        for a config the node is no longer labelled with) is not sent again with every later write."""
        new_labels, new_annotations = _changed(self.labels, labels), _changed(self.annotations, annotations)
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": self.node, "labels": new_labels, "annotations": new_annotations},
        }
        self._answered("write the Node", lambda: ssa.apply(self.api, body, field_manager=self.manager, force=True))
        self.labels, self.annotations = new_labels, new_annotations

    def config_label(self) -> str | None:
        """The node's nvidia.com/mig.config as the API server has it now (not as the watch saw it)."""
        return NodeFacts.from_obj(
            self._answered("read the Node", lambda: self.core.read_node(self.node)), offers=False
        ).config

    def _answered(self, what: str, call: Callable[[], T]) -> T:
        return until_answered(call, f"node {self.node}: {what}", self.stop)

    # ------------------------------------------------------------------ GFD labels and resources
    def publish_gfd(self, node: Mapping[str, Any], labels: Mapping[str, str], resources: Mapping[str, int]) -> None:
        """Make the Node's GFD labels and GPU resources exactly these (simulated GPUs)."""
        current = objects.labels(node)
        stale = [k for k in current if is_gfd_label(k) and k not in labels]
        stale += [k for k in self.labels if is_gfd_label(k) and k not in labels and k not in stale]
        for key in stale:
            self.labels.pop(key, None)
        if stale:
            patch = {"metadata": {"labels": {k: None for k in stale}}}
            self._answered("remove stale GFD labels", lambda: self.core.patch_node(self.node, patch))
        self.apply(dict(labels))
        capacity = (node.get("status") or {}).get("capacity") or {}
        wanted = {k: str(v) for k, v in resources.items()}
        gone = [k for k in set(capacity) | set(self.resources) if is_gpu_resource(k) and k not in wanted]
        if gone:
            drop = {"status": {"capacity": {k: None for k in gone}, "allocatable": {k: None for k in gone}}}
            self._answered("remove stale GPU resources", lambda: self.core.patch_node_status(self.node, drop))
        self.resources = wanted
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": self.node},
            "status": {"capacity": wanted, "allocatable": wanted},
        }
        self._answered(
            "write the GPU resources",
            lambda: ssa.apply(self.api, body, field_manager=self.manager, force=True, subresource="status"),
        )

    # ------------------------------------------------------------------ events
    def event(self, node: Mapping[str, Any], reason: str, message: str, *, warning: bool = False) -> None:
        """Record an Event about the Node. Sent until the API server answers (its own name makes a second
        send harmless); a refusal is logged, never raised: an Event never breaks the work it tells of."""
        meta = objects.meta(node)
        ref = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": self.node, "uid": meta.get("uid")}}
        body = events.event_body(
            ref, reason, message, type="Warning" if warning else "Normal", controller=AGENT_CONTROLLER
        )
        try:
            self._answered(f"record Event {reason}", lambda: events.create(self.api, body))
        except ApiException as exc:
            if exc.status != 409:  # 409: an earlier send was created, its answer lost
                log.warning("could not record Event %s: HTTP %s %s", reason, exc.status, exc.reason)
        except Exception as exc:  # noqa: BLE001 - stopping while the API server is away: the Event is lost
            log.warning("could not record Event %s: %s", reason, exc)

    # ------------------------------------------------------------------ pods on this node
    def start_pod_watch(self) -> Informer:
        def changed(kind: str, obj: dict) -> None:
            self.pods_changed.set()

        self.pods = Informer(
            self.core.list_pod_for_all_namespaces,
            name=f"pods-{self.node}",
            handler=changed,
            field_selector=f"spec.nodeName={self.node}",
        ).start()
        return self.pods

    def client_pods(self, clients_namespace: str) -> list[ClientPod]:
        assert self.pods is not None
        return sorted(
            (
                ClientPod(
                    p["metadata"]["namespace"],
                    p["metadata"]["name"],
                    (p["metadata"].get("labels") or {}).get("app", ""),
                )
                for p in self.pods.items().values()
                if is_client_pod(p, clients_namespace)
            ),
            key=str,
        )

    def wait_clients_gone(self, clients_namespace: str, timeout: float, stop: threading.Event) -> None:
        """Block until no GPU client pod is left on the node; TimeoutError names the ones left."""
        assert self.pods is not None
        if not self.pods.wait_synced(min(timeout, 30.0)):
            raise TimeoutError(f"could not list the pods on node {self.node}: {self.pods.last_error}")
        deadline = time.monotonic() + timeout
        while True:
            self.pods_changed.clear()
            left = self.client_pods(clients_namespace)
            if not left:
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                shown = listed(left, 5)
                raise TimeoutError(
                    f"timed out after {timeout:g}s waiting for GPU client pods to leave the node: {shown}"
                )
            if stop.is_set():
                raise InterruptedError("the agent is stopping")
            self.pods_changed.wait(min(remaining, 1.0))

    def delete_pods(self, namespace: str, apps: Iterable[str]) -> list[str]:
        """Delete this node's pods with these `app` labels in `namespace` (validators re-run)."""
        assert self.pods is not None
        wanted = set(apps)
        names = [
            p["metadata"]["name"]
            for p in self.pods.items().values()
            if p["metadata"].get("namespace") == namespace and (p["metadata"].get("labels") or {}).get("app") in wanted
        ]
        return [name for name in names if self._delete_pod(namespace, name)]

    def _delete_pod(self, namespace: str, name: str) -> bool:
        """False when it was gone already."""
        try:
            self._answered(f"delete pod {namespace}/{name}", lambda: self.core.delete_namespaced_pod(name, namespace))
        except ApiException as exc:
            if exc.status != 404:
                raise
            return False
        return True


def _changed(current: Mapping[str, str], changes: Mapping[str, str | None]) -> dict[str, str]:
    out = dict(current)
    for key, value in changes.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


def layout_json(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)

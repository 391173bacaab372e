"""Read what `migops suggest` needs from a live cluster: GPU nodes, pods that are not done, the MIG
settings, and DRA's claims, claim templates and device classes (resource.k8s.io/v1). The CLI and the
reconciler's `spec.suggest` read through this one function.

What is held stays bounded whatever users put on their pods: objects are listed in pages, each trimmed
to what suggest reads as it arrives (suggest/cluster.py), and only pods that matter are kept -- pending
pods that ask for GPU resources or DRA claims, up to `MAX_PENDING_PODS` (the rest counted and said),
and bound pods that hold GPU resources.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client as k8s
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from migops.api.objects import MigSettings
from migops.mig.gfd import GPU_RESOURCE, MIG_RESOURCE_PREFIX
from migops.suggest.cluster import MAX_POD_BYTES, is_pending, pod_resources, trim_node, trim_pod
from migops.suggest.run import Cluster

DRA_GROUP, DRA_VERSION = "resource.k8s.io", "v1"
# plural -> kind: a list's items carry no kind of their own
DRA_KINDS = {
    "resourceclaims": "ResourceClaim",
    "resourceclaimtemplates": "ResourceClaimTemplate",
    "deviceclasses": "DeviceClass",
}
PAGE = 100  # objects per list request: one page in memory at a time, each pod within the API server's size limit
MAX_PENDING_PODS = 10_000  # pending GPU pods read for one proposal; more are counted, not read
_NOT_DONE = "status.phase!=Succeeded,status.phase!=Failed"


def _pages(call: Callable[..., Any], *args: Any, **kwargs: Any) -> Iterator[dict[str, Any]]:
    """Every item of a list, a page at a time (the continue token of each response). Each item is let go
    once the caller has taken it, so no part of a page is held while the next one is read."""
    token = None
    while True:
        page = json.loads(
            call(*args, limit=PAGE, _continue=token, _preload_content=False, _request_timeout=60, **kwargs).data
        )
        token = (page.get("metadata") or {}).get("continue")
        items = page.get("items") or []
        del page
        items.reverse()
        while items:
            yield items.pop()
        if not token:
            return


def _dra(api: ApiClient, plural: str, keep: Callable[[dict[str, Any]], dict[str, Any] | None]) -> list[dict[str, Any]]:
    """The objects of one DRA kind that `keep` keeps, as it trims them; none where the API server does not
    serve resource.k8s.io/v1."""
    custom = k8s.CustomObjectsApi(api)
    items = []
    try:
        for item in _pages(custom.list_cluster_custom_object, DRA_GROUP, DRA_VERSION, plural):
            kept = keep(item)
            if kept is not None:
                kept["kind"] = DRA_KINDS[plural]
                items.append(kept)
    except ApiException as exc:
        if exc.status == 404:
            return []
        raise
    return items


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    return {k: meta[k] for k in ("name", "namespace") if k in meta}


def _whole(obj: dict[str, Any]) -> dict[str, Any]:
    """A template or a class: what it selects (its spec), without annotations and managedFields."""
    return {"metadata": _meta(obj), "spec": obj.get("spec") or {}}


@dataclass
class PodDigest:
    """The pods suggest needs, trimmed and bounded, as the pages arrive."""

    max_pending: int = MAX_PENDING_PODS
    pods: list[dict[str, Any]] = field(default_factory=list)
    pending: int = 0
    not_read: int = 0  # pending GPU pods past `max_pending`
    too_large: list[str] = field(default_factory=list)  # pending pods whose constraints exceed MAX_POD_BYTES
    claims: int = 0  # pending claims kept

    def claim(self, claim: dict[str, Any]) -> dict[str, Any] | None:
        """An allocated claim as the devices it holds; a pending one whole, within the same bound as pods."""
        allocation = (claim.get("status") or {}).get("allocation")
        if allocation:
            results = ((allocation.get("devices") or {}).get("results")) or []
            held = [{k: r.get(k) for k in ("driver", "pool", "device")} for r in results if isinstance(r, dict)]
            return {"metadata": _meta(claim), "status": {"allocation": {"devices": {"results": held}}}}
        if self.claims >= self.max_pending:
            self.not_read += 1
            return None
        self.claims += 1
        return _whole(claim)

    def add(self, pod: dict[str, Any]) -> None:
        trimmed = trim_pod(pod)
        wants = pod_resources(trimmed)
        gpu = any(k == GPU_RESOURCE or k.startswith(MIG_RESOURCE_PREFIX) for k in wants)
        if not is_pending(trimmed):
            if gpu and trimmed["spec"].get("nodeName"):
                self.pods.append(trimmed)  # what it holds is in use
            return
        if not gpu and not trimmed["spec"].get("resourceClaims"):
            return
        if self.pending >= self.max_pending:
            self.not_read += 1
            return
        if len(json.dumps(trimmed)) > MAX_POD_BYTES:
            meta = trimmed["metadata"]
            self.too_large.append(f"{meta.get('namespace', 'default')}/{meta.get('name', '')}")
            return
        self.pending += 1
        self.pods.append(trimmed)


def read_cluster(api: ApiClient, settings: MigSettings, max_pending: int | None = None) -> Cluster:
    """Raises ApiException / urllib3 errors as the client does; the caller says what it could not read.
    `max_pending`: pending GPU pods (and pending claims) read at most; MAX_PENDING_PODS by default."""
    max_pending = MAX_PENDING_PODS if max_pending is None else max_pending
    core = k8s.CoreV1Api(api)
    nodes = {str(n["metadata"]["name"]): n for n in map(trim_node, _pages(core.list_node))}
    digest = PodDigest(max_pending)
    for pod in _pages(core.list_pod_for_all_namespaces, field_selector=_NOT_DONE):
        digest.add(pod)
    return Cluster(
        nodes,
        digest.pods,
        settings,
        _dra(api, "resourceclaims", digest.claim),
        _dra(api, "resourceclaimtemplates", _whole),
        _dra(api, "deviceclasses", _whole),
        not_read=digest.not_read,
        too_large=tuple(digest.too_large),
        max_pending=max_pending,
    )

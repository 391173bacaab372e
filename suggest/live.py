"""Read what `migops suggest` needs from a live cluster: GPU nodes, pods that are not done, the MIG
settings, and DRA's claims, claim templates and device classes (resource.k8s.io/v1). The CLI and the
reconciler's `spec.suggest` read through this one function."""

from __future__ import annotations

import json
from typing import Any

from kubernetes import client as k8s
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from migops.kube.clusterpolicy import MigSettings
from migops.suggest.run import Cluster

DRA_GROUP, DRA_VERSION = "resource.k8s.io", "v1"
# plural -> kind: a list's items carry no kind of their own
DRA_KINDS = {
    "resourceclaims": "ResourceClaim",
    "resourceclaimtemplates": "ResourceClaimTemplate",
    "deviceclasses": "DeviceClass",
}


def _dra(api: ApiClient, plural: str) -> list[dict[str, Any]]:
    """Every object of one DRA kind; none where the API server does not serve resource.k8s.io/v1."""
    try:
        found = k8s.CustomObjectsApi(api).list_cluster_custom_object(
            DRA_GROUP, DRA_VERSION, plural, _request_timeout=60
        )
    except ApiException as exc:
        if exc.status == 404:
            return []
        raise
    items: list[dict[str, Any]] = found.get("items") or []
    for item in items:
        item.setdefault("kind", DRA_KINDS[plural])
    return items


def read_cluster(api: ApiClient, settings: MigSettings) -> Cluster:
    """Raises ApiException / urllib3 errors as the client does; the caller says what it could not read."""
    core = k8s.CoreV1Api(api)
    nodes = json.loads(core.list_node(_preload_content=False, _request_timeout=60).data)["items"]
    pods = json.loads(
        core.list_pod_for_all_namespaces(
            field_selector="status.phase!=Succeeded,status.phase!=Failed", _preload_content=False, _request_timeout=60
        ).data
    )["items"]
    return Cluster(
        {n["metadata"]["name"]: n for n in nodes},
        pods,
        settings,
        _dra(api, "resourceclaims"),
        _dra(api, "resourceclaimtemplates"),
        _dra(api, "deviceclasses"),
    )

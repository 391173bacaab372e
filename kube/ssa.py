"""Server-side apply of any object, and the raw REST paths it needs.

The typed API needs one method per kind; an apply body already says its apiVersion and kind, so one
function serves every kind migops writes. Bodies are plain dicts (the client's generated models changed
in v37; dicts did not), sent as `application/apply-patch+yaml` with a named field manager, so a manager
owns exactly the fields it sends (what it owns is read back by `migops.api.objects.owned_keys`): a label it stops sending is removed, fields owned by the GPU Operator,
Argo CD or Flux are never touched.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubernetes import client as k8s

from migops.api import objects

APPLY_CONTENT_TYPE = "application/apply-patch+yaml"

# Kinds whose plural is not `<kind lowercased>s`, and cluster-scoped kinds (everything else is namespaced).
_PLURALS = {"ClusterPolicy": "clusterpolicies", "Endpoints": "endpoints", "PodDisruptionBudget": "poddisruptionbudgets"}
_CLUSTER_SCOPED = frozenset(
    {
        "Node",
        "Namespace",
        "ClusterRole",
        "ClusterRoleBinding",
        "CustomResourceDefinition",
        "ClusterPolicy",
        "ValidatingWebhookConfiguration",
        "MutatingWebhookConfiguration",
        "PersistentVolume",
        "PriorityClass",
        "StorageClass",
        "APIService",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "ResourceSlice",
        "DeviceClass",
    }
)


def plural(kind: str) -> str:
    """The resource name of a kind, by the API machinery's rule (UnsafeGuessKindToResource):
    ...y -> ...ies (after a consonant), ...s/x/z/ch/sh -> ...es, else ...s."""
    if kind in _PLURALS:
        return _PLURALS[kind]
    lower = kind.lower()
    if lower.endswith("y") and lower[-2:-1] not in ("a", "e", "i", "o", "u"):
        return lower[:-1] + "ies"
    if lower.endswith(("s", "x", "z", "ch", "sh")):
        return lower + "es"
    return lower + "s"


def is_cluster_scoped(kind: str) -> bool:
    return kind in _CLUSTER_SCOPED


def object_path(api_version: str, kind: str, name: str | None = None, namespace: str | None = None) -> str:
    """The REST path of an object (or, without a name, of its collection)."""
    base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    if kind not in _CLUSTER_SCOPED:
        if not namespace:
            raise ValueError(f"{kind} is namespaced: metadata.namespace is required")
        base += f"/namespaces/{namespace}"
    path = f"{base}/{plural(kind)}"
    return f"{path}/{name}" if name else path


def apply(
    api: k8s.ApiClient,
    body: Mapping[str, Any],
    *,
    field_manager: str,
    force: bool = False,
    subresource: str | None = None,
    dry_run: bool = False,
    decode: bool = True,
    timeout: float | None = None,
) -> dict[str, Any]:
    """Apply `body` (apiVersion, kind, metadata.name[, namespace] and the fields this manager owns).

    `force` takes fields over from other managers (use it only for fields migops owns by contract);
    without it a conflict is a 409. `subresource="status"` applies the status. Raises ApiException.
    `decode=False` skips parsing the returned object (a Node is kilobytes of JSON; a controller that
    writes thousands of labels has no use for it) and returns {}.
    """
    meta = objects.meta(body)
    path = object_path(body["apiVersion"], body["kind"], meta["name"], meta.get("namespace"))
    if subresource:
        path += f"/{subresource}"
    query = [("fieldManager", field_manager)]
    if force:
        query.append(("force", "true"))
    if dry_run:
        query.append(("dryRun", "All"))
    result = api.call_api(
        path,
        "PATCH",
        query_params=query,
        body=dict(body),
        header_params={"Content-Type": APPLY_CONTENT_TYPE, "Accept": "application/json"},
        response_types_map={200: "object", 201: "object"},
        auth_settings=["BearerToken"],
        _return_http_data_only=True,
        _preload_content=decode,
        _request_timeout=timeout,
    )
    if not decode:
        result.drain_conn()  # read to the end, so the connection goes back to the pool for reuse
        result.release_conn()
        return {}
    decoded: dict[str, Any] = result
    return decoded

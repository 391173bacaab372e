"""migops.api.objects.owned_keys: what a field manager owns, read back from a real object's managedFields."""

from __future__ import annotations

from kubernetes import client as k8s
from kubernetes.client import ApiClient

from migops.api.objects import owned_keys
from migops.kube import ssa


def test_owned_keys_per_manager_and_subresource(admin: ApiClient, node: str) -> None:
    ssa.apply(
        admin,
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": node, "labels": {"a/x": "1", "a/y": "2"}, "annotations": {"a/n": "v"}},
        },
        field_manager="mgr-a",
    )
    ssa.apply(
        admin,
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node, "labels": {"b/z": "3"}}},
        field_manager="mgr-b",
    )
    ssa.apply(
        admin,
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": node},
            "status": {"capacity": {"example.com/dev": "2"}},
        },
        field_manager="mgr-a",
        subresource="status",
    )
    k8s.CoreV1Api(admin).patch_node(node, {"metadata": {"labels": {"c/w": "4"}}})  # an Update, not an Apply
    obj = admin.sanitize_for_serialization(k8s.CoreV1Api(admin).read_node(node))
    assert owned_keys(obj, "mgr-a", ("metadata", "labels")) == {"a/x", "a/y"}
    assert owned_keys(obj, "mgr-a", ("metadata", "annotations")) == {"a/n"}
    assert owned_keys(obj, "mgr-b", ("metadata", "labels")) == {"b/z"}
    assert owned_keys(obj, "mgr-a", ("status", "capacity"), subresource="status") == {"example.com/dev"}
    assert owned_keys(obj, "mgr-a", ("status", "capacity")) == set()  # the main resource owns none
    assert owned_keys(obj, "nobody", ("metadata", "labels")) == set()

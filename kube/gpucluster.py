"""The GPU Operator's GPUCluster (GPU Operator 26.7 and later): its API names and one read of which of
the operator's two stacks the cluster runs (docs/deploy-gpu-operator.md).

A GPUCluster (nvidia.com/v1alpha1, cluster scoped, one per cluster named `gpu-cluster`: its CRD's rule)
runs the DRA stack: NVIDIA's DRA driver, with no device plugin and no MIG Manager. The operator labels
the GPU nodes it runs the DRA driver on `nvidia.com/gpu.deploy.dra-driver` and removes the ClusterPolicy
stack's deploy labels from them (controllers/nodelabeling_controller.go, v26.7.0); a ClusterPolicy and a
GPUCluster may not both exist (the operator then reconciles neither and labels no node). Which nodes the
DRA stack owns is read from that label (migops.kube.owners), so a node is recognised from the Node alone;
this module reads the objects for what the whole cluster says: `migops status` and `migops inventory`.
The CRD is optional, as the ClusterPolicy's is: none installed reads as no GPUCluster.
"""

from __future__ import annotations

from typing import Any

from kubernetes import client as k8s

from migops.api.objects import GpuOperator
from migops.kube import clusterpolicy

GROUP, VERSION, PLURAL, KIND = "nvidia.com", "v1alpha1", "gpuclusters", "GPUCluster"
NAME = "gpu-cluster"  # the CRD admits no other name: one GPUCluster per cluster


def _items(api: k8s.ApiClient, group: str, version: str, plural: str) -> list[Any]:
    """Every object of a cluster-scoped kind; none when its CRD is not installed."""
    try:
        found = k8s.CustomObjectsApi(api).list_cluster_custom_object(group, version, plural)
    except k8s.exceptions.ApiException as exc:
        if exc.status == 404:
            return []
        raise
    return list(found.get("items") or ())


def read_operator(api: k8s.ApiClient) -> GpuOperator:
    """Two GETs (lists): the ClusterPolicies and the GPUClusters."""
    return GpuOperator.from_objects(
        _items(api, clusterpolicy.GROUP, clusterpolicy.VERSION, clusterpolicy.PLURAL),
        _items(api, GROUP, VERSION, PLURAL),
    )

"""Make a bare API server look like a cluster running the NVIDIA GPU Operator: its ClusterPolicy stack
(`seed`), or its DRA stack (`seed_gpu_cluster`: a GPUCluster, GPU Operator 26.7+).

Seeds GPU Nodes labelled as GPU Feature Discovery would label them (the label values come
from `migops.mig.gfd`, the only place that knows GPU and MIG rules), the labels the GPU Operator adds
to MIG-capable nodes, the ClusterPolicy CRD and a `cluster-policy` object with the chosen
MIG strategy, and the `gpu-operator` namespace.

Simulated nodes also carry the labels every kubelet sets when it registers its Node
(kubernetes.io/hostname, kubernetes.io/os, kubernetes.io/arch and their beta.* pair), so a nodes.yaml
that pins one node by hostname selects it here as on a real cluster.

Field managers mirror who owns what in a real cluster: the kubelet's labels belong to `kubelet`, GFD's
to `gpu-feature-discovery`, `nvidia.com/mig.config` and the deploy label to `gpu-operator`. A
migops reconciler that applies `nvidia.com/mig.config` therefore meets the same ownership
conflict it would meet on a real cluster.
"""

from __future__ import annotations

import platform
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from kubernetes import client as k8s
from kubernetes.client import ApiClient

from migops.api.names import (
    DEPLOY_DRA_DRIVER_LABEL,
    DEPLOY_LABEL_PREFIX,
    DEPLOY_MIG_MANAGER_LABEL,
    DEVICE_ID_LABEL,
    GPU_COUNT_LABEL,
    GPU_PRESENT_LABEL,
    GPU_RESOURCE,
    LOCAL_MANAGER,
    MIG_CAPABLE_LABEL,
    MIG_CONFIG_LABEL,
)
from migops.api.objects import DEFAULT_CONFIG, DEFAULT_CONFIG_NAME, DEFAULT_NAMESPACE
from migops.kube import clusterpolicy, crds, gpucluster
from migops.mig.catalogue import GpuModel
from migops.mig.gfd import node_labels_without_mig
from migops.mig.strategy import STRATEGIES, Strategy
from migops.mig.yamlsafe import load_yaml

APPLY = "application/apply-patch+yaml"
GFD_MANAGER = "gpu-feature-discovery"
KUBELET_MANAGER = "kubelet"
# Go's GOARCH for the machine the simulated nodes run on (the kubelet labels its node with it).
_GOARCH = {
    "x86_64": "amd64",
    "amd64": "amd64",
    "aarch64": "arm64",
    "arm64": "arm64",
    "ppc64le": "ppc64le",
    "s390x": "s390x",
}
OPERATOR_MANAGER = "gpu-operator"
OPERATOR_NAMESPACE = DEFAULT_NAMESPACE
CLUSTERPOLICY_API_VERSION = f"{clusterpolicy.GROUP}/{clusterpolicy.VERSION}"
CLUSTER_POLICY = "cluster-policy"
CRD_NAME = f"{clusterpolicy.PLURAL}.{clusterpolicy.GROUP}"
NODE_PREFIX = "gpu-node-"
NODE_RESOURCES = {"cpu": "128", "memory": "2Ti", "pods": "110", "ephemeral-storage": "1Ti"}
NOT_READY_TAINT = "node.kubernetes.io/not-ready"


@dataclass(frozen=True)
class NodeSpec:
    """A Node to seed: its name, GPU model and count, and the labels each owner applies."""

    name: str
    gpu: GpuModel  # a `migops.mig.catalogue` entry: migops.mig.gfd labels the node from all of it
    gpus: int
    gfd_labels: dict[str, str]
    operator_labels: dict[str, str]


def plan_nodes(count: int, gpus: Sequence[GpuModel], gpus_per_node: int, strategy: Strategy) -> list[NodeSpec]:
    """Nodes `gpu-node-1..count`; node i carries `gpus_per_node` GPUs of model gpus[i % len]."""
    if not gpus:
        raise ValueError("at least one GPU model is needed")
    return [plan_node(f"{NODE_PREFIX}{i + 1}", gpus[i % len(gpus)], gpus_per_node, strategy) for i in range(count)]


def plan_node(name: str, gpu: GpuModel, gpus: int, strategy: Strategy) -> NodeSpec:
    """One GPU node `name` with `gpus` GPUs of model `gpu`, labelled as GFD and the GPU Operator would."""
    gfd = dict(node_labels_without_mig(gpu, count=gpus, strategy=strategy))
    gfd[DEVICE_ID_LABEL] = gpu.device_id  # migops.mig.gfd sets it too; the issue requires it
    # The GPU Operator's node-labelling controller: only MIG-capable nodes get these.
    operator = (
        {MIG_CONFIG_LABEL: "all-disabled", DEPLOY_MIG_MANAGER_LABEL: "true"}
        if gfd.get(MIG_CAPABLE_LABEL) == "true"
        else {}
    )
    return NodeSpec(name, gpu, gpus, gfd, operator)


def seed(api: ApiClient, nodes: Sequence[NodeSpec], strategy: str) -> None:
    """Install everything, idempotently (server-side apply throughout)."""
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)}, not {strategy!r}")
    core = k8s.CoreV1Api(api)
    core.patch_namespace(
        OPERATOR_NAMESPACE,
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": OPERATOR_NAMESPACE}},
        field_manager=OPERATOR_MANAGER,
        _content_type=APPLY,
    )
    install_clusterpolicy_crd(api)
    apply_cluster_policy(api, strategy)
    for node in nodes:
        apply_node(api, node)


def kubelet_labels(name: str) -> dict[str, str]:
    """What a kubelet puts on the Node it registers (pkg/kubelet/kubelet_node_status.go, initialNode):
    its hostname (the node name here), GOOS and GOARCH, stable and beta."""
    arch = _GOARCH.get(platform.machine().lower(), platform.machine().lower())
    return {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": arch,
        "beta.kubernetes.io/os": "linux",
        "beta.kubernetes.io/arch": arch,
    }


def apply_node(api: ApiClient, node: NodeSpec) -> None:
    """Create/update a simulated Node: the kubelet's labels, GFD labels, operator labels, and
    `nvidia.com/gpu` capacity."""
    body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node.name, "labels": kubelet_labels(node.name)}}
    k8s.CoreV1Api(api).patch_node(node.name, body, field_manager=KUBELET_MANAGER, _content_type=APPLY)
    apply_labels(api, node)
    # What the device plugin would advertise for GPUs with MIG disabled: one per GPU.
    mark_ready(api, node.name, {GPU_RESOURCE: gpu_count(node)})


def gpu_count(node: NodeSpec) -> str:
    return node.gfd_labels.get(GPU_COUNT_LABEL, str(node.gpus))


def apply_labels(api: ApiClient, node: NodeSpec) -> None:
    """GFD's and the GPU Operator's labels, each under its own field manager (creates the Node if absent)."""
    core = k8s.CoreV1Api(api)
    for manager, labels in ((GFD_MANAGER, node.gfd_labels), (OPERATOR_MANAGER, node.operator_labels)):
        body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node.name, "labels": labels}}
        core.patch_node(node.name, body, field_manager=manager, _content_type=APPLY)


def apply_real_node(api: ApiClient, node: NodeSpec) -> None:
    """Label a Node its kubelet registered as a GPU node, and advertise `nvidia.com/gpu` in its capacity
    (the kubelet keeps extended resources others put there and derives allocatable from them on its next
    status update; allocatable is set too so the scheduler sees it at once). Its
    conditions stay the kubelet's."""
    apply_labels(api, node)
    k8s.CoreV1Api(api).patch_node_status(
        node.name,
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": node.name},
            "status": {"capacity": {GPU_RESOURCE: gpu_count(node)}, "allocatable": {GPU_RESOURCE: gpu_count(node)}},
        },
        field_manager=LOCAL_MANAGER,
        _content_type=APPLY,
    )


def mark_ready(api: ApiClient, name: str, extended: dict[str, str] | None = None) -> None:
    """Do for a Node what its kubelet and the node-lifecycle controller would: report CPU, memory
    and a pod budget (the scheduler places nothing on a node without `pods` allocatable), optional
    extended resources, a Ready condition (no controller runs here to flip it to Unknown; the
    message says the node is simulated), and lift the `not-ready` taint that the API server's
    TaintNodesByCondition admission puts on every new Node."""
    resources = {**NODE_RESOURCES, **(extended or {})}
    core = k8s.CoreV1Api(api)
    core.patch_node_status(
        name,
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name},
            "status": {
                "capacity": resources,
                "allocatable": resources,
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "Simulated",
                        "message": "migops local: no kubelet runs; this node is simulated",
                    }
                ],
            },
        },
        field_manager=LOCAL_MANAGER,
        _content_type=APPLY,
    )
    taints = core.read_node(name).spec.taints or []
    kept = [t.to_dict() for t in taints if t.key != NOT_READY_TAINT]
    if len(kept) != len(taints):
        core.patch_node(
            name,
            [{"op": "replace", "path": "/spec/taints", "value": kept}],
            _content_type="application/json-patch+json",
        )


def clusterpolicy_crd() -> dict[str, Any]:
    """The ClusterPolicy CRD shipped in local/data/."""
    text = resources.files("migops.local").joinpath("data/clusterpolicy-crd.yaml").read_text()
    return load_yaml(text)  # type: ignore[return-value]


def install_clusterpolicy_crd(api: ApiClient, *, timeout: float = 30.0) -> None:
    """Apply the CRD and wait until it is Established (before that, CRs are rejected)."""
    crds.install(api, [clusterpolicy_crd()], field_manager=OPERATOR_MANAGER, timeout=timeout)


def apply_cluster_policy(api: ApiClient, strategy: str) -> None:
    """The `cluster-policy` object with the MIG strategy and a default-enabled MIG manager."""
    body = {
        "apiVersion": CLUSTERPOLICY_API_VERSION,
        "kind": "ClusterPolicy",
        "metadata": {"name": CLUSTER_POLICY},
        "spec": {
            "mig": {"strategy": strategy},
            "migManager": {
                "enabled": True,
                # The image a GPU Operator install names (values.yaml); nothing pulls it here.
                "repository": "nvcr.io/nvidia/cloud-native",
                "image": "k8s-mig-manager",
                "version": "v0.15.0",
                "config": {"name": DEFAULT_CONFIG_NAME, "default": DEFAULT_CONFIG},
                "gpuClientsConfig": {"name": ""},
                "env": [{"name": "WITH_REBOOT", "value": "false"}],
            },
        },
    }
    objects = k8s.CustomObjectsApi(api)
    objects.patch_cluster_custom_object(
        clusterpolicy.GROUP,
        clusterpolicy.VERSION,
        clusterpolicy.PLURAL,
        CLUSTER_POLICY,
        body,
        field_manager=OPERATOR_MANAGER,
        _content_type=APPLY,
    )
    # What a healthy operator reports; tools that wait for the operator see it ready.
    objects.patch_cluster_custom_object_status(
        clusterpolicy.GROUP,
        clusterpolicy.VERSION,
        clusterpolicy.PLURAL,
        CLUSTER_POLICY,
        {
            "apiVersion": CLUSTERPOLICY_API_VERSION,
            "kind": "ClusterPolicy",
            "metadata": {"name": CLUSTER_POLICY},
            "status": {"state": "ready", "namespace": OPERATOR_NAMESPACE},
        },
        field_manager=OPERATOR_MANAGER,
        _content_type=APPLY,
    )


# ------------------------------------------------------------------------------------------ GPUCluster
GPUCLUSTER_API_VERSION = f"{gpucluster.GROUP}/{gpucluster.VERSION}"
# What the GPU Operator's node labelling puts on a GPU node under a GPUCluster (v26.7.0,
# controllers/state_manager.go gpuClusterStateLabels, and nvidia.com/gpu.present from NFD's PCI label). No
# GFD, device plugin or MIG Manager runs there: those deploy labels are swept, and no nvidia.com/gpu is
# advertised (the DRA driver publishes ResourceSlices instead).
NFD_NVIDIA_PCI_LABEL = "feature.node.kubernetes.io/pci-10de.present"
DRA_STACK_LABELS = {
    GPU_PRESENT_LABEL: "true",
    DEPLOY_LABEL_PREFIX + "driver": "true",
    DEPLOY_DRA_DRIVER_LABEL: "true",
    DEPLOY_LABEL_PREFIX + "dra-validator": "true",
    DEPLOY_LABEL_PREFIX + "dcgm-dra": "true",
    DEPLOY_LABEL_PREFIX + "dcgm-exporter-dra": "true",
}


def plan_dra_stack_node(name: str, gpu: GpuModel, gpus: int) -> NodeSpec:
    """A GPU node of a GPUCluster cluster: NFD's PCI label and the operator's DRA-stack labels only."""
    return NodeSpec(name, gpu, gpus, {NFD_NVIDIA_PCI_LABEL: "true"}, dict(DRA_STACK_LABELS))


def gpucluster_crd() -> dict[str, Any]:
    """The GPUCluster CRD shipped in local/data/ (a subset of NVIDIA's)."""
    text = resources.files("migops.local").joinpath("data/gpucluster-crd.yaml").read_text()
    return load_yaml(text)  # type: ignore[return-value]


def apply_gpu_cluster(api: ApiClient, *, dynamic_mig: bool = False, state: str = "ready") -> None:
    """The `gpu-cluster` object (NVIDIA's sample's DRA driver), with the status a healthy operator reports."""
    objects = k8s.CustomObjectsApi(api)
    head = {"apiVersion": GPUCLUSTER_API_VERSION, "kind": gpucluster.KIND, "metadata": {"name": gpucluster.NAME}}
    driver = {
        "repository": "registry.k8s.io/dra-driver-nvidia",
        "image": "dra-driver-nvidia-gpu",
        "version": "v0.5.0",
        "featureGates": {"DynamicMIG": dynamic_mig},
    }
    where = (gpucluster.GROUP, gpucluster.VERSION, gpucluster.PLURAL, gpucluster.NAME)
    objects.patch_cluster_custom_object(
        *where, {**head, "spec": {"draDriver": driver}}, field_manager=OPERATOR_MANAGER, _content_type=APPLY
    )
    status = {"state": state, "namespace": OPERATOR_NAMESPACE}
    objects.patch_cluster_custom_object_status(
        *where, {**head, "status": status}, field_manager=OPERATOR_MANAGER, _content_type=APPLY
    )


def seed_gpu_cluster(api: ApiClient, nodes: Sequence[NodeSpec], *, dynamic_mig: bool = False) -> None:
    """A cluster running the GPU Operator's DRA stack: the namespace, the GPUCluster CRD and `gpu-cluster`,
    and `nodes` (plan them with plan_dra_stack_node) labelled as the operator labels them. Idempotent."""
    core = k8s.CoreV1Api(api)
    core.patch_namespace(
        OPERATOR_NAMESPACE,
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": OPERATOR_NAMESPACE}},
        field_manager=OPERATOR_MANAGER,
        _content_type=APPLY,
    )
    crds.install(api, [gpucluster_crd()], field_manager=OPERATOR_MANAGER, timeout=30.0)
    apply_gpu_cluster(api, dynamic_mig=dynamic_mig)
    for node in nodes:
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": node.name, "labels": kubelet_labels(node.name)},
        }
        core.patch_node(node.name, body, field_manager=KUBELET_MANAGER, _content_type=APPLY)
        apply_labels(api, node)
        mark_ready(api, node.name)


def delete_gpu_cluster(api: ApiClient) -> None:
    """Remove `gpu-cluster` (the CRD stays, as the operator's chart keeps it); absent is fine."""
    try:
        k8s.CustomObjectsApi(api).delete_cluster_custom_object(
            gpucluster.GROUP, gpucluster.VERSION, gpucluster.PLURAL, gpucluster.NAME
        )
    except k8s.exceptions.ApiException as exc:
        if exc.status != 404:
            raise

"""The real kube-scheduler places Pods that request MIG resources by the nodes' allocatable resources.

No kubelet runs: a bound Pod is never executed, but the binding, the scheduler's own accounting of
what is left on a node, and its reasons for leaving a Pod Pending are the scheduler's, not ours.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest
from kubernetes import client as k8s
from kubernetes.client import ApiClient
from polling import until

from migops.kube import ssa
from migops.local.cluster import mark_ready
from migops.local.controlplane import ControlPlane


@pytest.fixture(scope="session")
def scheduler(control_plane: ControlPlane) -> ControlPlane:
    control_plane.start_scheduler()
    return control_plane


@pytest.fixture
def mig_node(admin: ApiClient, scheduler: ControlPlane) -> Iterator[Callable[[dict[str, str], dict[str, str]], str]]:
    """`mig_node(resources, labels)`: a Ready node advertising these extended resources."""
    core = k8s.CoreV1Api(admin)
    made: list[str] = []

    def make(resources: dict[str, str], labels: dict[str, str] | None = None) -> str:
        name = f"sched-{uuid.uuid4().hex[:8]}"
        ssa.apply(
            admin,
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels or {}}},
            field_manager="test",
        )
        mark_ready(admin, name, resources)
        made.append(name)
        return name

    yield make
    for name in made:
        core.delete_node(name)


def _pod(name: str, resources: dict[str, str], selector: dict[str, str] | None = None) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "containers": [
                {
                    "name": "cuda",
                    "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04",
                    "command": ["nvidia-smi", "-L"],
                    "resources": {"limits": resources},
                }
            ],
            "nodeSelector": selector or {},
            "restartPolicy": "Never",
        },
    }


def test_a_pod_lands_on_the_node_with_the_profile_and_uses_it_up(admin: ApiClient, namespace: str, mig_node) -> None:
    core = k8s.CoreV1Api(admin)
    big = mig_node({"nvidia.com/mig-3g.40gb": "1", "nvidia.com/mig-1g.10gb": "2"})
    mig_node({"nvidia.com/mig-1g.10gb": "7"})  # has no 3g.40gb: never chosen for it
    core.create_namespaced_pod(namespace, _pod("first", {"nvidia.com/mig-3g.40gb": "1"}))
    bound = until(lambda: core.read_namespaced_pod("first", namespace).spec.node_name)
    assert bound == big
    # The node's one 3g.40gb instance is taken: a second pod asking for it waits, with the scheduler's reason.
    core.create_namespaced_pod(namespace, _pod("second", {"nvidia.com/mig-3g.40gb": "1"}))

    def reason() -> str:
        events = core.list_namespaced_event(namespace, field_selector="involvedObject.name=second").items
        return next((e.message for e in events if e.reason == "FailedScheduling"), "")

    message = until(reason)
    assert "Insufficient nvidia.com/mig-3g.40gb" in message
    assert core.read_namespaced_pod("second", namespace).spec.node_name is None


def test_single_strategy_pod_goes_where_the_product_label_says(admin: ApiClient, namespace: str, mig_node) -> None:
    core = k8s.CoreV1Api(admin)
    mig_node({"nvidia.com/gpu": "8"}, {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"})
    sliced = mig_node({"nvidia.com/gpu": "14"}, {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb"})
    core.create_namespaced_pod(
        namespace,
        _pod("single", {"nvidia.com/gpu": "1"}, {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb"}),
    )
    assert until(lambda: core.read_namespaced_pod("single", namespace).spec.node_name) == sliced

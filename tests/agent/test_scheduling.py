"""MIG workloads end to end: the simulated agents publish what the GPUs hold, the real kube-scheduler
binds Pods by it (issue: MIG workloads in the local cluster).

No kubelet runs, so a bound Pod is never executed; what is real is the binding, the scheduler's own
accounting of what a node has left, and its reason for leaving a Pod Pending. Nodes are seeded as
`migops local` seeds them (schedulable: pods allocatable, no not-ready taint).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from agent_harness import allocatable, annotations, labels, set_config, set_strategy, state, until
from kubernetes import client as k8s
from kubernetes.client import ApiClient

from migops.local.controlplane import ControlPlane


@pytest.fixture(scope="module")
def scheduled(agent_plane: ControlPlane) -> ControlPlane:
    agent_plane.start_scheduler()
    return agent_plane


@pytest.fixture
def workloads(agent_admin: ApiClient) -> Iterator[str]:
    name = f"mig-workloads-{uuid.uuid4().hex[:6]}"
    core = k8s.CoreV1Api(agent_admin)
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name)


def _pod(name: str, limits: dict[str, str], selector: dict[str, str] | None = None) -> dict:
    """The GPU Operator documentation's verification workload: a CUDA container listing its devices."""
    return {
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": selector or {},
            "containers": [
                {
                    "name": "cuda",
                    "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04",
                    "command": ["nvidia-smi", "-L"],
                    "resources": {"limits": limits},
                }
            ],
        },
    }


def _bound(api: ApiClient, ns: str, name: str) -> str:
    return until(lambda: k8s.CoreV1Api(api).read_namespaced_pod(name, ns).spec.node_name, 60, f"{name} bound")


def _unschedulable(api: ApiClient, ns: str, name: str) -> str:
    """The scheduler's FailedScheduling message for a Pod it cannot place."""

    def message() -> str:
        events = k8s.CoreV1Api(api).list_namespaced_event(ns, field_selector=f"involvedObject.name={name}").items
        return next((e.message for e in events if e.reason == "FailedScheduling"), "")

    found = until(message, 60, f"{name} reported unschedulable")
    assert k8s.CoreV1Api(api).read_namespaced_pod(name, ns).spec.node_name is None
    return found


def _applied(api: ApiClient, node: str, config: str) -> None:
    until(
        lambda: state(api, node) == "success" and annotations(api, node).get("migops.io/mig.config.applied") == config,
        120,
        f"{node} applied {config}",
    )


def test_mixed_pods_land_where_the_profile_is_and_wait_when_it_is_used_up_or_gone(
    scheduled: ControlPlane, agent_admin: ApiClient, agents, workloads: str
) -> None:
    core = k8s.CoreV1Api(agent_admin)
    balanced, small = agents("sched-balanced", "1x0x233010DE"), agents("sched-small", "1x0x233010DE")
    set_config(agent_admin, balanced.node, "all-balanced")
    set_config(agent_admin, small.node, "all-1g.10gb")
    _applied(agent_admin, balanced.node, "all-balanced")
    _applied(agent_admin, small.node, "all-1g.10gb")
    assert allocatable(agent_admin, balanced.node)["nvidia.com/mig-3g.40gb"] == "1"
    assert "nvidia.com/mig-3g.40gb" not in allocatable(agent_admin, small.node)

    core.create_namespaced_pod(workloads, _pod("mig-3g-a", {"nvidia.com/mig-3g.40gb": "1"}))
    assert _bound(agent_admin, workloads, "mig-3g-a") == balanced.node
    # The node's one 3g.40gb instance is taken now (the scheduler's own accounting, no kubelet needed).
    core.create_namespaced_pod(workloads, _pod("mig-3g-b", {"nvidia.com/mig-3g.40gb": "1"}))
    assert "Insufficient nvidia.com/mig-3g.40gb" in _unschedulable(agent_admin, workloads, "mig-3g-b")
    core.create_namespaced_pod(workloads, _pod("mig-1g", {"nvidia.com/mig-1g.10gb": "5"}))
    assert _bound(agent_admin, workloads, "mig-1g") == small.node  # only the 7 x 1g.10gb node has five

    # Reconfigure the balanced node without its 3g.40gb: new pods asking for it wait, and the node says why.
    core.delete_namespaced_pod("mig-3g-a", workloads)
    core.delete_namespaced_pod("mig-3g-b", workloads)
    set_config(agent_admin, balanced.node, "all-1g.10gb")
    _applied(agent_admin, balanced.node, "all-1g.10gb")
    core.create_namespaced_pod(workloads, _pod("mig-3g-c", {"nvidia.com/mig-3g.40gb": "1"}))
    assert "Insufficient nvidia.com/mig-3g.40gb" in _unschedulable(agent_admin, workloads, "mig-3g-c")
    got = labels(agent_admin, balanced.node)
    assert got["nvidia.com/mig.config"] == "all-1g.10gb" and "nvidia.com/mig-3g.40gb.count" not in got
    assert "3g.40gb" not in annotations(agent_admin, balanced.node)["migops.io/mig.layout"]


def test_single_strategy_pod_goes_to_the_node_whose_product_names_the_profile(
    scheduled: ControlPlane, agent_admin: ApiClient, agents, workloads: str
) -> None:
    core = k8s.CoreV1Api(agent_admin)
    set_strategy(agent_admin, "single")
    try:
        whole, sliced = agents("sched-whole", "2x0x233010DE"), agents("sched-sliced", "2x0x233010DE")
        set_config(agent_admin, whole.node, "all-disabled")
        set_config(agent_admin, sliced.node, "all-1g.10gb")
        _applied(agent_admin, whole.node, "all-disabled")
        _applied(agent_admin, sliced.node, "all-1g.10gb")
        until(
            lambda: (
                labels(agent_admin, sliced.node).get("nvidia.com/gpu.product") == "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb"
            ),
            60,
            "single-strategy product label",
        )
        assert allocatable(agent_admin, sliced.node) == {"nvidia.com/gpu": "14"}
        selector = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb"}
        core.create_namespaced_pod(workloads, _pod("single-1g", {"nvidia.com/gpu": "1"}, selector))
        assert _bound(agent_admin, workloads, "single-1g") == sliced.node
    finally:
        set_strategy(agent_admin, "mixed")


@pytest.fixture
def webhook(agent_plane: ControlPlane, agent_admin: ApiClient, tmp_path) -> Iterator[None]:
    """The migops admission webhook registered with this plane for one test (the other agent tests label
    nodes with invalid configs on purpose, which it would deny)."""
    from migops.local import webhook as local_webhook
    from migops.local.process import stop
    from migops.webhook.registration import unregister

    hook = local_webhook.start(agent_admin, tmp_path, agent_plane.admin_kubeconfig, log=tmp_path / "webhook.log")
    try:
        yield
    finally:
        unregister(agent_admin)
        stop(hook.ref, popen=hook.popen)


def test_single_strategy_mixed_style_pod_is_denied_or_translated_where_opted_in(
    scheduled: ControlPlane, agent_admin: ApiClient, agents, webhook
) -> None:
    core = k8s.CoreV1Api(agent_admin)
    set_strategy(agent_admin, "single")
    plain, opted = (f"mig-single-{uuid.uuid4().hex[:6]}" for _ in range(2))
    try:
        sliced = agents("sched-single", "2x0x233010DE")
        set_config(agent_admin, sliced.node, "all-1g.10gb")
        _applied(agent_admin, sliced.node, "all-1g.10gb")
        core.create_namespace({"metadata": {"name": plain}})
        core.create_namespace({"metadata": {"name": opted, "labels": {"migops.io/mig-translate": "single"}}})
        mixed_style = _pod("mixed-style", {"nvidia.com/mig-1g.10gb": "1"})
        # Written for mixed, run under single: the device plugin would never satisfy it. Denied, saying why.
        with pytest.raises(k8s.exceptions.ApiException) as denied:
            core.create_namespaced_pod(plain, mixed_style)
        assert denied.value.status in (400, 403, 422)
        assert "nvidia.com/gpu" in denied.value.body and "single" in denied.value.body
        # Where the namespace opted in, the webhook rewrites it to what single advertises, and it is bound.
        core.create_namespaced_pod(opted, mixed_style)
        pod = core.read_namespaced_pod("mixed-style", opted)
        assert pod.spec.containers[0].resources.limits == {"nvidia.com/gpu": "1"}
        assert pod.spec.node_selector == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb"}
        assert _bound(agent_admin, opted, "mixed-style") == sliced.node
    finally:
        set_strategy(agent_admin, "mixed")
        for ns in (plain, opted):
            try:
                core.delete_namespace(ns)
            except k8s.exceptions.ApiException:
                pass

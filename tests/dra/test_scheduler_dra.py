"""The real kube-scheduler (v1.37, resource.k8s.io/v1) allocates ResourceClaims for MIG devices from the
ResourceSlices the agent publishes in the NVIDIA DRA driver's contract, and the agent's verification of
the node's slices after a geometry change.

No kubelet runs: the scheduler allocates the claim and binds the Pod, which is never executed.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator

import pytest
from kubernetes import client as k8s
from kubernetes.client import ApiClient
from pending_claims import pending_demand, scheduler_verdict
from polling import until

from migops.agent.backend import Device, GpuInstance, GpuState
from migops.agent.dra import DraOptions, DraSlices, devices_for, difference, expected, listed, slice_name
from migops.kube import ssa
from migops.local.cluster import mark_ready
from migops.local.controlplane import ControlPlane
from migops.mig import dra
from migops.mig.catalogue import catalogue

pytestmark = pytest.mark.cluster

A100 = catalogue().by_device_id("0x20B210DE")  # A100-SXM4-80GB
assert A100 is not None
GI = {gi.name: gi for gi in A100.profiles}


def _state(index: int, layout: list[tuple[str, int]]) -> GpuState:
    return GpuState(
        index,
        True,
        True,
        tuple(GpuInstance(i + 1, p, start, GI[p].memory_slices) for i, (p, start) in enumerate(layout)),
    )


ALL_1G = [("1g.10gb", s) for s in range(7)]
TWO_3G = [("3g.40gb", 0), ("3g.40gb", 4)]


@pytest.fixture(scope="module")
def scheduler(control_plane: ControlPlane, admin: ApiClient) -> Iterator[ControlPlane]:
    """kube-scheduler, and the DeviceClasses of the driver's MIG devices per A100-80GB profile (removed after)."""
    control_plane.start_scheduler()
    classes = dra.profile_device_classes([A100])
    for body in classes:
        ssa.apply(admin, body, field_manager="test", force=True)
    yield control_plane
    custom = k8s.CustomObjectsApi(admin)
    for body in classes:
        custom.delete_cluster_custom_object("resource.k8s.io", "v1", "deviceclasses", body["metadata"]["name"])


@pytest.fixture
def dra_node(admin: ApiClient, scheduler: ControlPlane) -> Iterator[str]:
    name = f"dra-{uuid.uuid4().hex[:8]}"
    ssa.apply(admin, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}, field_manager="test")
    mark_ready(admin, name, {})
    yield name
    custom = k8s.CustomObjectsApi(admin)
    try:
        custom.delete_cluster_custom_object("resource.k8s.io", "v1", "resourceslices", slice_name(name))
    except k8s.exceptions.ApiException as exc:
        if exc.status != 404:
            raise
    k8s.CoreV1Api(admin).delete_node(name)


def _claim(name: str, device_class: str) -> dict:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {"devices": {"requests": [{"name": "mig", "exactly": {"deviceClassName": device_class}}]}},
    }


def _pod(name: str, claim: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "containers": [{"name": "cuda", "image": "cuda", "resources": {"claims": [{"name": "mig"}]}}],
            "resourceClaims": [{"name": "mig", "resourceClaimName": claim}],
            "restartPolicy": "Never",
        },
    }


def test_claim_waits_for_the_geometry_then_the_scheduler_allocates_it(
    admin: ApiClient, namespace: str, dra_node: str
) -> None:
    custom = k8s.CustomObjectsApi(admin)
    core = k8s.CoreV1Api(admin)
    gpu = Device(0, A100.device_id, f"GPU-{uuid.uuid4()}")
    slices = DraSlices(admin, dra_node, DraOptions("publish", timeout=20, interval=0.2))
    assert slices.after_apply([gpu], [A100], [_state(0, ALL_1G)]) is None  # published, and read back equal

    # A claim for 3g.40gb on a node configured all-1g.10gb: pending, and counted as demand.
    body = _claim("big", "mig-3g.40gb.nvidia.com")
    custom.create_namespaced_custom_object("resource.k8s.io", "v1", namespace, "resourceclaims", body)
    core.create_namespaced_pod(namespace, _pod("p", "big"))

    why = scheduler_verdict(core, namespace, "p")
    assert "claim" in why.lower(), why
    (demand,) = pending_demand(custom, namespace)
    assert demand.profiles == {"3g.40gb"} and demand.count == 1

    # The geometry changes (the agent applied all-3g.40gb): the slice follows, and the scheduler allocates.
    assert slices.after_apply([gpu], [A100], [_state(0, TWO_3G)]) is None
    node = until(lambda: core.read_namespaced_pod("p", namespace).spec.node_name)
    assert node == dra_node
    claim = custom.get_namespaced_custom_object("resource.k8s.io", "v1", namespace, "resourceclaims", "big")
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    assert result["driver"] == dra.DRIVER and result["pool"] == dra_node
    assert result["device"] in {"gpu-0-mig-3g40gb-9-0", "gpu-0-mig-3g40gb-9-4"}
    assert pending_demand(custom, namespace) == []  # allocated: no longer demand


def test_a_slice_that_does_not_follow_the_gpus_is_a_reported_failure(admin: ApiClient, dra_node: str) -> None:
    gpu = Device(0, A100.device_id, f"GPU-{uuid.uuid4()}")
    publisher = DraSlices(admin, dra_node, DraOptions("publish", timeout=5, interval=0.2))
    assert publisher.after_apply([gpu], [A100], [_state(0, ALL_1G)]) is None
    # Verify mode with no plugin pod on the node: said so, not waited out in silence.
    verifier = DraSlices(admin, dra_node, DraOptions("verify", timeout=1, interval=0.2))
    problem = verifier.after_apply([gpu], [A100], [_state(0, TWO_3G)])
    assert problem is not None and "no DRA kubelet plugin pod" in problem
    # The slices still list the old geometry: the difference is named.
    slices = custom_slices(admin, dra_node)
    diff = difference(expected([gpu], [_state(0, TWO_3G)]), listed(slices, dra_node))
    assert diff is not None and "missing 3g.40gb@0, 3g.40gb@4" in diff and "stale 1g.10gb@0" in diff
    # And the devices published are the driver's: one per instance, named as the driver names them.
    names = [d["name"] for d in devices_for([gpu], [A100], [_state(0, ALL_1G)])]
    assert names == [f"gpu-0-mig-1g10gb-19-{s}" for s in range(7)]


def custom_slices(admin: ApiClient, node: str) -> list[dict]:
    found = k8s.CustomObjectsApi(admin).list_cluster_custom_object(
        "resource.k8s.io", "v1", "resourceslices", field_selector=f"spec.nodeName={node}"
    )
    return list(found["items"])


def _plugin_pod(core: k8s.CoreV1Api, namespace: str, node: str) -> str:
    """A pod standing for the driver's kubelet plugin on `node` (bound by nodeName; no kubelet runs it)."""
    name = "dra-kubelet-plugin"
    core.create_namespaced_pod(
        namespace,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "labels": {"dra-driver-nvidia-gpu-component": "kubelet-plugin"}},
            "spec": {"nodeName": node, "containers": [{"name": "plugin", "image": "plugin"}]},
        },
    )
    return name


def test_verify_restarts_the_plugin_and_waits_for_its_slices(admin: ApiClient, namespace: str, dra_node: str) -> None:
    """The driver's side is played by a thread: when its plugin pod is deleted (the agent's restart), it
    publishes the slice of the new geometry, as the restarted kubelet plugin would."""
    core = k8s.CoreV1Api(admin)
    gpu = Device(0, A100.device_id, f"GPU-{uuid.uuid4()}")
    driver = DraSlices(admin, dra_node, DraOptions("publish", timeout=5, interval=0.2))
    assert driver.after_apply([gpu], [A100], [_state(0, ALL_1G)]) is None
    pod = _plugin_pod(core, namespace, dra_node)
    stop = threading.Event()

    def restarted_plugin() -> None:
        while not stop.wait(0.2):
            if core.read_namespaced_pod(pod, namespace).metadata.deletion_timestamp:
                driver.publish(devices_for([gpu], [A100], [_state(0, TWO_3G)]))
                return

    helper = threading.Thread(target=restarted_plugin, daemon=True)
    helper.start()
    try:
        agent = DraSlices(admin, dra_node, DraOptions("verify", plugin_namespace=namespace, timeout=30, interval=0.2))
        assert agent.after_apply([gpu], [A100], [_state(0, TWO_3G)]) is None
    finally:
        stop.set()
        helper.join(5)
        core.delete_namespaced_pod(pod, namespace, grace_period_seconds=0)
    # A plugin that restarts but keeps advertising the old instances: a failure naming the difference.
    pod = _plugin_pod(core, namespace, dra_node)
    try:
        agent = DraSlices(admin, dra_node, DraOptions("verify", plugin_namespace=namespace, timeout=1, interval=0.2))
        problem = agent.after_apply([gpu], [A100], [_state(0, ALL_1G)])
        assert problem is not None and "missing 1g.10gb@0" in problem and "stale 3g.40gb@0, 3g.40gb@4" in problem
        assert core.read_namespaced_pod(pod, namespace).metadata.deletion_timestamp  # it was restarted
    finally:
        core.delete_namespaced_pod(pod, namespace, grace_period_seconds=0)

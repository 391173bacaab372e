"""A pod waiting for its ResourceClaim, as the tests on a real scheduler read it."""

from __future__ import annotations

from kubernetes import client as k8s
from polling import until

from migops.mig import dra

RG = ("resource.k8s.io", "v1")


def scheduler_verdict(core: k8s.CoreV1Api, namespace: str, pod: str, timeout: float = 60) -> str:
    """The scheduler's PodScheduled=False message for `pod`, once it has one; the pod must not be bound
    meanwhile (no device fits its claim)."""

    def verdict() -> str:
        p = core.read_namespaced_pod(pod, namespace)
        assert not p.spec.node_name, f"{namespace}/{pod} bound with no device for its claim"
        conds = [c for c in p.status.conditions or [] if c.type == "PodScheduled" and c.status == "False"]
        return conds[0].message if conds else ""

    return until(verdict, timeout, "the scheduler's verdict")


def pending_demand(custom: k8s.CustomObjectsApi, namespace: str) -> list[dra.ClaimDemand]:
    """What the namespace's pending claims ask for, judged with the cluster's DeviceClasses."""
    classes = {c["metadata"]["name"]: c for c in custom.list_cluster_custom_object(*RG, "deviceclasses")["items"]}
    claims = custom.list_namespaced_custom_object(*RG, namespace, "resourceclaims")["items"]
    return list(dra.pending_demand(claims, classes))

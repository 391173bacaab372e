"""A pod waiting for its ResourceClaim, as the tests on a real scheduler read it."""

from __future__ import annotations

from kubernetes import client as k8s
from polling import until

from migops.mig import dra

RG = ("resource.k8s.io", "v1")


def claim_and_pod(
    core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, namespace: str, profile: str, node: str = ""
) -> None:
    """A claim `big` for one `profile` device (its class `mig-<profile>.nvidia.com`) and a pod `train`
    that needs it, pinned to `node` when one is given."""
    request = {"name": "mig", "exactly": {"deviceClassName": f"mig-{profile}.nvidia.com"}}
    claim = {"kind": "ResourceClaim", "metadata": {"name": "big"}, "spec": {"devices": {"requests": [request]}}}
    custom.create_namespaced_custom_object(*RG, namespace, "resourceclaims", {"apiVersion": "/".join(RG), **claim})
    spec: dict = {
        "containers": [{"name": "cuda", "image": "cuda", "resources": {"claims": [{"name": "mig"}]}}],
        "resourceClaims": [{"name": "mig", "resourceClaimName": "big"}],
    }
    if node:
        term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
        spec["affinity"] = {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}
        }
    core.create_namespaced_pod(
        namespace, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "train"}, "spec": spec}
    )


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

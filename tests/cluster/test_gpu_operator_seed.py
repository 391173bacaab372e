"""The seeded cluster looks like one running the GPU Operator, with GFD-labelled GPU nodes."""

from __future__ import annotations

import dataclasses
import json

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from migops.local import cluster
from migops.mig.catalogue import catalogue
from migops.mig.gfd import DEVICE_ID_LABEL, MIG_CONFIG_LABEL, node_labels_without_mig

H100 = "0x233010DE"
A100 = "NVIDIA-A100-SXM4-40GB"


def test_plan_cycles_gpu_models_over_nodes() -> None:
    gpus = [catalogue().resolve(H100), catalogue().resolve(A100)]
    nodes = cluster.plan_nodes(3, gpus, 4, "mixed")
    assert [n.name for n in nodes] == ["gpu-node-1", "gpu-node-2", "gpu-node-3"]
    assert [n.gfd_labels[DEVICE_ID_LABEL] for n in nodes] == [H100, "0x20B010DE", H100]
    assert nodes[1].gfd_labels["nvidia.com/gpu.product"] == A100
    assert all(n.gfd_labels["nvidia.com/gpu.count"] == "4" for n in nodes)
    assert nodes[0].operator_labels == {MIG_CONFIG_LABEL: "all-disabled", "nvidia.com/gpu.deploy.mig-manager": "true"}


def test_seeded_cluster_has_policy_crd_and_labelled_nodes(admin) -> None:
    gpus = [catalogue().resolve(H100)]
    # Names outside gpu-node-N so other tests' nodes and this test's seed cannot collide.
    nodes = [dataclasses.replace(n, name=f"seed-{n.name}") for n in cluster.plan_nodes(2, gpus, 8, "single")]
    cluster.seed(admin, nodes, "single")
    cluster.seed(admin, nodes, "single")  # idempotent

    crd = k8s.ApiextensionsV1Api(admin).read_custom_resource_definition("clusterpolicies.nvidia.com")
    assert crd.spec.scope == "Cluster"
    assert [v.name for v in crd.spec.versions] == ["v1"]
    policy = k8s.CustomObjectsApi(admin).get_cluster_custom_object(
        "nvidia.com", "v1", "clusterpolicies", "cluster-policy"
    )
    assert policy["spec"]["mig"]["strategy"] == "single"
    assert policy["spec"]["migManager"]["config"]["default"] == "all-disabled"
    assert policy["status"] == {"state": "ready", "namespace": "gpu-operator"}

    core = k8s.CoreV1Api(admin)
    expected = node_labels_without_mig(gpus[0], count=8, strategy="single")
    for spec in nodes:
        node = core.read_node(spec.name)
        labels = node.metadata.labels
        assert {k: labels[k] for k in expected} == expected
        assert labels[DEVICE_ID_LABEL] == H100
        assert labels[MIG_CONFIG_LABEL] == "all-disabled"
        assert labels["nvidia.com/gpu.deploy.mig-manager"] == "true"
        assert node.status.capacity["nvidia.com/gpu"] == "8"
        managers = {e.manager for e in node.metadata.managed_fields}
        assert {"gpu-feature-discovery", "gpu-operator"} <= managers
    core.read_namespace("gpu-operator")

    # Switching strategy re-applies the policy; the schema's enum is enforced by the server.
    cluster.apply_cluster_policy(admin, "mixed")
    assert (
        k8s.CustomObjectsApi(admin).get_cluster_custom_object("nvidia.com", "v1", "clusterpolicies", "cluster-policy")[
            "spec"
        ]["mig"]["strategy"]
        == "mixed"
    )
    with pytest.raises(ApiException) as err:
        k8s.CustomObjectsApi(admin).patch_cluster_custom_object(
            "nvidia.com",
            "v1",
            "clusterpolicies",
            "cluster-policy",
            {
                "apiVersion": "nvidia.com/v1",
                "kind": "ClusterPolicy",
                "metadata": {"name": "cluster-policy"},
                "spec": {"mig": {"strategy": "sometimes"}},
            },
            field_manager="gpu-operator",
            _content_type=cluster.APPLY,
        )
    assert err.value.status == 422
    assert "sometimes" in err.value.body
    cluster.apply_cluster_policy(admin, "single")
    for spec in nodes:
        core.delete_node(spec.name)


def test_a_migops_reconciler_meets_the_operators_ownership_of_mig_config(admin, node) -> None:
    """As on a real cluster: the operator owns nvidia.com/mig.config, so a non-forced apply by
    another manager conflicts (409) and a forced one takes the field over."""
    spec = cluster.plan_nodes(1, [catalogue().resolve(H100)], 8, "single")[0]
    cluster.apply_node(admin, dataclasses.replace(spec, name=node))
    core = k8s.CoreV1Api(admin)
    body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node, "labels": {MIG_CONFIG_LABEL: "all-1g.10gb"}}}
    with pytest.raises(ApiException) as err:
        core.patch_node(node, body, field_manager="migops", _content_type=cluster.APPLY)
    assert err.value.status == 409
    core.patch_node(node, body, field_manager="migops", force=True, _content_type=cluster.APPLY)
    assert core.read_node(node).metadata.labels[MIG_CONFIG_LABEL] == "all-1g.10gb"


def test_a_gpucluster_cluster_is_seeded_and_recognised(admin, control_plane, capsys, tmp_path) -> None:
    """GPU Operator 26.7's DRA stack: the GPUCluster CRD and `gpu-cluster`, GPU nodes labelled as its node
    labelling labels them (no GFD, no MIG Manager, no nvidia.com/gpu); `migops status` and `migops inventory`
    read it, and report it beside the ClusterPolicy (which the operator refuses)."""
    from migops.api.names import DEPLOY_DRA_DRIVER_LABEL
    from migops.cli import main
    from migops.reconciler.status import install_crd

    gpus = catalogue().resolve(H100)
    nodes = [cluster.plan_dra_stack_node(f"seed-dra-{i}", gpus, 8) for i in (1, 2)]
    cluster.seed_gpu_cluster(admin, nodes, dynamic_mig=True)
    cluster.seed_gpu_cluster(admin, nodes, dynamic_mig=True)  # idempotent
    objects = k8s.CustomObjectsApi(admin)
    core = k8s.CoreV1Api(admin)
    try:
        found = objects.get_cluster_custom_object("nvidia.com", "v1alpha1", "gpuclusters", "gpu-cluster")
        assert found["spec"]["draDriver"]["featureGates"] == {"DynamicMIG": True}
        assert found["status"]["state"] == "ready"
        with pytest.raises(ApiException) as err:  # the CRD's rule: one GPUCluster, named gpu-cluster
            objects.create_cluster_custom_object(
                "nvidia.com",
                "v1alpha1",
                "gpuclusters",
                {
                    "apiVersion": "nvidia.com/v1alpha1",
                    "kind": "GPUCluster",
                    "metadata": {"name": "second"},
                    "spec": {"draDriver": {}},
                },
            )
        assert err.value.status == 422 and "singleton" in err.value.body
        for spec in nodes:
            node = core.read_node(spec.name)
            assert node.metadata.labels[DEPLOY_DRA_DRIVER_LABEL] == "true"
            assert MIG_CONFIG_LABEL not in node.metadata.labels
            assert "nvidia.com/gpu.deploy.mig-manager" not in node.metadata.labels
            assert "nvidia.com/gpu" not in (node.status.capacity or {})

        # Both stacks declared: the ClusterPolicy as the seed writes it.
        cluster.install_clusterpolicy_crd(admin)
        cluster.apply_cluster_policy(admin, "single")
        install_crd(admin, field_manager="migops-test")
        kubeconfig = str(control_plane.admin_kubeconfig)
        main(["status", "-A", "--kubeconfig", kubeconfig])
        out = capsys.readouterr().out
        assert "GPU Operator: GPUCluster gpu-cluster (the DRA stack: NVIDIA's DRA driver, DynamicMIG on, ready)" in out
        assert "warning: both ClusterPolicy cluster-policy and GPUCluster gpu-cluster exist" in out
        main(["status", "-A", "--kubeconfig", kubeconfig, "-o", "json"])
        operator = json.loads(capsys.readouterr().out)["gpuOperator"]
        assert operator["gpuCluster"] == "gpu-cluster" and operator["dynamicMIG"] is True
        assert "cluster-policy" in operator["clusterPolicies"] and operator["conflict"]

        # The inventory records it, and the DRA-stack nodes though they name no GPU.
        inventory = tmp_path / "inventory.yaml"
        assert main(["inventory", "--cluster", "c1", "--kubeconfig", kubeconfig, "-o", str(inventory)]) == 0
        recorded = yaml.safe_load(inventory.read_text())
        assert recorded["gpuOperator"]["gpuCluster"] == "gpu-cluster"
        assert "cluster-policy" in recorded["gpuOperator"]["clusterPolicies"]
        groups = [g for g in recorded["nodes"] if "seed-dra-1" in g["names"]]
        assert groups and groups[0]["labels"][DEPLOY_DRA_DRIVER_LABEL] == "true"
    finally:
        cluster.delete_gpu_cluster(admin)
        for spec in nodes:
            core.delete_node(spec.name)

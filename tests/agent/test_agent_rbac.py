"""manifests/base/agent on the real API server: an agent's pod-bound token may change its own Node
only, and only the parts the agent owns."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from agent_harness import ROOT, bound_token_kubeconfig, seed_node, until

pytestmark = pytest.mark.cluster


def _denied(call) -> str:  # noqa: ANN001
    with pytest.raises(ApiException) as err:
        call()
    assert err.value.status in (403, 422), err.value.body
    return json.loads(err.value.body)["message"]


@pytest.fixture
def two_nodes(agent_plane, agent_admin, tmp_path):  # noqa: ANN001, ANN201
    names = ("rbac-a", "rbac-b")
    for n in names:
        seed_node(agent_admin, n)
    configs = {n: bound_token_kubeconfig(agent_admin, agent_plane.url, agent_plane.ca_pem, n, tmp_path / f"{n}.kc")
               for n in names}
    yield configs
    for n in names:
        k8s.CoreV1Api(agent_admin).delete_node(n)


def test_agent_token_changes_its_own_node_only(agent_plane, agent_admin, two_nodes) -> None:
    with agent_plane.api_client(two_nodes["rbac-a"]) as api:
        core = k8s.CoreV1Api(api)
        mine = {"metadata": {"labels": {"nvidia.com/mig.config.state": "success"},
                             "annotations": {"migops.io/mig.config.applied": "x"}}}
        # The policy reaches the API server's admission through an informer: allow it a moment.
        until(lambda: not _try(lambda: core.patch_node("rbac-b", mine)), 30, "the policy in force")
        core.patch_node("rbac-a", mine)
        message = _denied(lambda: core.patch_node("rbac-b", mine))
        assert "only its own node rbac-a, not rbac-b" in message
        message = _denied(lambda: core.patch_node("rbac-a", {"spec": {"unschedulable": True}}))
        assert "spec" in message
        message = _denied(lambda: core.patch_node("rbac-a", {"metadata": {"labels": {"team": "x"}}}))
        assert "nvidia.com/ and migops.io/ labels" in message
        _denied(lambda: core.patch_node("rbac-a", {"metadata": {"labels": {"nvidia.com/mig.config": "all-7g.80gb"}}}))
        core.patch_node_status("rbac-a", {"status": {"capacity": {"nvidia.com/mig-1g.10gb": "7"}}})
        message = _denied(lambda: core.patch_node_status("rbac-a", {"status": {"capacity": {"pods": "500"}}}))
        assert "extended resources" in message
        _denied(lambda: core.patch_node_status("rbac-b", {"status": {"capacity": {"nvidia.com/gpu": "9"}}}))
        # Pods: the ones on its node may go, others not; reads are not narrowed by the policy.
        for node in ("rbac-a", "rbac-b"):
            k8s.CoreV1Api(agent_admin).create_namespaced_pod("gpu-operator", {
                "metadata": {"name": f"nvidia-cuda-validator-{node}", "labels": {"app": "nvidia-cuda-validator"}},
                "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x"}]}})
        core.delete_namespaced_pod("nvidia-cuda-validator-rbac-a", "gpu-operator", grace_period_seconds=0)
        assert "pods on its own node" in _denied(
            lambda: core.delete_namespaced_pod("nvidia-cuda-validator-rbac-b", "gpu-operator"))
        # ConfigMaps: the MIG config by name, nothing else.
        core.read_namespaced_config_map("default-mig-parted-config", "gpu-operator")
        core.list_namespaced_config_map("gpu-operator", field_selector="metadata.name=default-mig-parted-config")
        _denied(lambda: core.list_namespaced_config_map("gpu-operator"))
        _denied(lambda: core.list_secret_for_all_namespaces())
    k8s.CoreV1Api(agent_admin).delete_namespaced_pod("nvidia-cuda-validator-rbac-b", "gpu-operator",
                                                     grace_period_seconds=0)


def test_a_token_that_is_not_pod_bound_is_refused(agent_plane, agent_admin) -> None:
    path = agent_plane.kubeconfig_for_service_account("migops-system", "migops-agent")  # no boundObjectRef
    seed_node(agent_admin, "rbac-unbound")
    try:
        with agent_plane.api_client(path) as api:
            patch = {"metadata": {"labels": {"nvidia.com/mig.config.state": "failed"}}}
            until(lambda: not _try(lambda: k8s.CoreV1Api(api).patch_node("rbac-unbound", patch)), 30, "in force")
            message = _denied(lambda: k8s.CoreV1Api(api).patch_node("rbac-unbound", patch))
            assert "pod's service-account token" in message
    finally:
        k8s.CoreV1Api(agent_admin).delete_node("rbac-unbound")


def test_the_agent_refuses_to_run_for_another_node(two_nodes) -> None:
    result = subprocess.run([sys.executable, "-m", "migops", "agent", "--node", "rbac-b", "--backend", "simulated",
                             "--gpus", "1x0x233010DE", "--state-file", str(two_nodes["rbac-a"].parent / "g.json"),
                             "--work-dir", str(two_nodes["rbac-a"].parent), "--kubeconfig",
                             str(two_nodes["rbac-a"])], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert result.returncode == 1
    assert "bound to node 'rbac-a', not 'rbac-b'" in result.stderr


def _try(call) -> bool:  # noqa: ANN001
    try:
        call()
        return True
    except ApiException:
        return False

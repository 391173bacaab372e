"""manifests/base/agent on the real API server: an agent's pod-bound token may change its own Node
only, and only the parts the agent owns."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from typing import Any

import pytest
import yaml
from agent_harness import DEFAULT_CONFIG, ROOT, bound_token_kubeconfig, labels, node_events, seed_node, until
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from migops.agent.kube import NodeIO
from migops.agent.ports import AgentPorts, FlowOptions
from migops.agent.reasons import AgentEvent
from migops.agent.simulated import SimulatedBackend, parse_gpus
from migops.agent.state import AgentState, ConfigRequest, FlowRun
from migops.agent.steps import run_flow
from migops.api.names import (
    AGENT_CONTROLLER,
    APPLIED_ANNOTATION,
    DEVICE_ID_LABEL,
    DIGEST_ANNOTATION,
    DRIFT_ANNOTATION,
    GPUS_ANNOTATION,
    LAYOUT_ANNOTATION,
    MIG_CONFIG_STATE_LABEL,
    REASON_ANNOTATION,
)
from migops.mig import gfd
from migops.mig.catalogue import catalogue
from migops.mig.spec import parse_config
from migops.mig.validate import GpuResult

pytestmark = pytest.mark.cluster


def _denied(call) -> str:
    with pytest.raises(ApiException) as err:
        call()
    assert err.value.status in (403, 422), err.value.body
    return json.loads(err.value.body)["message"]


@pytest.fixture
def two_nodes(agent_plane, agent_admin, tmp_path):
    names = ("rbac-a", "rbac-b")
    for n in names:
        seed_node(agent_admin, n)
    configs = {
        n: bound_token_kubeconfig(agent_admin, agent_plane.url, agent_plane.ca_pem, n, tmp_path / f"{n}.kc")
        for n in names
    }
    yield configs
    for n in names:
        k8s.CoreV1Api(agent_admin).delete_node(n)


def test_agent_token_changes_its_own_node_only(agent_plane, agent_admin, two_nodes) -> None:
    with agent_plane.api_client(two_nodes["rbac-a"]) as api:
        core = k8s.CoreV1Api(api)
        mine = {
            "metadata": {
                "labels": {"nvidia.com/mig.config.state": "success"},
                "annotations": {"migops.io/mig.config.reason": "x"},
            }
        }
        # The policy reaches the API server's admission through an informer: allow it a moment.
        until(lambda: not _try(lambda: core.patch_node("rbac-b", mine)), 30, "the policy in force")
        core.patch_node("rbac-a", mine)
        message = _denied(lambda: core.patch_node("rbac-b", mine))
        assert "only its own node rbac-a, not rbac-b" in message
        message = _denied(lambda: core.patch_node("rbac-a", {"spec": {"unschedulable": True}}))
        assert "spec" in message
        message = _denied(lambda: core.patch_node("rbac-a", {"metadata": {"labels": {"team": "x"}}}))
        assert "not metadata.labels team" in message
        _denied(lambda: core.patch_node("rbac-a", {"metadata": {"labels": {"nvidia.com/mig.config": "all-7g.80gb"}}}))
        core.patch_node_status("rbac-a", {"status": {"capacity": {"nvidia.com/mig-1g.10gb": "7"}}})
        message = _denied(lambda: core.patch_node_status("rbac-a", {"status": {"capacity": {"pods": "500"}}}))
        assert "not status.capacity.pods" in message
        _denied(lambda: core.patch_node_status("rbac-b", {"status": {"capacity": {"nvidia.com/gpu": "9"}}}))
        # Pods: the ones on its node may go, others not; reads are not narrowed by the policy.
        for node in ("rbac-a", "rbac-b"):
            k8s.CoreV1Api(agent_admin).create_namespaced_pod(
                "gpu-operator",
                {
                    "metadata": {"name": f"nvidia-cuda-validator-{node}", "labels": {"app": "nvidia-cuda-validator"}},
                    "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x"}]},
                },
            )
        core.delete_namespaced_pod("nvidia-cuda-validator-rbac-a", "gpu-operator", grace_period_seconds=0)
        assert "pods on its own node" in _denied(
            lambda: core.delete_namespaced_pod("nvidia-cuda-validator-rbac-b", "gpu-operator")
        )
        # ConfigMaps: the MIG config by name, nothing else.
        core.read_namespaced_config_map("default-mig-parted-config", "gpu-operator")
        core.list_namespaced_config_map("gpu-operator", field_selector="metadata.name=default-mig-parted-config")
        _denied(lambda: core.list_namespaced_config_map("gpu-operator"))
        _denied(lambda: core.list_secret_for_all_namespaces())
    k8s.CoreV1Api(agent_admin).delete_namespaced_pod(
        "nvidia-cuda-validator-rbac-b", "gpu-operator", grace_period_seconds=0
    )


def test_a_token_that_is_not_pod_bound_is_refused(agent_plane, agent_admin) -> None:
    path = agent_plane.kubeconfig_for_service_account("migops-system", "migops-agent")  # no boundObjectRef
    seed_node(agent_admin, "rbac-unbound")
    try:
        with agent_plane.api_client(path) as api:
            patch = {"metadata": {"labels": {"nvidia.com/mig.config.state": "failed"}}}
            until(lambda: not _try(lambda: k8s.CoreV1Api(api).patch_node("rbac-unbound", patch)), 30, "in force")
            message = _denied(lambda: k8s.CoreV1Api(api).patch_node("rbac-unbound", patch))
            assert "service-account token bound to its pod or its Node" in message
    finally:
        k8s.CoreV1Api(agent_admin).delete_node("rbac-unbound")


def test_the_agent_refuses_to_run_for_another_node(two_nodes) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "migops",
            "agent",
            "--node",
            "rbac-b",
            "--backend",
            "simulated",
            "--gpus",
            "1x0x233010DE",
            "--state-file",
            str(two_nodes["rbac-a"].parent / "g.json"),
            "--work-dir",
            str(two_nodes["rbac-a"].parent),
            "--kubeconfig",
            str(two_nodes["rbac-a"]),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert result.returncode == 1
    assert "bound to node 'rbac-a', not 'rbac-b'" in result.stderr


# ------------------------------------------------------------------ one test per field (docs/security.md)
OTHER_EVENT_NODE = "rbac-b"


def _event(node: str = "rbac-a", **over: Any) -> dict:
    """An Event as kube/events.py records it, about `node`."""
    body = {
        "metadata": {"generateName": f"{node}."},
        "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": node},
        "reason": "MigConfigFailed",
        "message": "x",
        "type": "Warning",
        "reportingComponent": AGENT_CONTROLLER,
        "reportingInstance": "migops.io/agent-test",
        "source": {"component": AGENT_CONTROLLER},
    }
    body.update(over)
    return body


# (what, how: node | status | event, body, a fragment of the denial)
DENIED = [
    ("label-foreign", "node", {"metadata": {"labels": {"team": "x"}}}, "not metadata.labels team"),
    (
        "label-mig-config",
        "node",
        {"metadata": {"labels": {"nvidia.com/mig.config": "all-1g.10gb"}}},
        "not metadata.labels nvidia.com/mig.config",
    ),
    (
        "label-unmanaged",
        "node",
        {"metadata": {"labels": {"migops.io/unmanaged": "true"}}},
        "not metadata.labels migops.io/unmanaged",
    ),
    (
        "label-other-nvidia",
        "node",
        {"metadata": {"labels": {"nvidia.com/cuda.driver.major": "999"}}},
        "not metadata.labels nvidia.com/cuda.driver.major",
    ),
    (  # a GPU Operator control label under nvidia.com/gpu.*, not GFD's
        "label-gpu-workload-config",
        "node",
        {"metadata": {"labels": {"nvidia.com/gpu.workload.config": "vm-passthrough"}}},
        "not metadata.labels nvidia.com/gpu.workload.config",
    ),
    (
        "label-deploy-operand",
        "node",
        {"metadata": {"labels": {"nvidia.com/gpu.deploy.mig-manager": "false"}}},
        "not metadata.labels nvidia.com/gpu.deploy.mig-manager",
    ),
    ("label-removed", "node", {"metadata": {"labels": {"team": None}}}, "not metadata.labels team"),
    (
        "label-state-value",
        "node",
        {"metadata": {"labels": {"nvidia.com/mig.config.state": "done"}}},
        "must be one of pending, rebooting, success, failed",
    ),
    (
        "label-deploy-value",
        "node",
        {"metadata": {"labels": {"nvidia.com/gpu.deploy.device-plugin": "yes"}}},
        "must be true, false or paused-for-mig-change",
    ),
    (
        "annotation-managed-by",
        "node",
        {"metadata": {"annotations": {"migops.io/managed-by": "x/y"}}},
        "not metadata.annotations migops.io/managed-by",
    ),
    (
        "annotation-revision",
        "node",
        {"metadata": {"annotations": {"migops.io/mig.config.revision": "abc"}}},
        "not metadata.annotations migops.io/mig.config.revision",
    ),
    (
        "annotation-foreign",
        "node",
        {"metadata": {"annotations": {"example.com/x": "1"}}},
        "not metadata.annotations example.com/x",
    ),
    (
        "annotation-digest-forged",
        "node",
        {"metadata": {"annotations": {"migops.io/mig.config.digest": "sha256:f"}}},
        "may change only\ntogether",
    ),
    (
        "annotation-applied-other-config",
        "node",
        {
            "metadata": {
                "annotations": {
                    "migops.io/mig.config.applied": "all-1g.10gb",
                    "migops.io/mig.config.digest": "sha256:f",
                }
            }
        },
        "not\napplied=all-1g.10gb",
    ),
    ("metadata-finalizers", "node", {"metadata": {"finalizers": ["example.com/keep"]}}, "metadata.finalizers"),
    (
        "metadata-ownerReferences",
        "node",
        {
            "metadata": {
                "ownerReferences": [
                    {
                        "apiVersion": "v1",
                        "kind": "Namespace",
                        "name": "default",
                        "uid": "00000000-0000-0000-0000-000000000001",
                    }
                ]
            }
        },
        "metadata.ownerReferences",
    ),
    ("spec-unschedulable", "node", {"spec": {"unschedulable": True}}, "node's spec"),
    ("spec-taints", "node", {"spec": {"taints": [{"key": "x", "effect": "NoSchedule"}]}}, "node's spec"),
    ("status-capacity-pods", "status", {"status": {"capacity": {"pods": "500"}}}, "not status.capacity.pods"),
    ("status-capacity-removed", "status", {"status": {"capacity": {"memory": None}}}, "not status.capacity.memory"),
    ("status-allocatable-cpu", "status", {"status": {"allocatable": {"cpu": "100k"}}}, "not status.allocatable.cpu"),
    ("status-allocatable-pods", "status", {"status": {"allocatable": {"pods": "0"}}}, "not status.allocatable.pods"),
    (
        "status-allocatable-other-vendor",
        "status",
        {"status": {"allocatable": {"example.com/fpga": "1"}}},
        "not status.allocatable.example.com/fpga",
    ),
    (
        "status-allocatable-nvidia-other",
        "status",
        {"status": {"allocatable": {"nvidia.com/gpu.shared": "1"}}},
        "not status.allocatable.nvidia.com/gpu.shared",
    ),
    (
        "status-addresses",
        "status",
        {"status": {"addresses": [{"type": "InternalIP", "address": "10.9.9.9"}]}},
        "not status.addresses",
    ),
    ("status-nodeInfo", "status", {"status": {"nodeInfo": {"kubeletVersion": "v9.9.9"}}}, "not status.nodeInfo"),
    (
        "status-conditions",
        "status",
        {"status": {"conditions": [{"type": "Ready", "status": "False"}]}},
        "not status.conditions",
    ),
    (
        "status-daemonEndpoints",
        "status",
        {"status": {"daemonEndpoints": {"kubeletEndpoint": {"Port": 1}}}},
        "not status.daemonEndpoints",
    ),
    (
        "status-images",
        "status",
        {"status": {"images": [{"names": ["evil:latest"], "sizeBytes": 1}]}},
        "not status.images",
    ),
    ("status-label-through-status", "status", {"metadata": {"labels": {"team": "x"}}}, "not metadata.labels team"),
    ("event-other-node", "event", _event(OTHER_EVENT_NODE), "only about its own node rbac-a"),
    (
        "event-other-node-uid",
        "event",
        _event(
            involvedObject={
                "apiVersion": "v1",
                "kind": "Node",
                "name": "rbac-a",
                "uid": "00000000-0000-0000-0000-000000000002",
            }
        ),
        "only about its own node rbac-a",
    ),
    (
        "event-other-kind",
        "event",
        _event(involvedObject={"apiVersion": "v1", "kind": "Pod", "name": "rbac-a", "namespace": "default"}),
        "not Pod rbac-a",
    ),
    (
        "event-related",
        "event",
        _event(related={"apiVersion": "v1", "kind": "Node", "name": OTHER_EVENT_NODE}),
        "only about its own node",
    ),
    ("event-reporting-component", "event", _event(reportingComponent="migops.io/reconciler"), "reportingComponent"),
    ("event-source-component", "event", _event(source={"component": "kubelet"}), "source.component"),
    ("event-reason", "event", _event(reason="DriftReverted"), "not DriftReverted"),
]


@pytest.fixture
def own_node(agent_plane, agent_admin, two_nodes):
    """rbac-a's agent client, once the policy is in force (it reaches admission through an informer)."""
    k8s.CoreV1Api(agent_admin).patch_node("rbac-a", {"metadata": {"labels": {"team": "gpu"}}})
    with agent_plane.api_client(two_nodes["rbac-a"]) as api:
        core = k8s.CoreV1Api(api)
        patch = {"metadata": {"labels": {"nvidia.com/mig.config.state": "success"}}}
        until(lambda: not _try(lambda: core.patch_node("rbac-b", patch)), 30, "the policy in force")
        yield core


@pytest.mark.parametrize("how, body, fragment", [c[1:] for c in DENIED], ids=[c[0] for c in DENIED])
def test_the_agent_may_not_change_on_its_own_node(own_node, agent_admin, how, body, fragment) -> None:
    if how == "event":
        message = _denied(lambda: own_node.create_namespaced_event("default", body))
    elif how == "status":
        message = _denied(lambda: own_node.patch_node_status("rbac-a", body))
    else:
        message = _denied(lambda: own_node.patch_node("rbac-a", body))
    assert fragment.replace("\n", " ") in message.replace("\n", " "), message


def test_the_agent_writes_what_it_writes(own_node, agent_admin) -> None:
    """Every field the agent writes (agent/kube.py), as it writes them: server-side apply of labels and
    annotations as migops-agent, a merge patch removing stale ones, GPU resources in the status."""
    labels = {
        MIG_CONFIG_STATE_LABEL: "pending",
        "nvidia.com/gpu.deploy.device-plugin": "paused-for-mig-change",
        "nvidia.com/gpu.deploy.client": "false",
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        "nvidia.com/gpu.count": "8",
        "nvidia.com/mig.strategy": "mixed",
        "nvidia.com/mig.capable": "true",
        "nvidia.com/mig-1g.10gb.count": "7",
        DEVICE_ID_LABEL: "0x233010DE",
    }
    notes = {
        DRIFT_ANNOTATION: "gpu 1: missing 3g.40gb@4",
        REASON_ANNOTATION: "r",
        LAYOUT_ANNOTATION: "{}",
        GPUS_ANNOTATION: "0x233010DE",
        APPLIED_ANNOTATION: "all-disabled",
        DIGEST_ANNOTATION: "sha256:1",
    }
    node = NodeIO(own_node.api_client, "rbac-a")
    node.apply(labels, notes)  # nvidia.com/mig.config is all-disabled (seeded): a digest for it is the agent's
    node.apply({"nvidia.com/mig-1g.10gb.count": None}, {DRIFT_ANNOTATION: None, REASON_ANNOTATION: None})
    own_node.patch_node("rbac-a", {"metadata": {"labels": {"nvidia.com/gpu.count": None}}})
    node.publish_gfd(
        agent_admin.sanitize_for_serialization(own_node.read_node("rbac-a")),
        {**labels, "nvidia.com/mig-1g.10gb.count": "7"},
        {"nvidia.com/mig-1g.10gb": 7},
    )
    got = own_node.read_node("rbac-a")
    assert got.status.allocatable["nvidia.com/mig-1g.10gb"] == "7" and "nvidia.com/gpu" not in got.status.allocatable
    assert got.metadata.annotations[DIGEST_ANNOTATION] == "sha256:1"
    # The digest stays as long as the applied config does; a new one names the node's config label.
    node.apply(annotations={APPLIED_ANNOTATION: "all-disabled", DIGEST_ANNOTATION: "sha256:2"})
    node.event(agent_admin.sanitize_for_serialization(got), "MigConfigApplied", "applied")
    assert [e.reason for e in node_events(agent_admin, "rbac-a")] == ["MigConfigApplied"]


def test_a_refused_write_is_not_sent_again(own_node) -> None:
    node = NodeIO(own_node.api_client, "rbac-a")
    node.apply({MIG_CONFIG_STATE_LABEL: "success"})
    with pytest.raises(ApiException):
        node.apply(annotations={APPLIED_ANNOTATION: "all-1g.10gb", DIGEST_ANNOTATION: "sha256:3"})
    node.apply({MIG_CONFIG_STATE_LABEL: "failed"})  # would be refused too if the digest were still sent
    assert labels(own_node.api_client, "rbac-a")[MIG_CONFIG_STATE_LABEL] == "failed"


def test_a_config_applied_after_the_node_was_given_another_is_pending_not_failed(own_node, tmp_path) -> None:
    """The race the digest rule costs: the node's label changed (the seeded all-disabled) while the agent
    applied all-1g.10gb. The policy refuses applied=all-1g.10gb; the agent says pending (the new config
    runs next), not failed, which would halt a MigSync's rollout."""
    kube = NodeIO(own_node.api_client, "rbac-a")
    backend = SimulatedBackend(tmp_path / "gpus.json", parse_gpus("2x0x233010DE"), node="rbac-a")
    ports = AgentPorts(backend, kube, FlowOptions(pod_timeout=5, mode_change_settle=0))
    kube.start_pod_watch()
    try:
        node = own_node.api_client.sanitize_for_serialization(own_node.read_node("rbac-a"))
        request = ConfigRequest("all-1g.10gb", parse_config(DEFAULT_CONFIG), None, "mixed", "gpu-operator")
        outcome = run_flow(AgentState(), FlowRun(request, node), ports)
    finally:
        kube.pods.stop()
    assert outcome.state == "pending", outcome
    assert labels(own_node.api_client, "rbac-a")[MIG_CONFIG_STATE_LABEL] == "pending"
    notes = own_node.read_node("rbac-a").metadata.annotations or {}
    assert APPLIED_ANNOTATION not in notes and DIGEST_ANNOTATION not in notes
    assert [len(g["instances"]) for g in backend_state(tmp_path / "gpus.json")] == [7, 7]  # it was applied
    # The config the node is labelled with: success, with its applied name and digest.
    request = ConfigRequest("all-disabled", parse_config(DEFAULT_CONFIG), None, "mixed", "gpu-operator")
    kube.start_pod_watch()
    try:
        assert run_flow(AgentState(), FlowRun(request, node), ports).state == "success"
    finally:
        kube.pods.stop()
    assert own_node.read_node("rbac-a").metadata.annotations[APPLIED_ANNOTATION] == "all-disabled"


def backend_state(path) -> list[dict]:
    return json.loads(path.read_text())["gpus"]


def test_events_go_only_to_default(own_node) -> None:
    """RBAC: a Role in `default`, where kube/events.py records a Node's Events; nowhere else."""
    for namespace in ("kube-system", "gpu-operator", "migops-system"):
        with pytest.raises(ApiException) as err:
            own_node.create_namespaced_event(namespace, _event())
        assert err.value.status == 403, err.value.body
    events = k8s.EventsV1Api(own_node.api_client)
    with pytest.raises(ApiException) as err:  # the events.k8s.io API is not granted either
        events.create_namespaced_event(
            "default",
            {
                "metadata": {"generateName": "x."},
                "eventTime": "2026-01-01T00:00:00.000000Z",
                "regarding": {"kind": "Node", "name": OTHER_EVENT_NODE},
                "reason": "MigConfigFailed",
                "action": "x",
                "reportingController": AGENT_CONTROLLER,
                "reportingInstance": "x",
                "type": "Warning",
            },
        )
    assert err.value.status == 403


def test_the_policy_compares_every_node_status_field(agent_plane) -> None:
    """A NodeStatus field a later Kubernetes adds must be named in the policy, or the agent could write it."""
    kubectl = [str(agent_plane.binaries.kubectl), "--kubeconfig", str(agent_plane.admin_kubeconfig)]
    spec = json.loads(
        subprocess.run(
            [*kubectl, "get", "--raw", "/openapi/v3/api/v1"], capture_output=True, text=True, check=True, timeout=60
        ).stdout
    )
    fields = set(spec["components"]["schemas"]["io.k8s.api.core.v1.NodeStatus"]["properties"])
    policy = next(yaml.safe_load_all((ROOT / "manifests/base/agent/own-node-policy.yaml").read_text()))
    compared = next(v["expression"] for v in policy["spec"]["variables"] if v["name"] == "changedStatusFields")
    listed = set(re.findall(r'"(\w+)"', compared.split("].filter")[0]))
    assert listed | {"capacity", "allocatable"} == fields


def test_the_policy_lets_the_agent_write_exactly_gfds_labels() -> None:
    """The policy's lists are migops.mig.gfd's, and every label advertise() writes, for every model and
    strategy, is among them (so the narrowing never refuses what the agent publishes)."""
    policy = next(yaml.safe_load_all((ROOT / "manifests/base/agent/own-node-policy.yaml").read_text()))
    variables = {v["name"]: v["expression"] for v in policy["spec"]["variables"]}
    assert set(re.findall(r'"([^"]+)"', variables["agentGpuLabels"])) == gfd.GPU_ATTRIBUTE_LABELS
    pattern = variables["agentMigDeviceLabel"].strip().strip("'").replace("\\\\", "\\")
    assert pattern == gfd.MIG_DEVICE_LABEL.pattern
    written: set[str] = set()
    for model in (*catalogue().gpus, *catalogue().non_mig):
        for strategy in ("none", "single", "mixed"):
            written |= set(gfd.node_labels_without_mig(model, 2, strategy))
            for profile in (gi.name for gi in model.profiles):
                for devices in ((profile,), (profile, profile)):
                    result = GpuResult(0, model, None, True, (), devices)
                    written |= set(gfd.advertise([result], strategy).labels)
    assert written and all(gfd.is_gfd_label(k) for k in written), sorted(k for k in written if not gfd.is_gfd_label(k))
    assert not gfd.is_gfd_label("nvidia.com/gpu.workload.config")
    assert not gfd.is_gfd_label("nvidia.com/gpu.deploy.driver")


def test_the_policy_lists_every_event_reason_the_agent_records() -> None:
    policy = next(yaml.safe_load_all((ROOT / "manifests/base/agent/own-node-policy.yaml").read_text()))
    listed = set(
        re.findall(
            r'"(\w+)"', next(v["expression"] for v in policy["spec"]["variables"] if v["name"] == "agentEventReasons")
        )
    )
    recorded = {
        AgentEvent[m].value
        for f in (ROOT / "agent").glob("*.py")
        for m in re.findall(r"NodeEvent\(\s*AgentEvent\.(\w+)", f.read_text())
    }
    assert recorded and recorded == listed


def _try(call) -> bool:
    try:
        call()
        return True
    except ApiException:
        return False

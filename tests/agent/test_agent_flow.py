"""Simulated agents (separate processes) against the real API server: mig-manager's flow and labels,
without its holes."""

from __future__ import annotations

import json

import pytest
from agent_harness import (
    allocatable,
    annotations,
    client_pod,
    delete_client_pod,
    labels,
    node_events,
    set_config,
    state,
    until,
    wait_failed,
)
from kubernetes import client as k8s

pytestmark = pytest.mark.cluster


def _success_for(api, node: str, name: str):
    def check():
        got = labels(api, node)
        return (
            got.get("nvidia.com/mig.config.state") == "success"
            and annotations(api, node).get("migops.io/mig.config.applied") == name
        )

    return until(check, 90, f"{node}: success for {name}")


def test_label_reconfigures_many_nodes_with_gfd_labels_and_allocatable(agent_admin, agents) -> None:
    nodes = [agents(f"flow-{i}") for i in range(3)] + [agents("flow-3", "4x0x20B010DE")]  # + 4 x A100-40GB
    for agent in nodes:  # the operator's default config: all-disabled, already true of fresh GPUs
        _success_for(agent_admin, agent.node, "all-disabled")
    seen: list[str] = []
    set_config(agent_admin, "flow-0", "all-balanced")
    set_config(agent_admin, "flow-1", "all-1g.10gb")
    set_config(agent_admin, "flow-2", "all-3g.40gb")
    set_config(agent_admin, "flow-3", "all-balanced")

    def states() -> bool:
        s = state(agent_admin, "flow-0")
        if s and (not seen or seen[-1] != s):
            seen.append(s)
        return (
            s == "success" and annotations(agent_admin, "flow-0").get("migops.io/mig.config.applied") == "all-balanced"
        )

    until(states, 90, "flow-0 applied")
    assert "pending" in seen or len(seen) == 1  # pending may pass between two polls; it never stays
    for agent, name in ((nodes[1], "all-1g.10gb"), (nodes[2], "all-3g.40gb"), (nodes[3], "all-balanced")):
        _success_for(agent_admin, agent.node, name)

    # Mixed strategy (the ClusterPolicy's): one resource per profile, as the GPU Operator docs show.
    got = labels(agent_admin, "flow-0")
    assert got["nvidia.com/mig-1g.10gb.count"] == "16" and got["nvidia.com/mig-2g.20gb.count"] == "8"
    assert got["nvidia.com/mig-3g.40gb.count"] == "8"
    assert got["nvidia.com/mig-1g.10gb.memory"] == "9984" and got["nvidia.com/mig-3g.40gb.multiprocessors"] == "60"
    assert got["nvidia.com/mig-2g.20gb.product"] == "NVIDIA-H100-80GB-HBM3-MIG-2g.20gb"
    assert got["nvidia.com/mig.strategy"] == "mixed" and got["nvidia.com/gpu.count"] == "8"
    assert got["nvidia.com/gpu.deploy.device-plugin"] == "true"
    assert got["nvidia.com/gpu.deploy.dcgm-exporter"] == "false"  # a false stays false
    assert allocatable(agent_admin, "flow-0") == {
        "nvidia.com/mig-1g.10gb": "16",
        "nvidia.com/mig-2g.20gb": "8",
        "nvidia.com/mig-3g.40gb": "8",
    }
    assert allocatable(agent_admin, "flow-1") == {"nvidia.com/mig-1g.10gb": "56"}
    assert allocatable(agent_admin, "flow-3") == {  # the same config name, A100-40GB's profiles
        "nvidia.com/mig-1g.5gb": "8",
        "nvidia.com/mig-2g.10gb": "4",
        "nvidia.com/mig-3g.20gb": "4",
    }
    assert labels(agent_admin, "flow-3")["nvidia.com/mig-3g.20gb.product"] == "NVIDIA-A100-SXM4-40GB-MIG-3g.20gb"
    assert "nvidia.com/mig-1g.10gb.count" not in labels(agent_admin, "flow-2")  # stale GFD labels go
    ann = annotations(agent_admin, "flow-0")
    layout = json.loads(ann["migops.io/mig.layout"])
    assert [i["profile"] for i in layout[0]["instances"]] == ["1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"]
    assert ann["migops.io/gpus"] == ",".join(["0x233010DE"] * 8)
    assert ann["migops.io/mig.config.digest"].startswith("sha256:")
    assert "migops.io/mig.config.reason" not in ann
    reasons = [e.reason for e in node_events(agent_admin, "flow-0")]
    assert "MigConfigPending" in reasons and "MigConfigApplied" in reasons
    # The simulated GPUs hold what the labels say.
    gpus = nodes[1].gpu_state()["gpus"]
    assert all(g["mig"]["current"] and len(g["instances"]) == 7 for g in gpus)


def test_invalid_config_fails_before_anything_is_paused(agent_admin, agents) -> None:
    agent = agents("invalid-1")
    _success_for(agent_admin, agent.node, "all-disabled")
    before = agent.ops()
    set_config(agent_admin, agent.node, "too-many")
    seen = wait_failed(agent_admin, agent.node)
    assert "paused-for-mig-change" not in seen and "pending" not in seen
    reason = annotations(agent_admin, agent.node)["migops.io/mig.config.reason"]
    assert "too-many" in reason and "count-exceeds-max" in reason and "at most 7" in reason
    assert agent.ops() == before  # no driver call
    warnings = [e for e in node_events(agent_admin, agent.node) if e.reason == "MigConfigFailed"]
    assert warnings and warnings[0].type == "Warning" and "at most 7" in warnings[0].message
    # A config name the ConfigMap lacks: failed too, with the names it has.
    set_config(agent_admin, agent.node, "no-such-config")
    until(
        lambda: "no-such-config" in annotations(agent_admin, agent.node).get("migops.io/mig.config.reason", ""),
        60,
        "reason names the missing config",
    )
    assert state(agent_admin, agent.node) == "failed"
    assert agent.ops() == before


def test_client_pod_that_never_goes_times_out_restores_clients_and_is_retried(agent_admin, agents) -> None:
    agent = agents("stuck-1", "8x0x233010DE", "--pod-timeout", "2")
    _success_for(agent_admin, agent.node, "all-disabled")
    client_pod(agent_admin, agent.node, "nvidia-device-plugin-daemonset-stuck1")
    seen: list[str] = []
    set_config(agent_admin, agent.node, "all-1g.10gb")

    def failed() -> bool:
        got = labels(agent_admin, agent.node)
        seen.append(got.get("nvidia.com/gpu.deploy.device-plugin", ""))
        return got.get("nvidia.com/mig.config.state") == "failed"

    until(failed, 60, "state failed after the pod wait timed out")
    reason = annotations(agent_admin, agent.node)["migops.io/mig.config.reason"]
    assert "timed out after 2s" in reason and "nvidia-device-plugin-daemonset-stuck1" in reason
    got = labels(agent_admin, agent.node)
    assert got["nvidia.com/gpu.deploy.device-plugin"] == "true"  # restored, not left paused
    assert got["nvidia.com/gpu.deploy.gpu-feature-discovery"] == "true"
    assert got["nvidia.com/gpu.deploy.dcgm-exporter"] == "false"  # a false stays false
    assert all(not g["mig"]["current"] for g in agent.gpu_state()["gpus"])  # the GPUs were not touched
    # The DaemonSet controller finally removes its pod: the retry (no label change) goes through.
    delete_client_pod(agent_admin, "nvidia-device-plugin-daemonset-stuck1")
    _success_for(agent_admin, agent.node, "all-1g.10gb")
    assert labels(agent_admin, agent.node)["nvidia.com/gpu.deploy.device-plugin"] == "true"
    assert "migops.io/mig.config.reason" not in annotations(agent_admin, agent.node)


def test_pods_that_go_when_paused_let_the_change_through(agent_admin, agents) -> None:
    agent = agents("paused-1")
    _success_for(agent_admin, agent.node, "all-disabled")
    client_pod(agent_admin, agent.node, "nvidia-device-plugin-daemonset-p1")
    client_pod(agent_admin, agent.node, "gpu-feature-discovery-p1", app="gpu-feature-discovery")
    client_pod(agent_admin, agent.node, "nvidia-cuda-validator-p1", app="nvidia-cuda-validator")
    set_config(agent_admin, agent.node, "all-3g.40gb")
    # The DaemonSet controller's part: pods go once their deploy label is paused.
    until(
        lambda: labels(agent_admin, agent.node).get("nvidia.com/gpu.deploy.device-plugin") == "paused-for-mig-change",
        60,
        "device plugin paused",
    )
    assert state(agent_admin, agent.node) == "pending"
    delete_client_pod(agent_admin, "nvidia-device-plugin-daemonset-p1")
    delete_client_pod(agent_admin, "gpu-feature-discovery-p1")
    _success_for(agent_admin, agent.node, "all-3g.40gb")
    pods = (
        k8s.CoreV1Api(agent_admin)
        .list_namespaced_pod("gpu-operator", field_selector=f"spec.nodeName={agent.node}")
        .items
    )
    # The validator was deleted so it re-runs (no kubelet here to finish the graceful deletion).
    assert [p.metadata.name for p in pods] == ["nvidia-cuda-validator-p1"] and pods[0].metadata.deletion_timestamp
    assert labels(agent_admin, agent.node)["nvidia.com/gpu.deploy.device-plugin"] == "true"


def test_agent_stopped_while_waiting_restores_clients_instead_of_leaving_pending(agent_admin, agents) -> None:
    agent = agents("sigterm-1", "8x0x233010DE", "--pod-timeout", "120")
    _success_for(agent_admin, agent.node, "all-disabled")
    client_pod(agent_admin, agent.node, "nvidia-device-plugin-daemonset-st1")
    set_config(agent_admin, agent.node, "all-7g.80gb")
    until(lambda: state(agent_admin, agent.node) == "pending", 60, "pending")
    assert agent.stop() == 0  # SIGTERM (a DaemonSet rollout): the run ends, restoring what it paused
    got = labels(agent_admin, agent.node)
    assert got["nvidia.com/mig.config.state"] == "failed"
    assert got["nvidia.com/gpu.deploy.device-plugin"] == "true"
    assert "interrupted" in annotations(agent_admin, agent.node)["migops.io/mig.config.reason"]
    delete_client_pod(agent_admin, "nvidia-device-plugin-daemonset-st1")


def test_gpus_are_published_at_start_without_a_config_label(agent_admin, agents) -> None:
    agent = agents("inventory-1", "2x0x233010DE,1x0x20B710DE", start=False)
    k8s.CoreV1Api(agent_admin).patch_node(agent.node, {"metadata": {"labels": {"nvidia.com/mig.config": None}}})
    agent.start()
    until(
        lambda: annotations(agent_admin, agent.node).get("migops.io/gpus") == "0x233010DE,0x233010DE,0x20B710DE",
        60,
        "migops.io/gpus published",
    )
    assert labels(agent_admin, agent.node)["migops.io/gpu.device-id"] == "0x233010DE"
    assert "nvidia.com/mig.config.state" not in labels(agent_admin, agent.node)  # no config: nothing to do


def test_a_gpu_without_mig_beside_mig_gpus_is_left_alone(agent_admin, agents) -> None:
    """A DGX Station A100: four A100 80GB and a display GPU that cannot do MIG, in one node."""
    agent = agents("station-1", "4x0x20B210DE,1x0x1FB010DE")
    until(
        lambda: (
            annotations(agent_admin, agent.node).get("migops.io/gpus") == ",".join(["0x20B210DE"] * 4 + ["0x1FB010DE"])
        ),
        60,
        "the node's five GPUs published",
    )
    set_config(agent_admin, agent.node, "dgx-station-balanced")
    _success_for(agent_admin, agent.node, "dgx-station-balanced")
    layout = json.loads(annotations(agent_admin, agent.node)["migops.io/mig.layout"])
    assert [g["mig_enabled"] for g in layout] == [True] * 4 + [False]
    assert layout[4]["instances"] == [] and all(len(g["instances"]) == 4 for g in layout[:4])
    assert allocatable(agent_admin, agent.node)["nvidia.com/mig-3g.40gb"] == "4"
    assert agent.ops()[4] == {k: 0 for k in agent.ops()[4]}  # the display GPU never saw a driver call

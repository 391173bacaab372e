"""Simulated agents (separate processes) against the real API server: mig-manager's flow and labels,
without its holes."""
from __future__ import annotations

import json

import pytest
from kubernetes import client as k8s

from agent_harness import allocatable, annotations, labels, node_events, set_config, state, until

pytestmark = pytest.mark.cluster


def _success_for(api, node: str, name: str):  # noqa: ANN001, ANN202
    def check():  # noqa: ANN202
        got = labels(api, node)
        return got.get("nvidia.com/mig.config.state") == "success" and \
            annotations(api, node).get("migops.io/mig.config.applied") == name
    return until(check, 90, f"{node}: success for {name}")


def test_label_reconfigures_many_nodes_with_gfd_labels_and_allocatable(agent_admin, agents) -> None:
    nodes = [agents(f"flow-{i}") for i in range(3)]
    for agent in nodes:  # the operator's default config: all-disabled, already true of fresh GPUs
        _success_for(agent_admin, agent.node, "all-disabled")
    watch = k8s.CoreV1Api(agent_admin)
    seen: list[str] = []
    set_config(agent_admin, "flow-0", "all-balanced")
    set_config(agent_admin, "flow-1", "all-1g.10gb")
    set_config(agent_admin, "flow-2", "all-3g.40gb")

    def states() -> bool:
        s = state(agent_admin, "flow-0")
        if s and (not seen or seen[-1] != s):
            seen.append(s)
        return s == "success" and annotations(agent_admin, "flow-0").get("migops.io/mig.config.applied") == "all-balanced"
    until(states, 90, "flow-0 applied")
    assert "pending" in seen or len(seen) == 1  # pending may pass between two polls; it never stays
    for agent, name in ((nodes[1], "all-1g.10gb"), (nodes[2], "all-3g.40gb")):
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
        "nvidia.com/mig-1g.10gb": "16", "nvidia.com/mig-2g.20gb": "8", "nvidia.com/mig-3g.40gb": "8"}
    assert allocatable(agent_admin, "flow-1") == {"nvidia.com/mig-1g.10gb": "56"}
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

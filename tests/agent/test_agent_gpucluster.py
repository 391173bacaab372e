"""A simulated agent on a node of the GPU Operator's DRA stack (GPUCluster, GPU Operator 26.7+; label
`nvidia.com/gpu.deploy.dra-driver`): it never reconfigures there and says why; handed back
(`nvidia.com/gpu.deploy.dra-driver=false`), it applies the node's config again."""

from __future__ import annotations

import pytest
from agent_harness import annotations, labels, set_config, state, until, wait_failed
from kubernetes import client as k8s

from migops.api.names import DEPLOY_DRA_DRIVER_LABEL

pytestmark = pytest.mark.cluster


def _applied(api, node: str, name: str) -> bool:
    return state(api, node) == "success" and annotations(api, node).get("migops.io/mig.config.applied") == name


def test_the_agent_leaves_a_dra_stack_node_alone_and_says_why(agent_admin, agents) -> None:
    agent = agents("dra-stack-1")
    until(lambda: _applied(agent_admin, agent.node, "all-disabled"), 90, "all-disabled applied")
    before = agent.ops()
    core = k8s.CoreV1Api(agent_admin)
    core.patch_node(agent.node, {"metadata": {"labels": {DEPLOY_DRA_DRIVER_LABEL: "true"}}})
    set_config(agent_admin, agent.node, "all-1g.10gb")
    seen = wait_failed(agent_admin, agent.node)
    assert "paused-for-mig-change" not in seen and "pending" not in seen
    reason = annotations(agent_admin, agent.node)["migops.io/mig.config.reason"]
    assert "owned by the GPU Operator's DRA stack (GPUCluster; nvidia.com/gpu.deploy.dra-driver)" in reason
    assert f"{DEPLOY_DRA_DRIVER_LABEL}=false" in reason and "the agent does not reconfigure here" in reason
    assert agent.ops() == before  # the GPUs untouched
    assert not any(v == "paused-for-mig-change" for v in labels(agent_admin, agent.node).values())

    # Taken from the DRA stack: the same label is applied.
    core.patch_node(agent.node, {"metadata": {"labels": {DEPLOY_DRA_DRIVER_LABEL: "false"}}})
    until(lambda: _applied(agent_admin, agent.node, "all-1g.10gb"), 90, "all-1g.10gb applied once handed back")
    assert agent.ops() != before

"""The agent's apply keeps running work alive wherever the target allows: a reconfiguration that a plan
keeping the lowest starts first would refuse (its instance at slice 3 runs a job) is applied around it,
and the job's instance is the same instance afterwards."""

from __future__ import annotations

import pytest
from agent_harness import annotations, set_config, state, until

pytestmark = pytest.mark.cluster


def _applied(api, node: str, name: str, timeout: float = 90) -> None:
    until(
        lambda: state(api, node) == "success" and annotations(api, node).get("migops.io/mig.config.applied") == name,
        timeout,
        f"{node}: {name}",
    )


def _instances(agent) -> list[tuple[int, str, int]]:
    return sorted((i["id"], i["profile"], i["start"]) for i in agent.gpu_state()["gpus"][0]["instances"])


def test_an_instance_running_work_survives_a_reconfiguration(agent_admin, agents) -> None:
    agent = agents("keep-busy-1", "1x0x233010DE")
    set_config(agent_admin, agent.node, "all-1g.10gb")
    _applied(agent_admin, agent.node, "all-1g.10gb")
    (job,) = [i for i in _instances(agent) if i[2] == 3]  # a 1g.10gb at slice 3 runs a job
    agent.faults(in_use=[{"gpu": 0, "start": 3, "pids": [4242]}])
    # all-balanced on an H100: 3g.40gb + 2g.20gb + 2 x 1g.10gb. Keeping the lowest starts (0, 1) puts
    # the 2g.20gb over slices 2-3 and ends the job; keeping the busy one puts it at 0 and keeps 2 and 3.
    set_config(agent_admin, agent.node, "all-balanced")
    _applied(agent_admin, agent.node, "all-balanced")
    after = _instances(agent)
    assert job in after, after
    assert sorted((p, s) for _, p, s in after) == [("1g.10gb", 2), ("1g.10gb", 3), ("2g.20gb", 0), ("3g.40gb", 4)]
    assert agent.ops()[0]["destroy_gpu_instance"] == 5  # 0, 1, 4, 5, 6: never the busy one

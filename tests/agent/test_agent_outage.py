"""The agent outlives the API server: kube-apiserver killed (SIGKILL) at each point of the flow and
started again after a few seconds; the node ends reported (success for the config it was given) with
its GPU clients' deploy labels restored, and the agent process never exits. tests/agent/outage_harness.py
has the points; bench/agent_outage.py prints how long each takes to recover."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from agent_harness import AgentProc, install_agent_stack, start_agent
from outage_harness import DEPLOY, POINTS, outage_at, target

from migops.local.binaries import locate
from migops.local.controlplane import ControlPlane

pytestmark = pytest.mark.cluster
DOWN = 4.0  # seconds the API server stays down: longer than the agent's retry and the slowed driver calls


@pytest.fixture(scope="module")
def outage_plane() -> Iterator[ControlPlane]:
    """A control plane of the module's own: its API server is killed, which the other tests' must not see."""
    binaries = locate()
    with ControlPlane(binaries) as plane:
        with plane.api_client() as api:
            install_agent_stack(api, binaries.directory)
        yield plane


@pytest.mark.parametrize("point", POINTS)
def test_an_api_server_outage_ends_reported_with_the_clients_restored(
    outage_plane: ControlPlane, tmp_path: Path, point: str
) -> None:
    started: list[AgentProc] = []
    with outage_plane.api_client() as api:

        def agent(node: str, gpus: str, *extra: str) -> AgentProc:
            started.append(start_agent(api, outage_plane, node, tmp_path, gpus, *extra))
            return started[-1]

        try:
            got = outage_at(point, outage_plane, api, agent, DOWN)
            log = started[0].log_text()
        finally:
            for proc in started:
                proc.stop()
    assert got.agent_alive, log[-4000:]
    assert got.seconds is not None, (got, log[-4000:])
    assert (got.state, got.applied, got.deploy) == ("success", target(point), DEPLOY), log[-4000:]
    assert got.met, log[-4000:]  # the outage was met where the point says
    assert "Traceback" not in log, log[-4000:]

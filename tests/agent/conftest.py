"""A control plane of the agent tests' own, set up as a GPU Operator cluster with migops installed.

Its own (not the session's shared one): the agents watch the cluster-wide ClusterPolicy, and other
tests leave theirs behind. Seeded once: the gpu-operator namespace, the ClusterPolicy CRD and object,
the MIG ConfigMap with NVIDIA's default config, and manifests/base (the agent's RBAC and own-node
admission policy) applied from `kubectl kustomize`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from agent_harness import AgentProc, install_agent_stack, start_agent
from kubernetes import client as k8s
from kubernetes.client import ApiClient

from migops.local.binaries import locate
from migops.local.controlplane import ControlPlane


@pytest.fixture(scope="session")
def agent_plane() -> Iterator[ControlPlane]:
    binaries = locate()
    with ControlPlane(binaries) as plane:
        with plane.api_client() as api:
            install_agent_stack(api, binaries.directory)
        yield plane


@pytest.fixture(scope="session")
def agent_admin(agent_plane: ControlPlane) -> Iterator[ApiClient]:
    with agent_plane.api_client() as api:
        yield api


@pytest.fixture
def agents(
    agent_plane: ControlPlane, agent_admin: ApiClient, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Callable[..., AgentProc]]:
    """`agents(node, gpus="8x0x233010DE", *extra)`: seed the Node, start an agent for it. All are
    stopped (and their Nodes deleted) after the test; a failing test prints their logs."""
    started: list[AgentProc] = []

    def make(node: str, gpus: str = "8x0x233010DE", *extra: str, **kwargs: Any) -> AgentProc:
        started.append(start_agent(agent_admin, agent_plane, node, tmp_path, gpus, *extra, **kwargs))
        return started[-1]

    yield make
    failed = getattr(request.node, "rep_call", None)
    for proc in started:
        proc.stop()
        if failed is not None and failed.failed:
            print(f"--- agent {proc.node} log ---\n{proc.log_text()[-6000:]}")
    core = k8s.CoreV1Api(agent_admin)
    for proc in started:
        try:
            core.delete_node(proc.node)
        except k8s.exceptions.ApiException:
            pass


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    outcome = yield
    rep = outcome.get_result()
    setattr(item, f"rep_{rep.when}", rep)

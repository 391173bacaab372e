"""A control plane of the agent tests' own, set up as a GPU Operator cluster with migops installed.

Its own (not the session's shared one): the agents watch the cluster-wide ClusterPolicy, and other
tests leave theirs behind. Seeded once: the gpu-operator namespace, the ClusterPolicy CRD and object,
the MIG ConfigMap with NVIDIA's default config, and manifests/base (the agent's RBAC and own-node
admission policy) applied from `kubectl kustomize`.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml
from agent_harness import ROOT, AgentProc, bound_token_kubeconfig, mig_configmap, seed_node
from kubernetes import client as k8s
from kubernetes.client import ApiClient

from migops.kube import ssa
from migops.local.binaries import locate
from migops.local.cluster import seed
from migops.local.controlplane import ControlPlane


def kustomize(binaries_dir: Path, path: Path) -> list[dict]:
    out = subprocess.run(
        [str(binaries_dir / "kubectl"), "kustomize", str(path)], capture_output=True, text=True, check=True, timeout=120
    ).stdout
    return [d for d in yaml.safe_load_all(out) if d]


@pytest.fixture(scope="session")
def agent_plane() -> Iterator[ControlPlane]:
    binaries = locate()
    with ControlPlane(binaries) as plane:
        with plane.api_client() as api:
            seed(api, (), "mixed")  # the GPU Operator's namespace and ClusterPolicy; each test seeds its nodes
            for doc in kustomize(binaries.directory, ROOT / "manifests" / "base"):
                # No webhook server runs beside these agents: registering its configurations (they call a
                # Service that does not exist here, failurePolicy Fail) would refuse every MIG ConfigMap write.
                if doc["kind"] not in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
                    ssa.apply(api, doc, field_manager="test-install")
            ssa.apply(api, mig_configmap(), field_manager="test-install")
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

    def make(
        node: str,
        gpus: str = "8x0x233010DE",
        *extra: str,
        seed: bool = True,
        start: bool = True,
        env: dict[str, str] | None = None,
    ) -> AgentProc:
        model, _, count = gpus.partition("x")[2], None, gpus.partition("x")[0]
        if seed:
            seed_node(agent_admin, node, model.split(",")[0], int(count) if count.isdigit() else 1)
        kc = bound_token_kubeconfig(
            agent_admin, agent_plane.url, agent_plane.ca_pem, node, tmp_path / f"{node}.kubeconfig"
        )
        proc = AgentProc(node, tmp_path / node, kc, gpus, list(extra), env)
        started.append(proc)
        return proc.start() if start else proc

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

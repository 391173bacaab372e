"""`migops suggest` end to end: pods wait for 3g.40gb on nodes configured all-1g.10gb, one
1g.10gb instance in use; the proposal goes through git (a branch pushed, then merged), the reconciler
rolls it out, the simulated agents reconfigure, and the real kube-scheduler binds the waiting pods. The
node whose instance is in use is never touched (the agents' own operation counters say so).

It lives beside the agent tests for their control plane (the agents watch a cluster-wide ClusterPolicy).
No kubelet runs: a bound pod is never executed, but binding and the scheduler's accounting are real.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from agent_harness import allocatable, annotations, mig_configmap, state, until
from gitrepo import CONFIG_YAML, GitRepo, nodes_yaml
from kubernetes import client as k8s
from kubernetes.client import ApiClient

from migops.cli import main
from migops.kube import ssa
from migops.local.controlplane import ControlPlane


@pytest.fixture
def workloads(agent_admin: ApiClient) -> Iterator[str]:
    name = f"suggest-{uuid.uuid4().hex[:6]}"
    core = k8s.CoreV1Api(agent_admin)
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name)


@pytest.fixture
def restore_configmap(agent_admin: ApiClient) -> Iterator[None]:
    """The reconciler writes the session's MIG ConfigMap from the repo: give the other agent tests
    NVIDIA's default back afterwards."""
    yield
    ssa.apply(agent_admin, mig_configmap(), field_manager="test-install", force=True)


def _pod(name: str, limits: dict[str, str], node: str | None = None) -> dict:
    spec: dict = {
        "restartPolicy": "Never",
        "containers": [
            {"name": "cuda", "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04", "resources": {"limits": limits}}
        ],
    }
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": name}, "spec": spec}


def _pending_mig_pods(core: k8s.CoreV1Api) -> list:
    pending = core.list_pod_for_all_namespaces(field_selector="status.phase=Pending").items
    return [
        p
        for p in pending
        if any(
            k.startswith("nvidia.com/mig-") for c in p.spec.containers if c.resources for k in c.resources.limits or {}
        )
    ]


def _clear_pending_mig_pods(core: k8s.CoreV1Api) -> None:
    """The story starts with no pending MIG demand but its own: earlier tests on the shared control plane
    leave pods behind (it runs no namespace controller, so a deleted namespace keeps its pods), and
    `migops suggest` rightly counts every pending MIG pod of the cluster."""
    for p in _pending_mig_pods(core):
        core.delete_namespaced_pod(p.metadata.name, p.metadata.namespace, grace_period_seconds=0)
    until(lambda: not _pending_mig_pods(core), 30, "no pending MIG pod left by earlier tests")


def _applied(api: ApiClient, node: str, config: str) -> None:
    until(
        lambda: state(api, node) == "success" and annotations(api, node).get("migops.io/mig.config.applied") == config,
        120,
        f"{node} applied {config}",
    )


def test_pending_pods_to_a_reviewed_commit_to_a_rollout_to_bound_pods(
    agent_plane: ControlPlane, agent_admin: ApiClient, agents, workloads: str, restore_configmap: None, tmp_path, capsys
) -> None:
    agent_plane.start_scheduler()
    core = k8s.CoreV1Api(agent_admin)
    _clear_pending_mig_pods(core)
    tag = uuid.uuid4().hex[:6]
    busy_name, free_name = f"sg-busy-{tag}", f"sg-free-{tag}"
    policy = f"suggest:\n  maxNodes: 1\n  pools:\n    - nodes: [{busy_name}, {free_name}]\n      configs: [all-1g.10gb, all-3g.40gb]\n"
    repo = GitRepo(tmp_path / "config-repo")
    repo.commit(
        {
            "config.yaml": CONFIG_YAML,
            "nodes.yaml": nodes_yaml(
                f"  - nodes: [{busy_name}, {free_name}]\n    config: all-1g.10gb", strategy="mixed", extra=policy
            ),
        },
        "all-1g.10gb",
    )
    kubeconfig = str(agent_plane.admin_kubeconfig)
    migsync = f"suggest-{tag}"

    def reconcile_once() -> None:
        argv = ["reconcile", "--repo", repo.url, "--ref", "main", "--once", "--kubeconfig", kubeconfig]
        assert main([*argv, "--name", migsync, "--cache-dir", str(tmp_path / "git-cache")]) == 0

    busy, free = agents(busy_name, "1x0x233010DE"), agents(free_name, "1x0x233010DE")
    try:
        reconcile_once()
        _applied(agent_admin, busy_name, "all-1g.10gb")
        _applied(agent_admin, free_name, "all-1g.10gb")
        # A running pod holds one 1g.10gb instance of the busy node; two pods wait for 3g.40gb.
        core.create_namespaced_pod(workloads, _pod("running", {"nvidia.com/mig-1g.10gb": "1"}, node=busy_name))
        for name in ("train-a", "train-b"):
            core.create_namespaced_pod(workloads, _pod(name, {"nvidia.com/mig-3g.40gb": "1"}))
        until(
            lambda: any(
                e.reason == "FailedScheduling"
                for e in core.list_namespaced_event(workloads, field_selector="involvedObject.name=train-a").items
            ),
            60,
            "train-a unschedulable",
        )
        busy_ops = busy.ops()
        busy_layout = annotations(agent_admin, busy_name)["migops.io/mig.layout"]

        capsys.readouterr()
        code = main(
            [
                "suggest",
                "--repo",
                repo.url,
                "--ref",
                "main",
                "--kubeconfig",
                kubeconfig,
                "--commit",
                "--branch",
                "suggest/3g",
                "--push",
            ]
        )
        out = capsys.readouterr()
        assert code == 0, out.err
        assert f"{free_name}: all-1g.10gb -> all-3g.40gb" in out.out
        assert busy_name not in out.out  # neither changed nor serving anything
        assert f"3g.40gb on {free_name}: 2 ({workloads}/train-a, {workloads}/train-b)" in out.out

        # Review, merge (a fast-forward of main), roll out.
        assert "migops suggest: serve 2 of 2 pending MIG pods" in repo.git("log", "-1", "--format=%B", "suggest/3g")
        repo.git("merge", "-q", "--ff-only", "suggest/3g")
        reconcile_once()
        _applied(agent_admin, free_name, "all-3g.40gb")
        assert allocatable(agent_admin, free_name).get("nvidia.com/mig-3g.40gb") == "2"
        for name in ("train-a", "train-b"):
            until(
                lambda name=name: core.read_namespaced_pod(name, workloads).spec.node_name == free_name,
                60,
                f"{name} bound",
            )

        # The busy node: not one driver call, the same layout.
        assert busy.ops() == busy_ops
        assert annotations(agent_admin, busy_name)["migops.io/mig.layout"] == busy_layout
        assert sum(o["destroy_gpu_instance"] for o in free.ops()) == 7

        # Nothing more to propose: the demand is served.
        capsys.readouterr()
        assert main(["suggest", "--repo", repo.url, "--ref", "main", "--kubeconfig", kubeconfig]) == 0
        assert capsys.readouterr().out.startswith("no pending MIG demand")
    finally:
        try:
            k8s.CustomObjectsApi(agent_admin).delete_namespaced_custom_object(
                "migops.io", "v1alpha1", "migops-system", "migsyncs", migsync
            )
        except k8s.exceptions.ApiException:
            pass

"""`migops local up` runs one simulated agent per node: labelling a node reconfigures its GPUs;
`down` stops the agents."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from agent_harness import until
from kubernetes import client as k8s
from kubernetes import config
from kubernetes.client.exceptions import ApiException
from local_cli import down_on_exit, migops_local

from migops.local.process import find_by_argument

pytestmark = pytest.mark.cluster
MIGOPS = Path(sys.executable).parent / "migops"


def _run(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return migops_local(home, *args, timeout=240)


@pytest.fixture(scope="module")
def local_stack(agent_plane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """`migops local up` with two nodes of two H100s (agent_plane: the binaries are built); `down` after
    the module leaves no agent behind."""
    home = tmp_path_factory.mktemp("local") / "home"
    with down_on_exit(home):
        try:
            up = _run(home, "up", "--nodes", "2", "--gpu", "0x233010DE", "--gpus-per-node", "2", "--strategy", "mixed")
            assert up.returncode == 0, up.stderr
            assert "one simulated MIG agent per node" in up.stdout and "not reporting" not in up.stdout
            yield home
        finally:
            down = _run(home, "down")
    assert down.returncode == 0, down.stderr
    agents = home / "local" / "agents"
    assert not find_by_argument(f"--work-dir={agents / 'gpu-node-1'}")
    assert not find_by_argument(f"--work-dir={agents / 'gpu-node-2'}")


def test_local_up_runs_an_agent_per_node(local_stack: Path) -> None:
    home = local_stack
    status = _run(home, "status")
    assert "agents:         2 of 2 running" in status.stdout
    api = config.new_client_from_config(config_file=str(home / "local" / "admin.kubeconfig"))
    core = k8s.CoreV1Api(api)
    assert core.read_node("gpu-node-1").metadata.labels["nvidia.com/mig.config.state"] == "success"
    core.patch_node("gpu-node-2", {"metadata": {"labels": {"nvidia.com/mig.config": "all-balanced"}}})

    def applied() -> dict | None:
        node = core.read_node("gpu-node-2")
        done = (
            node.metadata.labels.get("nvidia.com/mig.config.state") == "success"
            and node.metadata.annotations.get("migops.io/mig.config.applied") == "all-balanced"
        )
        gpu = {k: v for k, v in node.status.allocatable.items() if k.startswith("nvidia.com/")}
        return gpu if done else None

    allocatable = until(applied, 90, "gpu-node-2 reconfigured")
    # What `kubectl get node gpu-node-2 -o jsonpath='{.status.allocatable}'` shows under mixed (beside
    # the seeded CPU, memory and pods); the seeded nvidia.com/gpu (field manager migops-local) was taken
    # over and removed.
    assert allocatable == {"nvidia.com/mig-1g.10gb": "4", "nvidia.com/mig-2g.20gb": "2", "nvidia.com/mig-3g.40gb": "2"}
    managers = {m.manager for m in core.read_node("gpu-node-2").metadata.managed_fields if m.subresource == "status"}
    assert "migops-agent" in managers
    # A person removes an instance by hand (`migops sim --node`, the local stack's state file): the agent
    # sees it within its interval, and repairs it.
    sim = subprocess.run(
        [str(MIGOPS), "sim", "destroy-gi", "--node", "gpu-node-2", "--gpu", "1", "--start", "4"],
        env={**os.environ, "MIGOPS_HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert sim.returncode == 0 and "2g.20gb@2[2]" in sim.stdout and "3g.40gb" not in sim.stdout, sim.stderr

    def repaired() -> set[str]:
        events = core.list_namespaced_event("default", field_selector="involvedObject.name=gpu-node-2").items
        reasons = {e.reason for e in events}
        return reasons if {"MigDriftDetected", "MigDriftRepaired"} <= reasons else set()

    until(repaired, 60, "drift detected and repaired")
    until(lambda: "migops.io/mig.drift" not in core.read_node("gpu-node-2").metadata.annotations, 30, "no drift")
    assert core.read_node("gpu-node-2").status.allocatable["nvidia.com/mig-3g.40gb"] == "2"
    gpu1 = json.loads((home / "local" / "agents" / "gpu-node-2" / "gpus.json").read_text())["gpus"][1]
    assert sorted(i["start"] for i in gpu1["instances"]) == [0, 1, 2, 4]
    api.close()


def test_a_local_agent_is_the_agent_service_account_bound_to_its_node(local_stack: Path) -> None:
    """Not system:masters: the agent's ServiceAccount, a token naming its node, under the RBAC and the
    own-node policy of manifests/base/agent; so it cannot write another node."""
    work = local_stack / "local" / "agents" / "gpu-node-1"
    kubeconfig = work / "kubeconfig"
    (ref,) = find_by_argument(f"--work-dir={work}")
    argv = Path(f"/proc/{ref.pid}/cmdline").read_bytes().split(b"\0")
    assert str(kubeconfig).encode() in argv and not any(b"admin.kubeconfig" in a for a in argv)
    with config.new_client_from_config(config_file=str(kubeconfig)) as api:
        who = (
            k8s.AuthenticationV1Api(api)
            .create_self_subject_review({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
            .status.user_info
        )
        assert who.username == "system:serviceaccount:migops-system:migops-agent"
        assert who.extra["authentication.kubernetes.io/node-name"] == ["gpu-node-1"]
        assert "system:masters" not in (who.groups or [])
        core = k8s.CoreV1Api(api)
        with pytest.raises(ApiException) as err:
            core.patch_node("gpu-node-2", {"metadata": {"labels": {"nvidia.com/mig.config.state": "failed"}}})
        assert "only its own node gpu-node-1, not gpu-node-2" in err.value.body
        with pytest.raises(ApiException) as err:
            core.create_namespaced_event(
                "default",
                {
                    "metadata": {"generateName": "gpu-node-2."},
                    "reason": "MigConfigFailed",
                    "message": "spoofed",
                    "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": "gpu-node-2"},
                    "type": "Warning",
                    "reportingComponent": "migops.io/agent",
                    "reportingInstance": "x",
                },
            )
        assert "only about its own node gpu-node-1" in err.value.body
        with pytest.raises(ApiException) as err:
            core.list_secret_for_all_namespaces()
        assert err.value.status == 403
    # What it writes on its own node went through (the state label, its annotations, GPU resources).
    with config.new_client_from_config(config_file=str(local_stack / "local" / "admin.kubeconfig")) as admin:
        node = k8s.CoreV1Api(admin).read_node("gpu-node-1")
        assert node.metadata.labels["nvidia.com/mig.config.state"] == "success"
        assert "migops-agent" in {m.manager for m in node.metadata.managed_fields}


@pytest.mark.parametrize("name", ["rbac.yaml", "own-node-policy.yaml"])
def test_the_local_stack_installs_the_agent_manifests(name: str) -> None:
    """migops.local.agent_identity applies the manifests themselves: its package data is a link into
    manifests/base/agent (a wheel holds the file), never a copy that could drift."""
    root = Path(__file__).resolve().parents[2]
    packaged = root / "local" / "data" / f"agent-{name}"
    assert packaged.is_symlink() and packaged.resolve() == (root / "manifests" / "base" / "agent" / name).resolve()

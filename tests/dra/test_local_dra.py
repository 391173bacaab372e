"""`migops local up --dra`, as a new user runs it: a pending claim for 3g.40gb on a node configured
all-1g.10gb counts as demand and waits; the node gets all-3g.40gb; its agent's ResourceSlice follows
and the real kube-scheduler allocates the claim. A node a dynamic MIG manager owns is refused by the
webhook and the agent."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client as k8s
from kubernetes import config
from kubernetes.client.exceptions import ApiException
from local_cli import down_on_exit, migops_local
from pending_claims import claim_and_pod, pending_demand, scheduler_verdict
from polling import until

from migops.agent.dra import listed, slice_name
from migops.kube.owners import OWNER_LABEL
from migops.local.process import find_by_argument

pytestmark = pytest.mark.cluster
MIGOPS = Path(sys.executable).parent / "migops"
NODE = "gpu-node-1"
RG = ("resource.k8s.io", "v1")


def _run(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return migops_local(home, *args)


@pytest.fixture(scope="module")
def dra_stack(control_plane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """`migops local up --dra`: two A100-80GB nodes of one GPU each (control_plane: the binaries exist)."""
    home = tmp_path_factory.mktemp("local-dra") / "home"
    with down_on_exit(home):
        try:
            up = _run(home, "up", "--dra", "--nodes", "2", "--gpu", "0x20B210DE", "--gpus-per-node", "1")
            assert up.returncode == 0, up.stdout + up.stderr
            assert "DeviceClasses" in up.stderr and "dra:" in up.stdout
            yield home
        finally:
            down = _run(home, "down")
    assert down.returncode == 0, down.stderr
    assert not find_by_argument(f"--work-dir={home / 'local' / 'agents' / NODE}")


def _slice_profiles(custom: k8s.CustomObjectsApi, node: str) -> list[str]:
    try:
        found = custom.get_cluster_custom_object(*RG, "resourceslices", slice_name(node))
    except ApiException as exc:
        if exc.status == 404:
            return []
        raise
    return sorted(p for (_, p, _), n in listed([found], node).items() for _ in range(n))


def _label(core: k8s.CoreV1Api, node: str, config_name: str) -> None:
    core.patch_node(node, {"metadata": {"labels": {"nvidia.com/mig.config": config_name}}})


def _applied(core: k8s.CoreV1Api, node: str, config_name: str) -> bool:
    meta = core.read_node(node).metadata
    return (
        meta.labels.get("nvidia.com/mig.config.state") == "success"
        and (meta.annotations or {}).get("migops.io/mig.config.applied") == config_name
    )


def test_claim_pending_then_allocated_after_the_geometry_change(dra_stack: Path) -> None:
    api = config.new_client_from_config(config_file=str(dra_stack / "local" / "admin.kubeconfig"))
    core, custom = k8s.CoreV1Api(api), k8s.CustomObjectsApi(api)
    _label(core, NODE, "all-1g.10gb")
    until(lambda: _applied(core, NODE, "all-1g.10gb"), 120, "all-1g.10gb applied")
    assert _slice_profiles(custom, NODE) == ["1g.10gb"] * 7
    core.create_namespace({"metadata": {"name": "team"}})
    claim_and_pod(core, custom, "team", "3g.40gb", NODE)

    assert "claim" in scheduler_verdict(core, "team", "train").lower()
    (demand,) = pending_demand(custom, "team")
    assert demand.profiles == {"3g.40gb"}

    _label(core, NODE, "all-3g.40gb")
    until(lambda: _applied(core, NODE, "all-3g.40gb"), 120, "all-3g.40gb applied")
    assert _slice_profiles(custom, NODE) == ["3g.40gb", "3g.40gb"]
    assert until(lambda: core.read_namespaced_pod("train", "team").spec.node_name, 60, "bound") == NODE
    allocated = custom.get_namespaced_custom_object(*RG, "team", "resourceclaims", "big")
    (result,) = allocated["status"]["allocation"]["devices"]["results"]
    assert result["pool"] == NODE and result["device"].startswith("gpu-0-mig-3g40gb-")


def test_an_owned_node_is_refused_by_the_webhook_and_the_agent(dra_stack: Path) -> None:
    api = config.new_client_from_config(config_file=str(dra_stack / "local" / "admin.kubeconfig"))
    core = k8s.CoreV1Api(api)
    node = "gpu-node-2"
    _label(core, node, "all-1g.10gb")
    until(lambda: _applied(core, node, "all-1g.10gb"), 120, "all-1g.10gb applied")
    core.patch_node(node, {"metadata": {"labels": {OWNER_LABEL: "hami"}}})

    # The agent stops reconfiguring there, and says why.
    def refused() -> str:
        meta = core.read_node(node).metadata
        reason = (meta.annotations or {}).get("migops.io/mig.config.reason", "")
        return reason if meta.labels.get("nvidia.com/mig.config.state") == "failed" else ""

    assert "owned by hami" in until(refused, 60, "the agent's refusal")
    # The webhook denies a new config label there, naming the owner.
    with pytest.raises(ApiException) as err:
        _label(core, node, "all-3g.40gb")
    assert err.value.status == 403 and "owned by hami" in err.value.body


def test_kubectl_shows_the_admission_warning(dra_stack: Path) -> None:
    """What a user sees applying a claim for a profile with a typo, through the registered webhook."""
    from migops.local.binaries import locate

    manifest = """
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: typo, namespace: default}
spec:
  spec:
    devices:
      requests:
        - name: gpu
          exactly:
            deviceClassName: mig.nvidia.com
            selectors:
              - cel: {expression: "device.attributes['gpu.nvidia.com'].profile == '3g.45gb'"}
"""
    done = subprocess.run(
        [str(locate().kubectl), "--kubeconfig", str(dra_stack / "local" / "admin.kubeconfig"), "apply", "-f", "-"],
        input=manifest,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr  # a warning, never a denial
    assert "Warning: request gpu: 3g.45gb: no GPU model has it; closest: 3g.40gb" in done.stderr
    assert "[dra-unknown-profile]" in done.stderr

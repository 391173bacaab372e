"""GPU Operator 26.7's GPUCluster: the DRA stack owns MIG on the nodes it labels
`nvidia.com/gpu.deploy.dra-driver`. One definition (migops.kube.owners) read by the webhook (denies the
config label, naming the owner and the way out), the reconciler (skips, status says why) and the agent
(tests/agent/test_agent_gpucluster.py); the cluster-wide reading (api.objects.GpuOperator) says which
stack runs and reports both declared at once; a fleet repo's check warns about assignments to such
nodes. The seeded cluster and `migops status`/`inventory` on it: tests/cluster/test_gpu_operator_seed.py."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "webhook"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from gitrepo import CONFIG_YAML, nodes_yaml
from webhook_helpers import CM_NS, configmap, review

from migops.api.names import DEPLOY_DRA_DRIVER_LABEL
from migops.api.objects import GpuOperator, MigSettings
from migops.cli import main
from migops.gitops.desired import resolve
from migops.gitops.repo import load_repo
from migops.kube import owners
from migops.reconciler.plan import SKIPPED, plan
from migops.webhook import nodelabels
from migops.webhook.admission import parse_review
from migops.webhook.state import Snapshot

ROOT = Path(__file__).resolve().parents[2]
NODE_LABELS = {"migops.io/gpu.device-id": "0x233010DE", "nvidia.com/gpu.count": "8"}
POLICY = {
    "metadata": {"name": "cluster-policy", "creationTimestamp": "2026-01-01T00:00:00Z"},
    "spec": {"mig": {"strategy": "mixed"}},
    "status": {"namespace": CM_NS},
}
DEFAULT_CONFIG = (ROOT / "examples" / "nvidia-default-config.yaml").read_text()
# NVIDIA's sample GPUCluster (config/samples/nvidia_v1alpha1_gpucluster.yaml, v26.7.0), DynamicMIG on, and
# the status its controller writes while a ClusterPolicy exists (internal/conditions, PrerequisiteNotMet).
GPU_CLUSTER = {
    "apiVersion": "nvidia.com/v1alpha1",
    "kind": "GPUCluster",
    "metadata": {"name": "gpu-cluster"},
    "spec": {"draDriver": {"version": "v0.5.0", "featureGates": {"DynamicMIG": True}}},
    "status": {
        "state": "notReady",
        "conditions": [
            {"type": "Ready", "status": "False", "reason": "PrerequisiteNotMet", "message": "A ClusterPolicy exists"},
            {"type": "Error", "status": "True", "reason": "PrerequisiteNotMet", "message": "A ClusterPolicy exists"},
        ],
    },
}


def _node(name: str, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {**NODE_LABELS, **labels}}}


def test_the_dra_stacks_label_names_the_owner_whatever_the_selector_says() -> None:
    for selector in (owners.DEFAULT_SELECTOR, "", "pool=dyn"):
        found = owners.from_text(selector)
        assert found.owner({DEPLOY_DRA_DRIVER_LABEL: "true"}) == owners.DRA_STACK
        # The driver-manager pauses operands by rewriting the value: still the DRA stack's node.
        assert found.owner({DEPLOY_DRA_DRIVER_LABEL: "paused-for-driver-upgrade"}) == owners.DRA_STACK
        assert found.owner({DEPLOY_DRA_DRIVER_LABEL: "false"}) is None  # taken off the node
        assert found.owner({DEPLOY_DRA_DRIVER_LABEL: ""}) is None
    assert "gpu.deploy.dra-driver=false" in owners.why(owners.DRA_STACK)
    assert owners.ENV in owners.why("hami")


def test_webhook_refuses_the_config_label_on_a_dra_stack_node_naming_the_owner() -> None:
    snap = Snapshot.build(1, [], [POLICY], [configmap(DEFAULT_CONFIG)])
    owned = _node("n1", **{DEPLOY_DRA_DRIVER_LABEL: "true", "nvidia.com/mig.config": "all-1g.10gb"})
    v = nodelabels.validate(parse_review(json.loads(json.dumps(review(owned, kind="Node")))), snap)
    assert not v.allowed and v.code == 403 and "dynamic-mig-owner" in v.rules
    assert "owned by the GPU Operator's DRA stack (GPUCluster; nvidia.com/gpu.deploy.dra-driver)" in v.message
    assert "nvidia.com/gpu.deploy.dra-driver=false" in v.message
    # Handed back (dra-driver=false): the label is judged as on any node.
    back = _node("n1", **{DEPLOY_DRA_DRIVER_LABEL: "false", "nvidia.com/mig.config": "all-1g.10gb"})
    assert nodelabels.validate(parse_review(json.loads(json.dumps(review(back, kind="Node")))), snap).allowed
    # Removing the label from a DRA-stack node is allowed.
    bare = _node("n1", **{DEPLOY_DRA_DRIVER_LABEL: "true"})
    rm = parse_review(json.loads(json.dumps(review(bare, kind="Node", operation="UPDATE", old=owned))))
    assert nodelabels.validate(rm, snap).allowed


def test_reconciler_skips_dra_stack_nodes_with_the_owner_in_status() -> None:
    spec = load_repo(
        {
            "config.yaml": CONFIG_YAML.encode(),
            "nodes.yaml": nodes_yaml("  - nodeSelector: {matchLabels: {pool: p}}\n    config: all-1g.10gb").encode(),
        },
        "",
        "rev1",
    )
    nodes = {f"n{i}": _node(f"n{i}", pool="p", **{"nvidia.com/mig.config": "all-disabled"}) for i in range(2)}
    nodes["n0"]["metadata"]["labels"][DEPLOY_DRA_DRIVER_LABEL] = "true"
    # The DRA stack runs no GPU Feature Discovery: a node of it may name no GPU. Picked, it is not judged.
    nodes["dra"] = {"metadata": {"name": "dra", "labels": {DEPLOY_DRA_DRIVER_LABEL: "true", "pool": "p"}}}
    desired = resolve(spec, nodes, MigSettings(strategy="mixed"))
    assert "dra" not in desired.targets
    (warning,) = [w.problem for w in desired.warnings if w.problem.rule == "nodes-owned-elsewhere"]
    assert warning.path == "assignments[0]" and warning.severity == "warning"
    assert "nodes dra, n0: MIG geometry owned by the GPU Operator's DRA stack" in warning.message
    p = plan(desired, nodes, None)
    assert "n0" not in dict(p.writes) and "n1" in dict(p.writes)
    (skipped,) = [s for s in p.nodes if s.phase == SKIPPED]
    assert skipped.name == "n0" and "owned by the GPU Operator's DRA stack" in skipped.message


def test_the_operators_stack_read_from_its_objects() -> None:
    assert GpuOperator.from_objects([], []) == GpuOperator()
    policy_only = GpuOperator.from_objects([POLICY], [])
    assert policy_only.gpu_cluster is None and policy_only.conflict is None
    assert policy_only.describe().startswith("ClusterPolicy cluster-policy")
    alone = GpuOperator.from_objects([], [{**GPU_CLUSTER, "status": {"state": "ready"}}])
    assert (alone.gpu_cluster, alone.dynamic_mig, alone.state, alone.conflict) == ("gpu-cluster", True, "ready", None)
    assert "DynamicMIG on" in alone.describe() and "migops leaves them alone" in alone.describe()
    both = GpuOperator.from_objects([POLICY], [GPU_CLUSTER])
    assert both.waiting == "A ClusterPolicy exists"
    assert both.conflict is not None
    assert "both ClusterPolicy cluster-policy and GPUCluster gpu-cluster exist" in both.conflict
    assert "notReady: A ClusterPolicy exists" in both.describe()
    static = GpuOperator.from_objects([], [{**GPU_CLUSTER, "spec": {"draDriver": {}}}])
    assert not static.dynamic_mig and "static MIG" in static.describe()


@pytest.fixture
def fleet(tmp_path: Path) -> Path:
    root = tmp_path / "fleet"
    shutil.copytree(ROOT / "examples" / "fleet", root)
    return root


def test_a_fleet_check_warns_of_assignments_to_dra_stack_nodes(fleet: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The `train` cluster recorded as running a GPUCluster beside its ClusterPolicy, one node on the DRA
    stack: still valid (warnings), each warning naming the cluster and the place."""
    inv = fleet / "clusters" / "train" / "inventory.yaml"
    text = inv.read_text()
    text = text.replace(
        "nodes:\n",
        "gpuOperator: {gpuCluster: gpu-cluster, clusterPolicies: [cluster-policy]}\nnodes:\n",
        1,
    )
    text = text.replace(
        "  - names: [train-a100-4]\n    labels: {",
        f"  - names: [train-a100-4]\n    labels: {{{DEPLOY_DRA_DRIVER_LABEL}: 'true', ",
        1,
    )
    text = text.replace("labels: [", f"labels: [{DEPLOY_DRA_DRIVER_LABEL}, ", 1)
    inv.write_text(text)
    assert main(["validate", "-o", "json", str(fleet)]) == 0
    doc = json.loads(capsys.readouterr().out)
    found = [
        (p["rule"], p["file"] if "file" in p else s["file"], p["message"])
        for s in doc["sources"]
        if s.get("cluster") == "train"
        for p in s["problems"]
        if p["rule"] in ("gpu-operator-both-stacks", "nodes-owned-elsewhere")
    ]
    rules = sorted(r for r, _, _ in found)
    assert rules == ["gpu-operator-both-stacks", "nodes-owned-elsewhere"], found
    (owned,) = [m for r, _, m in found if r == "nodes-owned-elsewhere"]
    assert owned.startswith("cluster train: node train-a100-4: MIG geometry owned by the GPU Operator's DRA stack")

"""Faults injected into simulated GPUs, an agent killed mid-apply, the reboot path, and changes that
touch only what changes."""

from __future__ import annotations

import json
import time

import pytest
from agent_harness import (
    DEFAULT_CONFIG,
    allocatable,
    annotations,
    labels,
    mig_configmap,
    set_config,
    set_strategy,
    state,
    until,
    wait_failed,
)
from kubernetes import client as k8s

from migops.api.migsync import record_name
from migops.api.names import MANAGED_BY_ANNOTATION, UNMANAGED_LABEL
from migops.kube import ssa
from migops.reconciler.record import AppliedRecord, to_configmap

pytestmark = pytest.mark.cluster


def _applied(api, node: str, name: str, timeout: float = 90):
    return until(
        lambda: state(api, node) == "success" and annotations(api, node).get("migops.io/mig.config.applied") == name,
        timeout,
        f"{node}: {name}",
    )


def _failed_with(api, node: str, text: str, timeout: float = 60) -> str:
    def check() -> str | None:
        reason = annotations(api, node).get("migops.io/mig.config.reason", "")
        return reason if state(api, node) == "failed" and text in reason else None

    return until(check, timeout, f"{node}: failed with {text!r}")


def test_instance_in_use_is_not_destroyed_and_nothing_is_paused(agent_admin, agents) -> None:
    agent = agents("busy-1")
    _applied(agent_admin, agent.node, "all-disabled")
    set_config(agent_admin, agent.node, "all-balanced")
    _applied(agent_admin, agent.node, "all-balanced")
    agent.faults(in_use=[{"gpu": 2, "start": 4, "pids": [31337]}])  # the 3g.40gb on GPU 2 runs a job
    before = agent.ops()
    set_config(agent_admin, agent.node, "all-1g.10gb")
    seen = wait_failed(agent_admin, agent.node)
    reason = annotations(agent_admin, agent.node)["migops.io/mig.config.reason"]
    assert "GPU 2: 3g.40gb@4 (pids 31337)" in reason and "nothing was paused" in reason
    assert "paused-for-mig-change" not in seen
    assert agent.ops() == before
    # The job ends: the retry with backoff applies the change, no label change needed.
    agent.faults()
    _applied(agent_admin, agent.node, "all-1g.10gb")


def test_destroy_in_use_allowed_still_meets_the_drivers_refusal(agent_admin, agents) -> None:
    agent = agents("busy-2", "8x0x233010DE", "--destroy-in-use")
    _applied(agent_admin, agent.node, "all-disabled")
    set_config(agent_admin, agent.node, "all-3g.40gb")
    _applied(agent_admin, agent.node, "all-3g.40gb")
    agent.faults(in_use=[{"gpu": 0, "start": 0, "pids": [7]}])
    set_config(agent_admin, agent.node, "all-1g.10gb")
    reason = _failed_with(agent_admin, agent.node, "IN_USE")
    assert "GPU 0" in reason
    got = labels(agent_admin, agent.node)
    assert got["nvidia.com/gpu.deploy.device-plugin"] == "true"  # clients restored


@pytest.mark.parametrize("op", ["create_gpu_instance", "destroy_gpu_instance", "set_mig_mode"])
def test_nvml_error_fails_restores_and_retry_recovers(agent_admin, agents, op: str) -> None:
    agent = agents(f"nvml-{op.replace('_', '-')}")
    _applied(agent_admin, agent.node, "all-disabled")
    if op == "destroy_gpu_instance":
        set_config(agent_admin, agent.node, "all-balanced")
        _applied(agent_admin, agent.node, "all-balanced")
    agent.faults(nvml_error=[{"op": op, "gpu": 5, "code": "UNKNOWN"}])
    set_config(agent_admin, agent.node, "all-3g.40gb")
    reason = _failed_with(agent_admin, agent.node, f"GPU 5: {op} failed: UNKNOWN")
    assert labels(agent_admin, agent.node)["nvidia.com/gpu.deploy.device-plugin"] == "true"
    failures = [
        e
        for e in k8s.CoreV1Api(agent_admin)
        .list_namespaced_event("default", field_selector=f"involvedObject.name={agent.node}")
        .items
        if e.reason == "MigConfigFailed"
    ]
    assert failures and reason.split(" (")[0] in failures[-1].message
    agent.faults()  # the driver recovers; the retry converges from the partial state
    _applied(agent_admin, agent.node, "all-3g.40gb")
    assert all(len(g["instances"]) == 2 for g in agent.gpu_state()["gpus"])


def test_failed_reset_without_reboot_fails_with_the_reason(agent_admin, agents) -> None:
    agent = agents("reset-1")
    _applied(agent_admin, agent.node, "all-disabled")
    agent.faults(reset_fails=True)
    set_config(agent_admin, agent.node, "all-balanced")
    reason = _failed_with(agent_admin, agent.node, "pending and the GPU reset failed")
    assert "WITH_REBOOT" in reason
    assert labels(agent_admin, agent.node)["nvidia.com/gpu.deploy.device-plugin"] == "true"


def test_failed_reset_with_reboot_reboots_once_then_guards_the_loop(agent_admin, agents) -> None:
    agent = agents("reboot-1", "8x0x233010DE", "--with-reboot")
    _applied(agent_admin, agent.node, "all-disabled")
    agent.faults(reset_fails=True)
    set_config(agent_admin, agent.node, "all-balanced")
    _applied(agent_admin, agent.node, "all-balanced")  # rebooting -> (simulated reboot) -> success
    assert agent.gpu_state()["boots"] == 1
    assert "rebooting" in agent.log_text() or "reboot" in agent.log_text()
    # A reboot that does not apply the mode either: one reboot, then failed (no reboot loop).
    agent.faults(reset_fails=True, reboot_fails=True)
    set_config(agent_admin, agent.node, "all-disabled")
    _failed_with(agent_admin, agent.node, "did not take effect after rebooting")
    assert agent.gpu_state()["boots"] == 2
    assert labels(agent_admin, agent.node)["nvidia.com/gpu.deploy.device-plugin"] == "true"


def test_agent_killed_mid_apply_converges_after_restart(agent_admin, agents) -> None:
    agent = agents("kill-1")
    _applied(agent_admin, agent.node, "all-disabled")
    agent.faults(op_delay=0.05)
    set_config(agent_admin, agent.node, "all-1g.10gb")
    until(lambda: sum(o["create_gpu_instance"] for o in agent.ops()) >= 10, 60, "apply under way")
    agent.kill()  # SIGKILL: no cleanup runs
    assert state(agent_admin, agent.node) == "pending"
    assert labels(agent_admin, agent.node)["nvidia.com/gpu.deploy.device-plugin"] == "paused-for-mig-change"
    created = sum(o["create_gpu_instance"] for o in agent.ops())
    assert 10 <= created < 56  # killed part-way
    agent.faults()
    agent.start()
    _applied(agent_admin, agent.node, "all-1g.10gb")
    assert labels(agent_admin, agent.node)["nvidia.com/gpu.deploy.device-plugin"] == "true"
    assert sum(o["create_gpu_instance"] for o in agent.ops()) == 56  # nothing created twice
    assert allocatable(agent_admin, agent.node) == {"nvidia.com/mig-1g.10gb": "56"}


def test_change_to_one_gpu_of_eight_touches_only_that_gpu(agent_admin, agents) -> None:
    agent = agents("one-gpu-1")
    _applied(agent_admin, agent.node, "all-disabled")
    set_config(agent_admin, agent.node, "all-balanced")
    _applied(agent_admin, agent.node, "all-balanced")
    before = agent.ops()
    gis_before = {g["index"]: {i["start"]: i["id"] for i in g["instances"]} for g in agent.gpu_state()["gpus"]}
    set_config(agent_admin, agent.node, "gpu3-differs")  # GPU 3: 2x1g+2g+3g -> 4x1g+3g
    _applied(agent_admin, agent.node, "gpu3-differs")
    after = agent.ops()
    assert [i for i in range(8) if after[i] != before[i]] == [3]
    delta = {k: after[3][k] - before[3][k] for k in after[3]}
    # The two 1g and the 3g stay; only the 2g goes and two 1g are created in its slices.
    assert delta == {
        "destroy_gpu_instance": 1,
        "destroy_compute_instance": 1,
        "create_gpu_instance": 2,
        "create_compute_instance": 2,
        "set_mig_mode": 0,
        "reset": 0,
    }
    gpu3 = agent.gpu_state()["gpus"][3]
    kept = {i["start"]: i["id"] for i in gpu3["instances"]}
    assert all(kept[s] == gis_before[3][s] for s in (0, 1, 4))  # same GPU instances, not recreated
    layout = json.loads(annotations(agent_admin, agent.node)["migops.io/mig.layout"])[3]
    assert [(i["profile"], i["start"]) for i in layout["instances"]] == [
        ("1g.10gb", 0),
        ("1g.10gb", 1),
        ("1g.10gb", 2),
        ("1g.10gb", 3),
        ("3g.40gb", 4),
    ]


def test_configmap_edit_that_changes_this_nodes_config_is_applied(agent_admin, agents) -> None:
    agent = agents("cm-edit-1")
    _applied(agent_admin, agent.node, "all-disabled")
    edited = (
        DEFAULT_CONFIG
        + """  edited:
    - devices: all
      mig-enabled: true
      mig-devices: {"7g.80gb": 1}
"""
    )
    ssa.apply(agent_admin, mig_configmap(edited), field_manager="test-install")
    set_config(agent_admin, agent.node, "edited")
    _applied(agent_admin, agent.node, "edited")
    digest = annotations(agent_admin, agent.node)["migops.io/mig.config.digest"]
    try:
        ssa.apply(
            agent_admin, mig_configmap(edited.replace('{"7g.80gb": 1}', '{"4g.40gb": 1}')), field_manager="test-install"
        )
        until(
            lambda: (
                annotations(agent_admin, agent.node).get("migops.io/mig.config.digest") not in (None, digest)
                and state(agent_admin, agent.node) == "success"
            ),
            60,
            "the edited content applied",
        )
        assert allocatable(agent_admin, agent.node) == {"nvidia.com/mig-4g.40gb": "8"}
    finally:
        ssa.apply(agent_admin, mig_configmap(), field_manager="test-install")


def _record(plane, text: str, revision: str) -> None:
    """The applied record of MigSync migops-system/migops, written as its reconciler writes it (only its
    ServiceAccount may: manifests/base/reconciler/applied-record-policy.yaml)."""
    body = to_configmap(AppliedRecord(revision, "", text, "", time.time()), "migops-system", "migops", None)
    with plane.api_client(plane.kubeconfig_for_service_account("migops-system", "migops-reconciler")) as api:
        ssa.apply(api, body, field_manager="migops-reconciler", force=True)


def test_content_the_reconciler_is_about_to_revert_is_not_applied(agent_admin, agent_plane, agents) -> None:
    """While a MigSync manages the node, git owns the MIG ConfigMap's content: a text other than the applied
    record's waits for the reconciler's verdict. Put back: nothing was re-partitioned. Recorded as a new
    revision: applied."""
    edited = (
        DEFAULT_CONFIG + '  edited:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {"7g.80gb": 1}\n'
    )
    changed = edited.replace('{"7g.80gb": 1}', '{"4g.40gb": 1}')
    ssa.apply(agent_admin, mig_configmap(edited), field_manager="test-install")
    _record(agent_plane, edited, "a" * 40)
    agent = agents("cm-verdict-1", "2x0x233010DE")
    core = k8s.CoreV1Api(agent_admin)
    try:
        core.patch_node(agent.node, {"metadata": {"annotations": {MANAGED_BY_ANNOTATION: "migops-system/migops"}}})
        set_config(agent_admin, agent.node, "edited")
        _applied(agent_admin, agent.node, "edited")
        digest, ops = annotations(agent_admin, agent.node)["migops.io/mig.config.digest"], agent.ops()
        # Someone else's write of the content (the webhook denies it; the agent must not act on it anyway).
        ssa.apply(agent_admin, mig_configmap(changed), field_manager="test-install")
        waits = "not applied: ConfigMap gpu-operator/default-mig-parted-config"
        until(lambda: waits in agent.log_text() or agent.ops() != ops, 30, "the agent waits or acts")
        assert agent.ops() == ops, "re-partitioned for content git does not hold"
        assert "revision aaaaaaaaaaaa's, which MigSync migops-system/migops applied" in agent.log_text()
        # The reconciler puts it back: nothing to do, nothing was done.
        ssa.apply(agent_admin, mig_configmap(edited), field_manager="test-install")
        until(lambda: "acting on it" in agent.log_text(), 30, "the verdict seen")
        assert agent.ops() == ops and allocatable(agent_admin, agent.node) == {"nvidia.com/mig-7g.80gb": "2"}
        assert annotations(agent_admin, agent.node)["migops.io/mig.config.digest"] == digest
        assert state(agent_admin, agent.node) == "success"
        # Git changes it: the record first (as the reconciler writes it), then the ConfigMap: applied.
        _record(agent_plane, changed, "b" * 40)
        ssa.apply(agent_admin, mig_configmap(changed), field_manager="test-install")
        until(
            lambda: (
                annotations(agent_admin, agent.node).get("migops.io/mig.config.digest") not in (None, digest)
                and state(agent_admin, agent.node) == "success"
            ),
            60,
            "the new revision's content applied",
        )
        assert allocatable(agent_admin, agent.node) == {"nvidia.com/mig-4g.40gb": "2"}
        # Out of git's hands (migops.io/unmanaged=true: the reconciler never puts it back): acted on.
        hatch = mig_configmap(edited)
        hatch["metadata"]["labels"] = {UNMANAGED_LABEL: "true"}
        ssa.apply(agent_admin, hatch, field_manager="test-install")
        until(
            lambda: (
                allocatable(agent_admin, agent.node) == {"nvidia.com/mig-7g.80gb": "2"}
                and state(agent_admin, agent.node) == "success"
            ),
            60,
            "the unmanaged ConfigMap's content applied",
        )
    finally:
        ssa.apply(agent_admin, mig_configmap(), field_manager="test-install")
        core.delete_namespaced_config_map(record_name("migops"), "migops-system")


def test_strategy_from_the_cluster_policy_decides_labels_and_resources(agent_admin, agents) -> None:
    def strategy(value: str) -> None:
        set_strategy(agent_admin, value)

    agent = agents("strategy-1")
    _applied(agent_admin, agent.node, "all-disabled")
    try:
        strategy("single")
        set_config(agent_admin, agent.node, "all-1g.10gb")
        _applied(agent_admin, agent.node, "all-1g.10gb")
        until(lambda: labels(agent_admin, agent.node).get("nvidia.com/mig.strategy") == "single", 60, "single")
        got = labels(agent_admin, agent.node)
        assert (
            got["nvidia.com/gpu.count"] == "56" and got["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb"
        )
        assert got["nvidia.com/gpu.slices.gi"] == "1" and got["nvidia.com/gpu.slices.ci"] == "1"
        # Allocatable is the node's status, written after its labels (a separate write): waited for.
        until(lambda: allocatable(agent_admin, agent.node) == {"nvidia.com/gpu": "56"}, 60, "56 x nvidia.com/gpu")
        set_config(agent_admin, agent.node, "all-balanced")  # several profiles under single: MIG-INVALID
        _applied(agent_admin, agent.node, "all-balanced")
        got = labels(agent_admin, agent.node)
        assert (
            got["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3-MIG-INVALID" and got["nvidia.com/gpu.count"] == "0"
        )
        until(lambda: allocatable(agent_admin, agent.node) == {"nvidia.com/gpu": "0"}, 60, "0 x nvidia.com/gpu")
        strategy("mixed")  # no reconfiguration: the labels follow the strategy
        until(lambda: labels(agent_admin, agent.node).get("nvidia.com/mig-3g.40gb.count") == "8", 60, "mixed labels")
        until(lambda: "nvidia.com/gpu" not in allocatable(agent_admin, agent.node), 60, "no nvidia.com/gpu")
    finally:
        strategy("mixed")


def test_host_gpu_clients_are_stopped_and_started_kubelet_only_for_mode_changes(agent_admin, agents, tmp_path) -> None:
    from fake_host import calls, make_host, unit_state

    root = tmp_path / "host"
    env = make_host(
        root,
        {
            "nvsm.service": "active",
            "nvidia-dcgm.service": "active",
            "dcgm-exporter.service": "inactive",
            "kubelet.service": "active",
        },
    )
    clients = tmp_path / "clients.yaml"
    clients.write_text("version: v1\nsystemd-services: [nvsm.service, nvidia-dcgm.service, dcgm-exporter.service]\n")
    agent = agents(
        "host-1",
        "8x0x233010DE",
        "--host-gpu-clients",
        "--gpu-clients-file",
        str(clients),
        "--host-root",
        "/host",
        env=env,
    )
    _applied(agent_admin, agent.node, "all-disabled")
    assert not [c for c in calls(root) if c.startswith("stop")]  # already applied: nothing stopped
    set_config(agent_admin, agent.node, "all-balanced")  # a MIG mode change
    _applied(agent_admin, agent.node, "all-balanced")
    stops = [c for c in calls(root) if c.startswith("stop")]
    assert stops == ["stop -- nvsm.service", "stop -- nvidia-dcgm.service", "stop -- kubelet.service"]
    assert all(unit_state(root, u) == "active" for u in ("nvsm.service", "nvidia-dcgm.service", "kubelet.service"))
    assert unit_state(root, "dcgm-exporter.service") == "inactive"  # was not running: not started either
    set_config(agent_admin, agent.node, "all-1g.10gb")  # geometry only: the kubelet keeps running
    _applied(agent_admin, agent.node, "all-1g.10gb")
    stops = [c for c in calls(root) if c.startswith("stop")][3:]
    assert stops == ["stop -- nvsm.service", "stop -- nvidia-dcgm.service"]

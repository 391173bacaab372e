"""The GPU stays what git says: simulated agents (separate processes) against the real API server, their
GPUs changed out of band with `migops sim` as a person with `nvidia-smi mig` would.

Short intervals (`--drift-interval 0.5`); the agent's own driver calls are slowed with the `op_delay`
fault (`migops sim` is not), so the drifted state can be asserted while a repair runs.
"""

from __future__ import annotations

import threading
import time
import urllib.request

import pytest
from agent_harness import allocatable, annotations, labels, node_events, set_config, state, until
from kubernetes import client as k8s

from migops.api.names import DRIFT_ANNOTATION, REASON_ANNOTATION
from migops.cli import main
from migops.local.cluster import CRD_NAME, apply_cluster_policy, install_clusterpolicy_crd, seed
from migops.local.ports import free_ports

pytestmark = pytest.mark.cluster
FAST_DRIFT = ("--drift-interval", "0.5")
TWO_2G = {"nvidia.com/mig-2g.20gb": "6"}  # all-2g.20gb on 2 x H100: 3 x 2g.20gb each, slice 6 free


def _person(agent, *argv: str) -> None:
    assert main(["sim", argv[0], "--state-file", str(agent.state_file), *argv[1:]]) == 0


def _applied(api, node: str, name: str) -> None:
    def check() -> bool:
        return (
            state(api, node) == "success"
            and annotations(api, node).get("migops.io/mig.config.applied") == name
            and DRIFT_ANNOTATION not in annotations(api, node)
        )

    until(check, 90, f"{node}: success for {name}, no drift")


def _drifted(api, node: str, text: str, resources: dict[str, str], timeout: float = 30) -> dict[str, str]:
    """Wait for the drift annotation to say `text`; then assert the allocatable resources already follow."""
    until(lambda: annotations(api, node).get(DRIFT_ANNOTATION) == text, timeout, f"{node}: drift {text!r}")
    assert allocatable(api, node) == resources
    return labels(api, node)


def _events(api, node: str, reason: str) -> list:
    """This node's agent Events of one reason, oldest first."""
    return sorted((e for e in node_events(api, node) if e.reason == reason), key=lambda e: e.event_time)


def _start(agent_admin, agents, node: str, *extra: str):
    agent = agents(node, "2x0x233010DE", *FAST_DRIFT, *extra)
    _applied(agent_admin, node, "all-disabled")
    set_config(agent_admin, node, "all-2g.20gb")
    _applied(agent_admin, node, "all-2g.20gb")
    assert allocatable(agent_admin, node) == TWO_2G
    return agent


def test_each_out_of_band_change_is_detected_published_and_repaired(agent_admin, agents) -> None:
    port = free_ports(1)[0]
    agent = _start(
        agent_admin, agents, "drift-repair", "--drift-max-repairs", "10", "--metrics-address", f"127.0.0.1:{port}"
    )
    node = agent.node
    agent.faults(op_delay=1.0)  # the agent's repair calls take 1 s each: the drifted state is visible meanwhile
    cases = [
        (("destroy-gi", "--gpu", "0", "--start", "2"), "GPU 0: missing 2g.20gb", {"nvidia.com/mig-2g.20gb": "5"}),
        (
            ("create-gi", "--gpu", "1", "--profile", "1g.10gb"),
            "GPU 1: extra 1g.10gb@6",
            {"nvidia.com/mig-2g.20gb": "6", "nvidia.com/mig-1g.10gb": "1"},
        ),
        (
            ("mig-mode", "--gpu", "0", "off"),
            "GPU 0: MIG disabled (config: enabled)",
            {"nvidia.com/mig-2g.20gb": "3", "nvidia.com/gpu": "1"},
        ),
        (("reset", "--gpu", "1"), "GPU 1: missing 3 x 2g.20gb; no instances left", {"nvidia.com/mig-2g.20gb": "3"}),
    ]
    for number, (change, text, resources) in enumerate(cases, 1):
        other = 1 - int(change[2])
        before = agent.ops()
        _person(agent, *change)
        began = time.monotonic()
        got = _drifted(agent_admin, node, text, resources)
        # GFD's labels follow the instances that exist, while drifted:
        assert got.get("nvidia.com/mig-2g.20gb.count") == resources["nvidia.com/mig-2g.20gb"]
        assert got.get("nvidia.com/mig-1g.10gb.count") == resources.get("nvidia.com/mig-1g.10gb")
        assert time.monotonic() - began < 10  # seen within the interval (0.5 s) and a read, on a slow machine
        _applied(agent_admin, node, "all-2g.20gb")
        assert allocatable(agent_admin, node) == TWO_2G
        assert "nvidia.com/mig-1g.10gb.count" not in labels(agent_admin, node)
        assert REASON_ANNOTATION not in annotations(agent_admin, node)
        assert agent.ops()[other] == before[other]  # only the GPU that differs was touched
        detected = _events(agent_admin, node, "MigDriftDetected")
        assert len(detected) == number and detected[-1].type == "Warning"
        assert text in detected[-1].message and "repairing" in detected[-1].message
        assert len(_events(agent_admin, node, "MigDriftRepaired")) == number
    gpus = agent.gpu_state()["gpus"]
    assert all(g["mig"]["current"] and sorted(i["start"] for i in g["instances"]) == [0, 2, 4] for g in gpus)
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        page = response.read().decode()
    assert 'migops_agent_drift_repairs_total{result="success"} 4.0' in page
    assert 'migops_agent_drift_detected_total{gpu="0"} 2.0' in page and "migops_agent_drifted_gpus 0.0" in page


def test_report_leaves_the_gpus_and_says_so_in_state_until_they_match_again(
    agent_admin, agent_plane, agents, capsys
) -> None:
    agent = _start(agent_admin, agents, "drift-report", "--drift", "report")
    node = agent.node
    before = agent.ops()
    _person(agent, "create-gi", "--gpu", "1", "--profile", "1g.10gb")
    got = _drifted(
        agent_admin, node, "GPU 1: extra 1g.10gb@6", {"nvidia.com/mig-2g.20gb": "6", "nvidia.com/mig-1g.10gb": "1"}
    )
    assert got["nvidia.com/mig-1g.10gb.count"] == "1"
    until(lambda: state(agent_admin, node) == "failed", 10, "state failed")
    reason = annotations(agent_admin, node)[REASON_ANNOTATION]
    assert "not repaired (--drift=report)" in reason and "extra 1g.10gb@6" in reason
    time.sleep(2.0)  # four intervals: the GPUs stay as the person left them
    assert agent.ops() == before and len(agent.gpu_state()["gpus"][1]["instances"]) == 4
    assert state(agent_admin, node) == "failed"
    assert "not repaired" in _events(agent_admin, node, "MigDriftDetected")[-1].message
    # `migops status --nodes` shows the drifted node (the MigSync row written here as a reconciler would).
    objects = k8s.CustomObjectsApi(agent_admin)
    objects.create_namespaced_custom_object(
        "migops.io",
        "v1alpha1",
        "migops-system",
        "migsyncs",
        {
            "apiVersion": "migops.io/v1alpha1",
            "kind": "MigSync",
            "metadata": {"name": "status-view"},
            "spec": {"url": "https://git.example/config.git"},
        },
    )
    try:
        objects.patch_namespaced_custom_object_status(
            "migops.io",
            "v1alpha1",
            "migops-system",
            "migsyncs",
            "status-view",
            {"status": {"nodes": [{"name": node, "config": "all-2g.20gb", "phase": "InSync", "state": "failed"}]}},
        )
        capsys.readouterr()
        main(
            [
                "status",
                "status-view",
                "-n",
                "migops-system",
                "--nodes",
                "--kubeconfig",
                str(agent_plane.admin_kubeconfig),
            ]
        )
        row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith(node))
        assert "GPUs drifted: GPU 1: extra 1g.10gb@6" in row
    finally:
        objects.delete_namespaced_custom_object("migops.io", "v1alpha1", "migops-system", "migsyncs", "status-view")
    # What differs changes: the annotation and the labels follow.
    _person(agent, "mig-mode", "--gpu", "0", "off")
    _drifted(
        agent_admin,
        node,
        "GPU 0: MIG disabled (config: enabled); GPU 1: extra 1g.10gb@6",
        {"nvidia.com/mig-2g.20gb": "3", "nvidia.com/mig-1g.10gb": "1", "nvidia.com/gpu": "1"},
    )
    _person(agent, "mig-mode", "--gpu", "0", "on")
    _person(agent, "reset", "--gpu", "1")
    _drifted(
        agent_admin,
        node,
        "GPU 0: missing 3 x 2g.20gb; no instances left; GPU 1: missing 3 x 2g.20gb; no instances left",
        {},
    )
    assert labels(agent_admin, node).get("nvidia.com/mig-2g.20gb.count") is None
    # The person puts it back: success again, the annotation and reason go.
    for gpu in ("0", "1"):
        for _ in range(3):
            _person(agent, "create-gi", "--gpu", gpu, "--profile", "2g.20gb")
    _applied(agent_admin, node, "all-2g.20gb")
    assert allocatable(agent_admin, node) == TWO_2G and REASON_ANNOTATION not in annotations(agent_admin, node)
    assert _events(agent_admin, node, "MigDriftResolved")
    assert agent.ops() == before  # reported only, never a driver call


def test_repair_never_destroys_an_instance_with_processes(agent_admin, agents) -> None:
    agent = _start(agent_admin, agents, "drift-busy")
    node = agent.node
    _person(agent, "create-gi", "--gpu", "0", "--profile", "1g.10gb")  # a person's instance at slice 6 ...
    agent.faults(in_use=[{"gpu": 0, "start": 6, "pids": [31337]}])  # ... and their job on it
    until(lambda: state(agent_admin, node) == "failed", 30, "state failed")
    reason = annotations(agent_admin, node)[REASON_ANNOTATION]
    assert "running processes" in reason and "1g.10gb@6 (pids 31337)" in reason
    assert annotations(agent_admin, node)[DRIFT_ANNOTATION] == "GPU 0: extra 1g.10gb@6 (pids 31337)"
    assert allocatable(agent_admin, node) == {"nvidia.com/mig-2g.20gb": "6", "nvidia.com/mig-1g.10gb": "1"}
    time.sleep(3.0)  # retries (backoff 0.5 s doubling to 2 s) keep refusing, before pausing anything
    assert any(i["start"] == 6 for i in agent.gpu_state()["gpus"][0]["instances"])
    assert labels(agent_admin, node)["nvidia.com/gpu.deploy.device-plugin"] == "true"
    agent.faults()  # the job ends: the next retry repairs
    _applied(agent_admin, node, "all-2g.20gb")
    assert not any(i["start"] == 6 for i in agent.gpu_state()["gpus"][0]["instances"])
    assert allocatable(agent_admin, node) == TWO_2G


def test_a_person_flipping_it_back_and_forth_ends_in_failed_with_backoff(agent_admin, agents) -> None:
    agent = _start(agent_admin, agents, "drift-flap", "--drift-max-repairs", "2", "--drift-window", "600")
    node = agent.node
    stop = threading.Event()

    def person() -> None:  # every second, the 2g.20gb at slice 2 of GPU 0 goes, whenever it is back
        while not stop.wait(1.0):
            if any(i["start"] == 2 for i in agent.gpu_state()["gpus"][0]["instances"]):
                main(["sim", "destroy-gi", "--state-file", str(agent.state_file), "--gpu", "0", "--start", "2"])

    flipper = threading.Thread(target=person, daemon=True)
    flipper.start()
    try:
        until(lambda: "drift backoff" in annotations(agent_admin, node).get(REASON_ANNOTATION, ""), 60, "repairs held")
        assert state(agent_admin, node) == "failed"
        assert len(_events(agent_admin, node, "MigDriftRepaired")) == 2
        held = _events(agent_admin, node, "MigDriftRepairHeld")
        assert held and held[-1].type == "Warning" and "after 2 repairs in the last 600s" in held[-1].message
        ops = agent.ops()
        time.sleep(4.0)  # eight intervals: no repair, no loop
        assert agent.ops() == ops and state(agent_admin, node) == "failed"
        assert annotations(agent_admin, node)[DRIFT_ANNOTATION] == "GPU 0: missing 2g.20gb"
        assert allocatable(agent_admin, node) == {"nvidia.com/mig-2g.20gb": "5"}
    finally:
        stop.set()
        flipper.join(5)


def test_drift_while_the_agent_was_down_is_seen_at_start(agent_admin, agents) -> None:
    agent = _start(agent_admin, agents, "drift-restart", "--drift", "report")
    agent.stop()
    _person(agent, "destroy-gi", "--gpu", "1", "--start", "4")
    agent.extra = [e for e in agent.extra if e not in FAST_DRIFT] + ["--drift-interval", "600"]
    agent.start()  # a long interval: only the check at start can see it
    _drifted(agent_admin, agent.node, "GPU 1: missing 2g.20gb", {"nvidia.com/mig-2g.20gb": "5"})
    until(lambda: state(agent_admin, agent.node) == "failed", 30, "reported")


def test_a_clusterpolicy_crd_installed_after_the_agent_started_is_picked_up(agent_admin, agents) -> None:
    """Optional CRDs through one informer with missing_ok: no ClusterPolicy CRD at start means
    the GPU Operator's defaults (strategy single); once the CRD and a policy appear, the agent follows."""
    ext = k8s.ApiextensionsV1Api(agent_admin)
    ext.delete_custom_resource_definition(CRD_NAME)

    def gone() -> bool:
        try:
            ext.read_custom_resource_definition(CRD_NAME)
            return False
        except k8s.exceptions.ApiException as exc:
            return exc.status == 404

    until(gone, 60, "ClusterPolicy CRD deleted")
    try:
        agent = agents("crd-later", "1x0x233010DE")
        set_config(agent_admin, agent.node, "all-balanced")
        _applied(agent_admin, agent.node, "all-balanced")
        assert labels(agent_admin, agent.node)["nvidia.com/mig.strategy"] == "single"
        install_clusterpolicy_crd(agent_admin)
        apply_cluster_policy(agent_admin, "mixed")
        until(
            lambda: labels(agent_admin, agent.node).get("nvidia.com/mig.strategy") == "mixed",
            60,
            "the agent follows the ClusterPolicy installed later",
        )
        until(
            lambda: (
                allocatable(agent_admin, agent.node)
                == {"nvidia.com/mig-1g.10gb": "2", "nvidia.com/mig-2g.20gb": "1", "nvidia.com/mig-3g.40gb": "1"}
            ),
            30,
            "mixed resources",
        )
    finally:
        seed(agent_admin, (), "mixed")  # the plane's CRD and policy, as the other agent tests expect them

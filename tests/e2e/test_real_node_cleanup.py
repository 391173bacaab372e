"""`migops local up --real-node` then `down` (or a crash, then `down`) leaves nothing on the host.

Nothing: no process (kubelet, containerd, shims, containers), mount, network namespace, KUBE-* iptables
chain, bridge or veth, kubepods cgroup, /var/log/containers link, hosts line, CNI file, kernel setting
the kubelet changed, or directory. These tests start their own real node, so they run first in the
session (marker real_node_exclusive), before the `real_node` fixture takes the machine's one.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client as k8s
from kubernetes import config
from polling import until

from migops.local import images, nodeclean, state
from migops.local.binaries import locate
from migops.local.process import is_alive
from migops.local.realnode import NODE_NAME, RealNode, RealNodeBusy, host_lock

pytestmark = [pytest.mark.real_node_exclusive, pytest.mark.cluster, pytest.mark.real_node]
IMAGE = "migops.local/cleanup-busybox:1"


def _cli(home: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "migops", "local", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, "MIGOPS_HOME": str(home)},
    )


def _host_snapshot() -> dict:
    """What the real node touches outside its directory: links, the kernel settings the kubelet writes,
    forwarding, and the host directories its programs create regardless of configuration (their
    existence and entries), /run/netns."""
    dirs = {str(d): sorted(os.listdir(d)) if d.is_dir() else None for d in (*nodeclean.HOST_DIRS, Path("/run/netns"))}
    return {
        "links": sorted(os.listdir("/sys/class/net")),
        "dirs": dirs,
        "sysctls": {k: Path("/proc/sys", k).read_text() for k in nodeclean.KUBELET_SYSCTLS},
        "forwarding": Path("/proc/sys/net/ipv4/ip_forward").read_text(),
    }


def _up_with_a_pod(home: Path) -> tuple[state.LocalState, Path, float]:
    """`local up --real-node`; then a pod with volumes behind a Service (shims, mounts, netns, veth,
    cgroups, log links, kube-proxy chains all exist). The state, the node directory and up's duration."""
    began = time.monotonic()
    up = _cli(home, "up", "--real-node", "--nodes", "1")
    took = time.monotonic() - began
    assert up.returncode == 0, up.stderr
    assert "real node:  migops-node runs pods" in up.stdout
    current = state.load(home)
    assert current is not None and current.real_node
    node_dir = Path(current.real_node)
    RealNode(locate(), state.local_dir(home), node_dir).load_image(images.busybox_archive(IMAGE))
    with config.new_client_from_config(config_file=current.kubeconfig) as api:
        core = k8s.CoreV1Api(api)
        until(lambda: _has_default_sa(core), 30, "the default ServiceAccount")
        core.create_namespaced_pod(
            "default",
            {
                "metadata": {"name": "leftover", "labels": {"app": "leftover"}},
                "spec": {
                    "terminationGracePeriodSeconds": 1,
                    # not on a simulated node (nothing runs there)
                    "nodeSelector": {"kubernetes.io/hostname": NODE_NAME},
                    "containers": [
                        {
                            "name": "main",
                            "image": IMAGE,
                            "imagePullPolicy": "Never",
                            "command": ["sh", "-c", "echo hi; exec sleep 3600"],
                            "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}],
                        }
                    ],
                    "volumes": [{"name": "scratch", "emptyDir": {"medium": "Memory"}}],
                },
            },
        )
        core.create_namespaced_service(
            "default",
            {
                "metadata": {"name": "leftover"},
                "spec": {"selector": {"app": "leftover"}, "ports": [{"port": 80, "targetPort": 8080}]},
            },
        )
        until(lambda: core.read_namespaced_pod("leftover", "default").status.phase == "Running", 90, "the pod running")
    return current, node_dir, took


def _has_default_sa(core: k8s.CoreV1Api) -> bool:
    try:
        core.read_namespaced_service_account("default", "default")
        return True
    except k8s.ApiException:
        return False


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    """A MIGOPS_HOME; `local down` afterwards whatever happened (a test's own down makes it a no-op)."""
    path = tmp_path / "home"
    yield path
    _cli(path, "down")


def _assert_host_as(before: dict) -> None:
    """Nothing new on the host: same links, kernel settings, forwarding; no host directory that was not
    there, and no entry in one that was (the sweep may remove what an earlier crashed node left)."""
    after = _host_snapshot()
    changed = {k: (before[k], after[k]) for k in before if k != "dirs" and before[k] != after[k]}
    for d, entries in after["dirs"].items():
        was = before["dirs"][d]
        if entries is not None and (was is None or not set(entries) <= set(was)):
            changed[d] = (was, entries)
    assert changed == {}, changed


def _kinds(found: list[str]) -> set[str]:
    return {item.split()[0] for item in found}


def test_up_real_node_then_down_leaves_nothing(home: Path, tmp_path: Path) -> None:
    before = _host_snapshot()
    current, node_dir, took = _up_with_a_pod(home)
    print(f"migops local up --real-node: {took:.1f}s")
    try:
        # The node is a GPU node of the default model, with its simulated GPUs under the node directory.
        with config.new_client_from_config(config_file=current.kubeconfig) as api:
            node = k8s.CoreV1Api(api).read_node(NODE_NAME)
        assert node.metadata.labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
        assert node.status.capacity.get("nvidia.com/gpu") == "8"
        assert (node_dir / "gpus" / "gpus.json").is_file()
        # One real node per machine: a second is refused, saying why.
        with pytest.raises(RealNodeBusy, match="another real node runs on this host"):
            host_lock(tmp_path / "second")
        # The check sees what a running node has (so an empty result below means something).
        running = nodeclean.leftovers(node_dir, NODE_NAME)
        assert {"process", "mount", "iptables", "link", "cgroup", "symlink", "directory"} <= _kinds(running), running
    finally:
        down = _cli(home, "down")
    assert down.returncode == 0, down.stderr
    assert nodeclean.leftovers(node_dir, NODE_NAME) == []
    assert not state.local_dir(home).exists()
    _assert_host_as(before)
    os.close(host_lock(tmp_path / "after"))  # the machine's lock is free again


def test_down_after_a_crash_leaves_nothing(home: Path) -> None:
    """Every process SIGKILLed (containerd's shims and the containers live on): down still clears all."""
    before = _host_snapshot()
    current, node_dir, _ = _up_with_a_pod(home)
    try:
        for ref in current.processes.values():
            try:
                os.kill(ref.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        until(lambda: not any(is_alive(r) for r in current.processes.values()), 20, "every process gone")
        orphans = nodeclean.leftovers(node_dir, NODE_NAME)
        assert "process" in _kinds(orphans), orphans  # shims and the container outlive containerd
    finally:
        down = _cli(home, "down")
    assert down.returncode == 0, down.stderr
    assert nodeclean.leftovers(node_dir, NODE_NAME) == []
    _assert_host_as(before)


def test_a_sweep_for_another_owner_touches_nothing(tmp_path: Path) -> None:
    """The node directory and the KUBE-* chains are machine-wide: while the lock names another owner, a
    `down` of a stale home (or a sweep) must leave that owner's running node alone."""
    node_dir = tmp_path / "node"
    (node_dir / "kubelet").mkdir(parents=True)
    try:
        fd = host_lock(tmp_path / "someone-else")
    except RealNodeBusy:
        fd = None  # a real node of someone else's runs right now: the same situation
    try:
        problems = nodeclean.sweep(node_dir, None, tmp_path / "me")
    finally:
        if fd is not None:
            os.close(fd)
    assert len(problems) == 1 and problems[0].startswith("left alone: another real node runs"), problems
    assert (node_dir / "kubelet").is_dir()

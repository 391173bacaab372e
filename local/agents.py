"""`migops local up` runs one simulated agent per node (separate processes); `down` stops them
(migops.local.stack records them with the servers).

Each agent gets the node's GPUs as simulated GPUs (state under `<workdir>/agents/<node>/`), so
labelling a node `nvidia.com/mig.config=<name>` reconfigures them and the node's state label, GFD
labels and allocatable resources follow, as on a GPU Operator cluster. Each agent runs with the
identity it has in a cluster (migops.local.agent_identity): the `migops-agent` ServiceAccount, its
RBAC and the own-node admission policy of manifests/base/agent, and a token naming its node. The GPU
Operator's default MIG ConfigMap is seeded too, if absent, since the agents read their configs from it.

The seeded `nvidia.com/gpu` capacity (field manager `migops-local`) is taken over by each agent on
its first run: it applies the resources it computes with force as `migops-agent` and removes stale
ones, so nothing is left owned twice.

`migops sim ... --node <node>` changes a node's simulated GPUs out of band; its agent checks them every
DRIFT_INTERVAL seconds and repairs what differs from the applied config.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from importlib import resources
from pathlib import Path

from kubernetes import client as k8s
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from migops.api.objects import NodeFacts
from migops.local.process import ProcessRef, spawn

MIG_CONFIGMAP = ("gpu-operator", "default-mig-parted-config")
# Short, so that a change made with `migops sim --node ...` is seen at once (a check is cheap: bench/agent_drift.py).
DRIFT_INTERVAL = 2.0


def agent_dir(workdir: Path, node: str) -> Path:
    return workdir / "agents" / node


def seed_mig_config(api: ApiClient) -> None:
    """NVIDIA's default MIG config, as the GPU Operator installs it (left alone if one exists)."""
    text = resources.files("migops.local").joinpath("data/default-mig-parted-config.yaml").read_text()
    namespace, name = MIG_CONFIGMAP
    try:
        k8s.CoreV1Api(api).create_namespaced_config_map(
            namespace,
            {
                "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "migops-local"}},
                "data": {"config.yaml": text},
            },
            field_manager="migops-local",
        )
    except ApiException as exc:
        if exc.status != 409:
            raise


def kubeconfig_path(workdir: Path, node: str) -> Path:
    """Where the agent of `node` finds its credentials (agent_identity.kubeconfig_for_node writes them)."""
    return agent_dir(workdir, node) / "kubeconfig"


def command(
    node: str,
    gpus: str,
    state_file: Path,
    work: Path,
    kubeconfig: Path,
    *,
    pod_timeout: float = 60,
    retry_base: float = 2,
    retry_max: float = 60,
    drift_interval: float = DRIFT_INTERVAL,
    dra: bool = False,
) -> list[str]:
    """`migops agent` of `node` on simulated GPUs (`gpus`: COUNTxDEVICE_ID, their state in `state_file`),
    changing MIG modes without the settle a real driver needs: the local stack's command line, and the
    benchmarks'."""
    return [
        sys.executable,
        "-m",
        "migops",
        "agent",
        "--node",
        node,
        "--backend",
        "simulated",
        "--gpus",
        gpus,
        "--state-file",
        str(state_file),
        f"--work-dir={work}",
        "--kubeconfig",
        str(kubeconfig),
        "--pod-timeout",
        f"{pod_timeout:g}",
        "--retry-base",
        f"{retry_base:g}",
        "--retry-max",
        f"{retry_max:g}",
        "--mode-change-settle",
        "0",
        "--drift-interval",
        f"{drift_interval:g}",
        *(["--dra", "publish", "--dra-timeout", "30"] if dra else []),
    ]


def start(
    workdir: Path,
    nodes: Iterable[tuple[str, str, int]],
    *,
    state_files: Mapping[str, Path] | None = None,
    dra: bool = False,
) -> dict[str, tuple[subprocess.Popen[bytes], ProcessRef]]:
    """One agent per (node, device ID, GPU count), each a detached process logging to
    <workdir>/logs/agent-<node>.log, with the kubeconfig at kubeconfig_path(); the caller records them
    (migops.local.stack). `state_files` puts a node's simulated GPUs elsewhere than its agent directory
    (the real node's live in its node directory, where an agent pod on it finds them too)."""
    started: dict[str, tuple[subprocess.Popen[bytes], ProcessRef]] = {}
    for node, device_id, count in nodes:
        work = agent_dir(workdir, node)
        gpus = (state_files or {}).get(node, work / "gpus.json")
        argv = command(node, f"{count}x{device_id}", gpus, work, kubeconfig_path(workdir, node), dra=dra)
        started[node] = spawn(argv, workdir / "logs" / f"agent-{node}.log")
    return started


def wait_ready(api: ApiClient, names: Sequence[str], timeout: float = 90.0) -> list[str]:
    """Wait until every node's agent has reported a state; the names of those that did not."""
    core = k8s.CoreV1Api(api)
    deadline = time.monotonic() + timeout
    waiting = list(names)
    while waiting and time.monotonic() < deadline:
        waiting = [n for n in waiting if NodeFacts.from_obj(core.read_node(n), offers=False).state is None]
        if waiting:
            time.sleep(0.3)
    return waiting


def identifying_arguments(workdir: Path) -> tuple[str, ...]:
    """The argument only this workdir's agents are started with, one per node directory."""
    base = workdir / "agents"
    return tuple(f"--work-dir={d}" for d in sorted(base.iterdir())) if base.is_dir() else ()

"""Run simulated agents as separate processes against a real API server, and watch what they do.

Each agent authenticates exactly as in a cluster: with a service-account token bound to a Pod object
on its Node (TokenRequest with boundObjectRef), under the RBAC and the own-node admission policy of
manifests/base/agent/ applied to the API server.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s
from kubernetes.client import ApiClient
from polling import until

from migops.kube import ssa
from migops.local import kubeconfig
from migops.local.cluster import NodeSpec, apply_node, plan_nodes, seed
from migops.local.controlplane import ControlPlane
from migops.mig.catalogue import catalogue

ROOT = Path(__file__).resolve().parents[2]
AGENT_NS = "migops-system"
AGENT_SA = "migops-agent"
# NVIDIA's default config plus configs the tests select; the agents see only their own config's
# content (its digest), so adding or editing another config never disturbs a node.
EXTRA_CONFIGS = """
  gpu3-differs:
    - devices: [0, 1, 2, 4, 5, 6, 7]
      mig-enabled: true
      mig-devices: {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}
    - devices: [3]
      mig-enabled: true
      mig-devices: {"1g.10gb": 4, "3g.40gb": 1}
  dgx-station-balanced:
    - device-filter: "0x20B210DE"
      devices: all
      mig-enabled: true
      mig-devices: {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}
    - device-filter: "0x1FB010DE"
      devices: all
      mig-enabled: false
  too-many:
    - devices: all
      mig-enabled: true
      mig-devices: {"1g.10gb": 8}
"""
DEFAULT_CONFIG = (ROOT / "examples" / "nvidia-default-config.yaml").read_text().rstrip("\n") + EXTRA_CONFIGS


def mig_configmap(text: str = DEFAULT_CONFIG) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "default-mig-parted-config", "namespace": "gpu-operator"},
        "data": {"config.yaml": text},
    }


FAST = ["--pod-timeout", "3", "--retry-base", "0.5", "--retry-max", "2", "--mode-change-settle", "0"]


def kustomize(binaries_dir: Path, path: Path) -> list[dict]:
    out = subprocess.run(
        [str(binaries_dir / "kubectl"), "kustomize", str(path)], capture_output=True, text=True, check=True, timeout=120
    ).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def install_agent_stack(api: ApiClient, binaries_dir: Path) -> None:
    """A GPU Operator cluster with migops installed, as the agents meet it: the gpu-operator namespace, the
    ClusterPolicy CRD and object, manifests/base (the agent's RBAC and own-node admission policy), and the
    MIG ConfigMap with NVIDIA's default config."""
    seed(api, (), "mixed")  # each test seeds its nodes
    for doc in kustomize(binaries_dir, ROOT / "manifests" / "base"):
        # No webhook server runs beside these agents: registering its configurations (they call a Service
        # that does not exist here, failurePolicy Fail) would refuse every MIG ConfigMap write.
        if doc["kind"] not in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
            ssa.apply(api, doc, field_manager="test-install")
    ssa.apply(api, mig_configmap(), field_manager="test-install")


def start_agent(
    api: ApiClient,
    plane: ControlPlane,
    node: str,
    workdir: Path,
    gpus: str = "8x0x233010DE",
    *extra: str,
    seed: bool = True,
    start: bool = True,
    env: dict[str, str] | None = None,
) -> AgentProc:
    """Seed the Node (unless `seed` is false) and start an agent for it under `workdir`, with a token bound
    to a Pod on that node."""
    model, count = gpus.partition("x")[2], gpus.partition("x")[0]
    if seed:
        seed_node(api, node, model.split(",")[0], int(count) if count.isdigit() else 1)
    kc = bound_token_kubeconfig(api, plane.url, plane.ca_pem, node, workdir / f"{node}.kubeconfig")
    proc = AgentProc(node, workdir / node, kc, gpus, list(extra), env)
    return proc.start() if start else proc


def client_pod(api: ApiClient, node: str, name: str, app: str = "nvidia-device-plugin-daemonset") -> None:
    """What the device plugin's DaemonSet runs on the node (no kubelet runs: just the object)."""
    k8s.CoreV1Api(api).create_namespaced_pod(
        "gpu-operator",
        {
            "metadata": {
                "name": name,
                "labels": {"app": app},
                "ownerReferences": [
                    {
                        "apiVersion": "apps/v1",
                        "kind": "DaemonSet",
                        "name": app,
                        "uid": "00000000-0000-0000-0000-000000000001",
                    }
                ],
            },
            "spec": {
                "nodeName": node,
                "nodeSelector": {"nvidia.com/gpu.deploy.device-plugin": "true"},
                "containers": [{"name": "c", "image": "nvcr.io/nvidia/k8s-device-plugin"}],
            },
        },
    )


def delete_client_pod(api: ApiClient, name: str) -> None:
    k8s.CoreV1Api(api).delete_namespaced_pod(name, "gpu-operator", grace_period_seconds=0)


def seed_node(api: ApiClient, name: str, gpu: str = "0x233010DE", count: int = 8, strategy: str = "mixed") -> NodeSpec:
    """A GPU node labelled as `migops local` labels it (GFD + operator labels, nvidia.com/gpu capacity)."""
    spec = plan_nodes(1, [catalogue().resolve(gpu)], count, strategy)[0]
    spec = NodeSpec(
        name,
        spec.gpu,
        spec.gpus,
        spec.gfd_labels,
        {
            **spec.operator_labels,
            "nvidia.com/gpu.deploy.device-plugin": "true",
            "nvidia.com/gpu.deploy.gpu-feature-discovery": "true",
            "nvidia.com/gpu.deploy.dcgm-exporter": "false",
        },
    )
    apply_node(api, spec)
    return spec


def bound_token_kubeconfig(api: ApiClient, url: str, ca_pem: bytes, node: str, out: Path) -> Path:
    """A Pod of the agent's ServiceAccount bound to `node`, and a token bound to that Pod."""
    core = k8s.CoreV1Api(api)
    pod_name = f"migops-agent-{node}"
    try:
        pod = core.read_namespaced_pod(pod_name, AGENT_NS)
    except k8s.exceptions.ApiException:
        pod = core.create_namespaced_pod(
            AGENT_NS,
            {
                "metadata": {"name": pod_name, "labels": {"app.kubernetes.io/name": "migops-agent"}},
                "spec": {
                    "nodeName": node,
                    "serviceAccountName": AGENT_SA,
                    "containers": [{"name": "agent", "image": "ghcr.io/migops/migops:0.1.0"}],
                },
            },
        )
    token = core.create_namespaced_service_account_token(
        AGENT_SA,
        AGENT_NS,
        {
            "spec": {
                "expirationSeconds": 3600,
                "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": pod_name, "uid": pod.metadata.uid},
            }
        },
    )
    return kubeconfig.write(
        out, kubeconfig.build(url, ca_pem, f"system:serviceaccount:{AGENT_NS}:{AGENT_SA}", token=token.status.token)
    )


@dataclass
class AgentProc:
    """One `migops agent --backend simulated` process for one node."""

    node: str
    workdir: Path
    kubeconfig: Path
    gpus: str = "8x0x233010DE"
    extra: list[str] = field(default_factory=list)
    env: dict[str, str] | None = None
    proc: subprocess.Popen | None = None

    @property
    def state_file(self) -> Path:
        return self.workdir / "gpus.json"

    @property
    def faults_file(self) -> Path:
        return self.workdir / "gpus.json.faults"

    @property
    def log(self) -> Path:
        return self.workdir / "agent.log"

    def start(self) -> AgentProc:
        self.workdir.mkdir(parents=True, exist_ok=True)
        argv = [
            sys.executable,
            "-m",
            "migops",
            "agent",
            "--node",
            self.node,
            "--backend",
            "simulated",
            "--gpus",
            self.gpus,
            "--state-file",
            str(self.state_file),
            "--work-dir",
            str(self.workdir),
            "--kubeconfig",
            str(self.kubeconfig),
            *FAST,
            *self.extra,
        ]
        env = {k: v for k, v in (self.env or os.environ).items() if k not in ("KUBECONFIG", "WITH_REBOOT", "NODE_NAME")}
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, cwd=ROOT
            )
        return self

    def faults(self, **faults: Any) -> None:
        tmp = self.faults_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(faults))
        tmp.replace(self.faults_file)

    def gpu_state(self) -> dict[str, Any]:
        return json.loads(self.state_file.read_text())

    def ops(self) -> list[dict[str, int]]:
        return [g["ops"] for g in self.gpu_state()["gpus"]]

    def stop(self, timeout: float = 20.0) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(10)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


def labels(api: ApiClient, node: str) -> dict[str, str]:
    return k8s.CoreV1Api(api).read_node(node).metadata.labels or {}


def annotations(api: ApiClient, node: str) -> dict[str, str]:
    return k8s.CoreV1Api(api).read_node(node).metadata.annotations or {}


def allocatable(api: ApiClient, node: str) -> dict[str, str]:
    """The node's GPU resources (`nvidia.com/...`); CPU, memory and pods are the seeding's."""
    status = k8s.CoreV1Api(api).read_node(node).status
    return {k: v for k, v in (status.allocatable or {}).items() if k.startswith("nvidia.com/")} if status else {}


def set_config(api: ApiClient, node: str, name: str) -> None:
    """What a person or the reconciler does: label the node with a config name."""
    k8s.CoreV1Api(api).patch_node(node, {"metadata": {"labels": {"nvidia.com/mig.config": name}}})


def set_strategy(api: ApiClient, value: str) -> None:
    """What an operator does (`kubectl patch clusterpolicies.nvidia.com/cluster-policy ...`)."""
    k8s.CustomObjectsApi(api).patch_cluster_custom_object(
        "nvidia.com", "v1", "clusterpolicies", "cluster-policy", {"spec": {"mig": {"strategy": value}}}
    )


def state(api: ApiClient, node: str) -> str | None:
    return labels(api, node).get("nvidia.com/mig.config.state")


def wait_failed(api: ApiClient, node: str, timeout: float = 60) -> set[str]:
    """Wait for state `failed`; return every deploy-label value and state seen on the way, so a test
    can assert what never happened (clients paused, `pending`)."""
    seen: set[str] = set()

    def failed() -> bool:
        got = labels(api, node)
        seen.update(v for k, v in got.items() if k.startswith("nvidia.com/gpu.deploy."))
        seen.add(got.get("nvidia.com/mig.config.state", ""))
        return got.get("nvidia.com/mig.config.state") == "failed"

    until(failed, timeout, f"{node}: state failed")
    return seen


def node_events(api: ApiClient, node: str) -> list[Any]:
    items = k8s.CoreV1Api(api).list_namespaced_event("default", field_selector=f"involvedObject.name={node}").items
    return [e for e in items if e.reporting_component == "migops.io/agent"]

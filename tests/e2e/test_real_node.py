"""The real node runs pods: registration, Deployments, DaemonSets, Services, logs, exec, in-pod identity.

Everything through the `real_node` fixture (one control plane serving pods + migops-node for the
session), with images made here from Debian's static busybox (and kubectl) and loaded into the node's
containerd: no registry is reached.
"""

from __future__ import annotations

import subprocess
import time
import urllib.request
import uuid
from collections.abc import Iterator

import pytest
from kubernetes import client as k8s
from polling import until

from migops.local import images, nodenet, ociimage

BUSYBOX_IMAGE = "migops.local/e2e-busybox:1"
KUBECTL_IMAGE = "migops.local/e2e-kubectl:1"


@pytest.fixture(scope="module")
def busybox(real_node) -> str:
    real_node.load_image(images.busybox_archive(BUSYBOX_IMAGE))
    return BUSYBOX_IMAGE


@pytest.fixture
def ns(real_node) -> Iterator[str]:
    """A fresh namespace on the real-node cluster; deleted afterwards (kube-controller-manager finalizes it)."""
    name = f"rn-{uuid.uuid4().hex[:8]}"
    core = k8s.CoreV1Api(real_node.admin)
    core.create_namespace({"metadata": {"name": name}})
    # ServiceAccount admission needs the `default` ServiceAccount, made by kube-controller-manager.
    until(
        lambda: _exists(lambda: core.read_namespaced_service_account("default", name)),
        30,
        f"ServiceAccount {name}/default",
    )
    yield name
    core.delete_namespace(name)


def _exists(read) -> bool:
    try:
        read()
        return True
    except k8s.ApiException as exc:
        if exc.status == 404:
            return False
        raise


def _container(image: str, command: list[str], **extra) -> dict:
    return {
        "name": "main",
        "image": image,
        "imagePullPolicy": "Never",
        "command": command,
        "securityContext": {
            "runAsUser": 65534,
            "runAsNonRoot": True,
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
        },
        **extra,
    }


def _pod_spec(image: str, command: list[str], **extra) -> dict:
    return {"terminationGracePeriodSeconds": 1, "containers": [_container(image, command, **extra)]}


def _workload(kind: str, name: str, labels: dict, spec: dict, replicas: int | None = None) -> dict:
    body: dict = {"selector": {"matchLabels": labels}, "template": {"metadata": {"labels": labels}, "spec": spec}}
    if replicas is not None:
        body["replicas"] = replicas
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": name}, "spec": body}


def _kubectl(real_node, *args: str, timeout: float = 60) -> str:
    proc = subprocess.run(
        [str(real_node.kubectl), f"--kubeconfig={real_node.kubeconfig}", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert proc.returncode == 0, f"kubectl {' '.join(args)}: {proc.stderr}"
    return proc.stdout


def _running_pod(core: k8s.CoreV1Api, ns: str, selector: str) -> k8s.V1Pod:
    def ready() -> k8s.V1Pod | None:
        for pod in core.list_namespaced_pod(ns, label_selector=selector).items:
            if pod.status.phase == "Running" and all(c.ready for c in pod.status.container_statuses or []):
                return pod
        return None

    return until(ready, 90, f"a Running pod {selector} in {ns}")


def test_the_node_registers_ready_untainted_at_its_address(real_node) -> None:
    node = k8s.CoreV1Api(real_node.admin).read_node(real_node.name)
    assert {c.type: c.status for c in node.status.conditions}["Ready"] == "True"
    assert not [t for t in node.spec.taints or [] if t.key == "node.kubernetes.io/not-ready"]
    addresses = {a.type: a.address for a in node.status.addresses}
    assert addresses["InternalIP"] == nodenet.NODE_IP
    assert node.status.node_info.container_runtime_version.startswith("containerd://2.")
    assert node.status.node_info.kubelet_version == "v1.37.2"
    # A GPU node as GFD and the GPU Operator label one, so the agent DaemonSet can run here.
    assert node.metadata.labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert node.metadata.labels["kubernetes.io/hostname"] == real_node.name
    # GPU resources advertised: whole GPUs as seeded, or MIG devices once an agent applied a geometry
    # (tests/e2e/test_deploy.py runs one on this node first, under the mixed strategy).
    gpu_resources = {k: v for k, v in node.status.allocatable.items() if k.startswith("nvidia.com/")}
    assert gpu_resources.get("nvidia.com/gpu") == "8" or any(k.startswith("nvidia.com/mig-") for k in gpu_resources), (
        gpu_resources
    )


def test_a_deployment_of_two_replicas_becomes_ready(real_node, busybox, ns) -> None:
    apps = k8s.AppsV1Api(real_node.admin)
    labels = {"app": "sleeper"}
    began = time.monotonic()
    apps.create_namespaced_deployment(
        ns, _workload("Deployment", "sleeper", labels, _pod_spec(busybox, ["sleep", "3600"]), replicas=2)
    )
    until(lambda: apps.read_namespaced_deployment("sleeper", ns).status.ready_replicas == 2, 120, "2 ready replicas")
    print(f"2-replica Deployment Ready after {time.monotonic() - began:.1f}s")
    pods = k8s.CoreV1Api(real_node.admin).list_namespaced_pod(ns, label_selector="app=sleeper").items
    assert len(pods) == 2
    assert {p.spec.node_name for p in pods} == {real_node.name}
    assert len({p.status.pod_ip for p in pods}) == 2
    assert all(p.status.pod_ip.startswith("10.99.0.") for p in pods)


def test_a_daemonset_runs_on_the_node(real_node, busybox, ns) -> None:
    apps = k8s.AppsV1Api(real_node.admin)
    labels = {"app": "per-node"}
    apps.create_namespaced_daemon_set(
        ns, _workload("DaemonSet", "per-node", labels, _pod_spec(busybox, ["sleep", "3600"]))
    )
    until(
        lambda: (apps.read_namespaced_daemon_set("per-node", ns).status.number_ready or 0) == 1,
        120,
        "the DaemonSet's pod ready",
    )
    pod = _running_pod(k8s.CoreV1Api(real_node.admin), ns, "app=per-node")
    assert pod.spec.node_name == real_node.name


def test_logs_and_exec_work(real_node, busybox, ns) -> None:
    core = k8s.CoreV1Api(real_node.admin)
    marker = uuid.uuid4().hex
    core.create_namespaced_pod(
        ns,
        {
            "metadata": {"name": "talker", "labels": {"app": "talker"}},
            "spec": _pod_spec(busybox, ["sh", "-c", f"echo started {marker}; exec sleep 3600"]),
        },
    )
    _running_pod(core, ns, "app=talker")
    assert until(lambda: f"started {marker}" in _kubectl(real_node, "-n", ns, "logs", "talker"), 30, "the log line")
    out = _kubectl(real_node, "-n", ns, "exec", "talker", "--", "sh", "-c", "id -u; hostname")
    assert out.split() == ["65534", "talker"]


def test_a_cluster_ip_service_answers_the_host_and_a_pod(real_node, busybox, ns) -> None:
    core = k8s.CoreV1Api(real_node.admin)
    apps = k8s.AppsV1Api(real_node.admin)
    marker = uuid.uuid4().hex
    labels = {"app": "web"}
    serve = f"mkdir -p /tmp/www && echo {marker} > /tmp/www/index.html && exec httpd -f -p 8080 -h /tmp/www"
    spec = _pod_spec(
        busybox,
        ["sh", "-c", serve],
        readinessProbe={"tcpSocket": {"port": 8080}, "periodSeconds": 1},
        volumeMounts=[{"name": "tmp", "mountPath": "/tmp"}],
    )
    spec["volumes"] = [{"name": "tmp", "emptyDir": {}}]
    apps.create_namespaced_deployment(ns, _workload("Deployment", "web", labels, spec, replicas=2))
    svc = core.create_namespaced_service(
        ns, {"metadata": {"name": "web"}, "spec": {"selector": labels, "ports": [{"port": 80, "targetPort": 8080}]}}
    )
    ip = svc.spec.cluster_ip
    assert ip.startswith("10.0.0.")
    until(lambda: (apps.read_namespaced_deployment("web", ns).status.ready_replicas or 0) == 2, 120, "web ready")

    def from_host() -> bool:
        try:
            with urllib.request.urlopen(f"http://{ip}/", timeout=3) as resp:  # kube-proxy's DNAT, on our bridge
                return marker in resp.read().decode()
        except OSError:
            return False

    assert until(from_host, 60, f"the Service {ip} from the host")
    core.create_namespaced_pod(
        ns, {"metadata": {"name": "client", "labels": {"app": "client"}}, "spec": _pod_spec(busybox, ["sleep", "3600"])}
    )
    _running_pod(core, ns, "app=client")
    request = f"printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 3 {ip} 80"
    assert until(
        lambda: marker in _kubectl(real_node, "-n", ns, "exec", "client", "--", "sh", "-c", request),
        60,
        f"the Service {ip} from a pod",
    )


def test_a_pods_service_account_token_authenticates_from_inside_the_pod(real_node, ns) -> None:
    """kubectl in a pod with no kubeconfig uses the in-cluster config: the `kubernetes` Service (kube-proxy
    to the API server on the node address), the projected token (ServiceAccount admission, signed by the
    API server) and kube-root-ca.crt (kube-controller-manager)."""
    real_node.load_image(
        images.busybox_archive(KUBECTL_IMAGE, files={"bin/kubectl": ociimage.executable(real_node.kubectl)})
    )
    core = k8s.CoreV1Api(real_node.admin)
    spec = _pod_spec(
        KUBECTL_IMAGE,
        ["kubectl", "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"],
        env=[{"name": "HOME", "value": "/tmp"}],
        volumeMounts=[{"name": "tmp", "mountPath": "/tmp"}],
    )
    spec.update(restartPolicy="Never", volumes=[{"name": "tmp", "emptyDir": {}}])
    core.create_namespaced_pod(ns, {"metadata": {"name": "whoami"}, "spec": spec})

    def finished() -> str | None:
        phase = core.read_namespaced_pod("whoami", ns).status.phase
        return phase if phase in ("Succeeded", "Failed") else None

    phase = until(finished, 120, "the whoami pod to finish")
    log = _kubectl(real_node, "-n", ns, "logs", "whoami")
    assert phase == "Succeeded", log
    assert log.strip().splitlines()[-1] == f"system:serviceaccount:{ns}:default", log

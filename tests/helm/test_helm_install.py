"""`helm install`, `helm test`, `helm upgrade` and `helm uninstall` of the chart on the real node, as a GPU
Operator user would run them: the product image (built from the Dockerfile, imported into migops-node's
containerd), a release namespace of its own (not migops-system, so the chart's namespace handling is
exercised), mode mig-manager (the webhook and the reconciler in pods; NVIDIA's mig-manager would apply).

Runs after tests/e2e (same real node, one session): that module removes its overlay before this one
installs the chart, whose cluster-scoped names are the same.
"""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path

import pytest
from chart_helpers import CHART, run_helm
from kubernetes import client as k8s
from polling import until

from migops.local import agents, cluster, image

RELEASE, NS = "migops", "migops-helm"
BAD = (
    'apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: helm-probe\n  namespace: gpu-operator\n'
    '  labels: {migops.io/mig-config: "true"}\ndata:\n  config.yaml: |\n    version: v1\n    mig-configs:\n'
    '      typo:\n        - devices: all\n          mig-enabled: true\n          mig-devices: {"1g.9gb": 1}\n'
)


def _values(built: image.Built) -> list[str]:
    repository, tag = built.reference.rsplit(":", 1)
    pin = '{"kubernetes.io/hostname":"migops-node"}'
    return [
        "--set",
        "mode=mig-manager",
        "--set",
        f"image.repository={repository}",
        "--set",
        f"image.tag={tag}",
        "--set",
        "image.pullPolicy=Never",
        "--set-json",
        f"webhook.nodeSelector={pin}",
        "--set-json",
        f"reconciler.nodeSelector={pin}",
        "--set",
        "reconciler.replicas=1",
    ]


@pytest.fixture(scope="module")
def installed(real_node, helm: Path):
    built = image.build()
    real_node.load_image(built.archive)
    api = real_node.admin
    cluster.seed(api, [], "mixed")
    agents.seed_mig_config(api)
    kube = ["--kubeconfig", str(real_node.kubeconfig)]
    # What NOTES.txt tells a user to do first: the ClusterPolicy names the chart's MIG ConfigMap (the
    # components may read only that one: without it their informers never sync and no pod is Ready).
    policy = ["patch", "clusterpolicies.nvidia.com/cluster-policy", "--type", "merge", "-p"]
    _kubectl(real_node, kube, *policy, '{"spec":{"migManager":{"config":{"name":"migops-mig-config"}}}}')
    start = time.monotonic()
    run_helm(
        helm,
        "install",
        RELEASE,
        str(CHART),
        "-n",
        NS,
        "--create-namespace",
        "--wait",
        "--timeout",
        "5m",
        *_values(built),
        *kube,
        timeout=420,
    )
    print(f"helm install --wait: {time.monotonic() - start:.1f}s")
    yield real_node, built, kube
    # What uninstall must leave: no object of the release anywhere (the webhook configurations included,
    # so nothing is locked out); only the CRD (Helm's rule for crds/) and the namespace Helm created.
    run_helm(helm, "uninstall", RELEASE, "-n", NS, "--wait", "--timeout", "3m", *kube, check=False)
    subprocess.run(
        [str(real_node.kubectl), *kube, "delete", "namespace", NS, "--wait=true", "--timeout=120s"],
        capture_output=True,
        timeout=180,
    )
    _kubectl(real_node, kube, *policy, '{"spec":{"migManager":{"config":{"name":"default-mig-parted-config"}}}}')


def _kubectl(real_node, kube: list[str], *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(real_node.kubectl), *kube, *args], input=input, capture_output=True, text=True, timeout=120
    )


def _denied(real_node, kube: list[str]) -> str:
    out = _kubectl(real_node, kube, "apply", "--dry-run=server", "-f", "-", input=BAD)
    return out.stderr


def test_install_brings_every_pod_to_ready_and_the_webhook_denies_a_bad_config(installed) -> None:
    real_node, _, kube = installed
    pods = k8s.CoreV1Api(real_node.admin).list_namespaced_pod(NS, label_selector="app.kubernetes.io/instance=migops")
    names = sorted(p.metadata.name for p in pods.items)
    assert len([n for n in names if n.startswith("migops-webhook-")]) == 2, names
    assert len([n for n in names if n.startswith("migops-reconciler-")]) == 1, names
    for pod in pods.items:
        ready = {c.type: c.status for c in pod.status.conditions or ()}.get("Ready")
        assert ready == "True", (pod.metadata.name, pod.status.phase)
        assert pod.spec.node_name == "migops-node"
    message = _denied(real_node, kube)
    assert "denied by migops" in message and "1g.9gb" in message and "[unknown-profile]" in message, message


def test_helm_test_hook_passes(installed, helm: Path) -> None:
    _, _, kube = installed
    out = run_helm(helm, "test", RELEASE, "-n", NS, "--timeout", "3m", *kube, check=False, timeout=240)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Phase:          Succeeded" in out.stdout, out.stdout


def test_upgrade_rolls_out_without_an_admission_gap(installed, helm: Path) -> None:
    """webhook.replicas 2 -> 3 (a rolling update of the webhook pods): every review made meanwhile is
    answered by migops (a denial of the bad config), none fails at the API server."""
    real_node, built, kube = installed
    answers: list[str] = []
    stop = threading.Event()

    def probe() -> None:
        while not stop.is_set():
            answers.append(_denied(real_node, kube))
            time.sleep(0.2)

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    try:
        run_helm(
            helm,
            "upgrade",
            RELEASE,
            str(CHART),
            "-n",
            NS,
            "--wait",
            "--timeout",
            "5m",
            *_values(built),
            "--set",
            "webhook.replicas=3",
            "--set",
            "webhook.resources.requests.cpu=50m",
            *kube,
            timeout=420,
        )
        time.sleep(2)
    finally:
        stop.set()
        thread.join(timeout=60)
    gaps = [a for a in answers if "denied by migops" not in a]
    assert len(answers) >= 5 and not gaps, (len(answers), gaps[:3])
    deploy = k8s.AppsV1Api(real_node.admin).read_namespaced_deployment("migops-webhook", NS)
    assert deploy.spec.replicas == 3 and deploy.status.ready_replicas == 3


def test_uninstall_leaves_no_object_of_the_release(installed, helm: Path) -> None:
    real_node, _, kube = installed
    run_helm(helm, "uninstall", RELEASE, "-n", NS, "--wait", "--timeout", "3m", *kube, timeout=240)
    kinds = (
        "all,configmaps,secrets,serviceaccounts,roles,rolebindings,clusterroles,clusterrolebindings,"
        "validatingwebhookconfigurations,mutatingwebhookconfigurations,validatingadmissionpolicies,"
        "validatingadmissionpolicybindings,poddisruptionbudgets,cronjobs,migsyncs"
    )

    def nothing_left() -> bool:
        # The pods go after their ReplicaSets (garbage collection, then a graceful stop): waited for.
        left = _kubectl(real_node, kube, "get", kinds, "-A", "-l", "app.kubernetes.io/part-of=migops", "-o", "name")
        assert left.returncode == 0, left.stderr
        return left.stdout.split() == []

    until(nothing_left, timeout=120, what="every object of the release gone", interval=1.0)
    webhooks = _kubectl(
        real_node, kube, "get", "validatingwebhookconfigurations,mutatingwebhookconfigurations", "-o", "name"
    )
    assert "migops" not in webhooks.stdout
    # Nothing is locked out: the bad config is now judged by no one (the dry-run succeeds).
    out = _kubectl(real_node, kube, "apply", "--dry-run=server", "-f", "-", input=BAD)
    assert out.returncode == 0, out.stderr

"""A control plane of its own for the webhook tests, with the webhook really running and registered.

Its own (not the session's): the webhook's configurations intercept Nodes, ConfigMaps, Pods and
ClusterPolicies, which other packages' tests write freely, and these tests need a known cluster:
gpu-node-1 and gpu-node-3 with 8 x H100 SXM5 80GB, gpu-node-2 with 8 x A100 SXM4 40GB, the GPU
Operator's ClusterPolicy and NVIDIA's default MIG ConfigMap. The webhook is `migops webhook` as
`migops local up` starts it: a gunicorn process on loopback, called by the API server over TLS.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator

import pytest
from kubernetes import client as k8s
from webhook_helpers import A100, DEFAULT_CONFIG, H100, MANAGER, Direct, configmap

from migops.kube import ssa
from migops.local import cluster
from migops.local import webhook as local_webhook
from migops.local.binaries import locate
from migops.local.controlplane import ControlPlane
from migops.local.process import stop
from migops.mig.catalogue import catalogue


@pytest.fixture(scope="package")
def plane() -> Iterator[ControlPlane]:
    with ControlPlane(locate()) as cp:
        yield cp


@pytest.fixture(scope="package")
def api(plane: ControlPlane) -> Iterator[k8s.ApiClient]:
    with plane.api_client() as client:
        nodes = cluster.plan_nodes(3, [catalogue().resolve(H100), catalogue().resolve(A100)], 8, "mixed")
        cluster.seed(client, nodes, "mixed")
        ssa.apply(client, configmap(DEFAULT_CONFIG), field_manager=MANAGER)
        yield client


@pytest.fixture(scope="package")
def hook(plane: ControlPlane, api: k8s.ApiClient) -> Iterator[local_webhook.LocalWebhook]:
    started = local_webhook.start(api, plane.workdir, plane.admin_kubeconfig, log=plane.logs / "webhook.log")
    try:
        yield started
    finally:
        stop(started.ref)


@pytest.fixture(scope="package")
def kubectl(plane: ControlPlane, hook: local_webhook.LocalWebhook) -> Callable[..., subprocess.CompletedProcess[str]]:
    binary = str(locate().kubectl)
    env = {**os.environ, "KUBECONFIG": str(plane.admin_kubeconfig)}

    def run(*args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([binary, *args], env=env, input=input, capture_output=True, text=True, timeout=60)

    return run


@pytest.fixture
def cluster_state(api: k8s.ApiClient, hook: local_webhook.LocalWebhook) -> Iterator[k8s.ApiClient]:
    """The known state before and after a test: strategy mixed, every node on all-disabled, the
    default ConfigMap (written through the webhook, so each write is also checked)."""

    def reset() -> None:
        cluster.apply_cluster_policy(api, "mixed")
        for i in (1, 2, 3):
            ssa.apply(
                api,
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {"name": f"gpu-node-{i}", "labels": {"nvidia.com/mig.config": "all-disabled"}},
                },
                field_manager="gpu-operator",
                force=True,
            )
        ssa.apply(api, configmap(DEFAULT_CONFIG), field_manager=MANAGER, force=True)

    reset()
    yield api
    reset()


@pytest.fixture
def direct(hook: local_webhook.LocalWebhook) -> Direct:
    # Per test, the bundle as it is now: test_webhook_lifecycle rotates the CA, and a client built before
    # that would fail the TLS handshake with the new serving certificate.
    return Direct(hook.url, (hook.certs / "ca-bundle.crt").read_bytes())

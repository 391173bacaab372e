"""GitOps safety (applying the same object twice changes nothing), failurePolicy with the webhook
down, and certificate rotation under load through the API server."""

from __future__ import annotations

import threading
import time

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from webhook_helpers import CM_NAME, CM_NS, DEFAULT_CONFIG, configmap, eventually

from migops.certs.publish import publish_ca_bundle
from migops.certs.rotation import DirectoryStore, certificates, rotate
from migops.kube import ssa
from migops.local.ports import free_ports
from migops.webhook.registration import register

pytestmark = pytest.mark.usefixtures("cluster_state")


def test_server_side_apply_twice_changes_nothing(api, kubectl) -> None:
    core = k8s.CoreV1Api(api)
    body = configmap(
        DEFAULT_CONFIG.replace("all-disabled:", "all-disabled:  # gitops", 1),
        name="gitops-copy",
        labels={"migops.io/mig-config": "true"},
    )
    for manager in ("argocd-controller", "kustomize-controller"):
        ssa.apply(api, body, field_manager=manager, force=True)
        first = core.read_namespaced_config_map("gitops-copy", CM_NS)
        assert first.metadata.annotations["migops.io/validated-strategy"] == "mixed"
        assert first.metadata.annotations["migops.io/config-digest"].startswith("sha256:")
        ssa.apply(api, body, field_manager=manager, force=True)
        second = core.read_namespaced_config_map("gitops-copy", CM_NS)
        assert second.metadata.resource_version == first.metadata.resource_version
        assert second.to_dict() == first.to_dict()
    # A value the user writes is theirs: kept, not rewritten.
    mine = {**body, "metadata": {**body["metadata"], "annotations": {"migops.io/validated-strategy": "as-in-git"}}}
    ssa.apply(api, mine, field_manager="argocd-controller", force=True)
    got = core.read_namespaced_config_map("gitops-copy", CM_NS)
    assert got.metadata.annotations["migops.io/validated-strategy"] == "as-in-git"
    ssa.apply(api, mine, field_manager="argocd-controller", force=True)
    assert (
        core.read_namespaced_config_map("gitops-copy", CM_NS).metadata.resource_version == got.metadata.resource_version
    )
    core.delete_namespaced_config_map("gitops-copy", CM_NS)
    # Client-side apply (kubectl apply, Argo CD's default) is just as stable.
    import yaml

    manifest = yaml.safe_dump(configmap(DEFAULT_CONFIG, name="csa-copy", labels={"migops.io/mig-config": "true"}))
    assert kubectl("apply", "-f", "-", input=manifest).returncode == 0
    rv = core.read_namespaced_config_map("csa-copy", CM_NS).metadata.resource_version
    out = kubectl("apply", "-f", "-", input=manifest)
    assert out.returncode == 0 and "unchanged" in out.stdout
    assert core.read_namespaced_config_map("csa-copy", CM_NS).metadata.resource_version == rv
    core.delete_namespaced_config_map("csa-copy", CM_NS)


def test_failure_policy_with_the_webhook_down(api, hook) -> None:
    """Fail for MIG ConfigMaps, Nodes and ClusterPolicies; Ignore for Pods."""
    bundle = (hook.certs / "ca-bundle.crt").read_bytes()
    (dead,) = free_ports(1)
    core = k8s.CoreV1Api(api)
    edited = {"data": {"config.yaml": DEFAULT_CONFIG + "# edited\n"}}
    register(api, f"https://127.0.0.1:{dead}", bundle, field_manager="migops-local")
    try:

        def fails_closed() -> None:
            with pytest.raises(ApiException) as exc:
                core.patch_namespaced_config_map(CM_NAME, CM_NS, edited, dry_run="All")
            assert "failed calling webhook" in exc.value.body, exc.value.body

        eventually(fails_closed)
        # A write that leaves the MIG content as it is never reaches the webhook (matchConditions).
        core.patch_namespaced_config_map(CM_NAME, CM_NS, {"metadata": {"labels": {"x": "1"}}}, dry_run="All")
        with pytest.raises(ApiException) as exc:
            core.patch_node(
                "gpu-node-1", {"metadata": {"labels": {"nvidia.com/mig.config": "all-1g.10gb"}}}, dry_run="All"
            )
        assert "failed calling webhook" in exc.value.body
        with pytest.raises(ApiException) as exc:
            k8s.CustomObjectsApi(api).patch_cluster_custom_object(
                "nvidia.com",
                "v1",
                "clusterpolicies",
                "cluster-policy",
                {"spec": {"mig": {"strategy": "single"}}},
                dry_run="All",
            )
        assert "failed calling webhook" in exc.value.body
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p", "namespace": "default"},
            "spec": {
                "containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/mig-1g.10g": "1"}}}]
            },
        }
        core.create_namespaced_pod("default", pod, dry_run="All")  # Ignore: admitted, even with a typo
        core.patch_node("gpu-node-1", {"metadata": {"labels": {"example.com/other": "1"}}})  # never sent
    finally:
        register(api, hook.url, bundle, field_manager="migops-local")
    eventually(lambda: core.patch_namespaced_config_map(CM_NAME, CM_NS, edited, dry_run="All"))


def test_rotation_under_load_drops_no_request(api, hook) -> None:
    """Forced CA + serving certificate rotation while reviews flow through the API server: every
    request answered by the webhook, the bundle holds old + new CA during the switch."""
    core = k8s.CoreV1Api(api)
    store = DirectoryStore(hook.certs)
    stop = threading.Event()
    results: list[str] = []
    lock = threading.Lock()

    def load() -> None:
        while not stop.is_set():
            try:
                # A content change (dry-run: nothing is stored), so each write reaches the webhook.
                core.patch_namespaced_config_map(
                    CM_NAME, CM_NS, {"data": {"config.yaml": DEFAULT_CONFIG + "# load\n"}}, dry_run="All"
                )
                outcome = "ok"
            except ApiException as exc:
                outcome = f"{exc.status}: {exc.body[:200]}"
            with lock:
                results.append(outcome)

    threads = [threading.Thread(target=load) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        time.sleep(1.0)
        published: list[int] = []

        def publish(bundle: bytes) -> None:
            published.append(len(certificates(bundle)))
            publish_ca_bundle(api, bundle, ["migops-webhook"])

        old_ca = store.load().ca.cert_pem
        steps = rotate(
            store,
            dns_names=["localhost"],
            ip_addresses=["127.0.0.1"],
            publish=publish,
            settle=lambda: time.sleep(3.0),
            force=True,
        ).steps
        time.sleep(2.0)
        steps += rotate(store, dns_names=["localhost"], ip_addresses=["127.0.0.1"], publish=publish).steps
        time.sleep(2.0)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert published == [2, 1], steps  # old + new during the switch, then the new one alone
    assert store.load().ca.cert_pem != old_ca
    bad = [r for r in results if r != "ok"]
    assert len(results) > 20 and not bad, (len(results), bad[:3])
    config = k8s.AdmissionregistrationV1Api(api).read_validating_webhook_configuration("migops-webhook")
    managers = {m.manager for m in config.metadata.managed_fields}
    assert "migops-certs" in managers

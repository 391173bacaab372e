"""manifests/base: rendered by kustomize, accepted by the real API server (server-side dry-run, then
created), and shaped as the issue asks (replicas, PDB, probes, non-root, read-only root filesystem,
scoped webhooks, read-only RBAC)."""

from __future__ import annotations

import yaml
from kubernetes import client as k8s
from webhook_helpers import ROOT

from migops.webhook.registration import in_cluster

BASE = ROOT / "manifests" / "base"


def _rendered(kubectl) -> list[dict]:
    out = kubectl("kustomize", str(BASE))
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def test_webhook_configurations_file_is_the_generated_one() -> None:
    """The chart's webhook configurations (rendered into manifests/) are what `migops local` registers."""
    shipped = yaml.safe_load_all((BASE / "webhook" / "webhook-configurations.yaml").read_text())
    assert {d["kind"]: d for d in shipped if d} == {d["kind"]: d for d in in_cluster()}


def test_shape(kubectl) -> None:
    docs = {(d["kind"], d["metadata"]["name"]): d for d in _rendered(kubectl)}
    deployment = docs[("Deployment", "migops-webhook")]
    assert deployment["metadata"]["namespace"] == "migops-system" and deployment["spec"]["replicas"] == 2
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert docs[("PodDisruptionBudget", "migops-webhook")]["spec"]["minAvailable"] == 1
    assert docs[("Namespace", "migops-system")]["metadata"]["labels"]["migops.io/webhook"] == "skip"
    verbs = {v for rule in docs[("ClusterRole", "migops-webhook")]["rules"] for v in rule["verbs"]}
    assert verbs == {"get", "list", "watch"}
    for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
        for hook in docs[(kind, "migops-webhook")]["webhooks"]:
            assert hook["sideEffects"] == "None" and 1 <= hook["timeoutSeconds"] <= 5
            assert hook["clientConfig"]["service"] == {
                "name": "migops-webhook",
                "namespace": "migops-system",
                "port": 443,
                "path": hook["clientConfig"]["service"]["path"],
            }
            exprs = hook["namespaceSelector"]["matchExpressions"]
            assert {"key": "migops.io/webhook", "operator": "NotIn", "values": ["skip"]} in exprs
            assert any("kube-system" in e["values"] for e in exprs)
            # Pods and the DRA objects (warnings only) are never held up by the webhook.
            warn_only = hook["name"].startswith(
                ("pods.", "resourceclaims.", "resourceclaimtemplates.", "deviceclasses.")
            )
            wanted = "Fail" if kind.startswith("Validating") and not warn_only else "Ignore"
            assert hook["failurePolicy"] == wanted, hook["name"]
            resources = {r for rule in hook["rules"] for r in rule["resources"]}
            if resources & {"nodes", "pods", "configmaps"}:
                assert hook.get("matchConditions"), hook["name"]


def test_applied_to_the_api_server(kubectl, api) -> None:
    # The webhook configurations under another name: the running webhook's own keep theirs (a url,
    # where these name the Service). They are removed at once: they point at a Service with no pods.
    docs = _rendered(kubectl)
    for d in docs:
        if d["kind"].endswith("WebhookConfiguration"):
            d["metadata"]["name"] = "manifest-test"
    namespace = [d for d in docs if d["kind"] == "Namespace"]
    rest = yaml.safe_dump_all([d for d in docs if d["kind"] != "Namespace"])
    # A server-side dry-run persists nothing, so the namespace must exist for the rest to be checked.
    assert kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump_all(namespace)).returncode == 0
    try:
        out = kubectl("apply", "--server-side", "--dry-run=server", "-f", "-", input=rest)
        assert out.returncode == 0, out.stderr
        assert (
            k8s.AdmissionregistrationV1Api(api)
            .list_validating_webhook_configuration(field_selector="metadata.name=manifest-test")
            .items
            == []
        )
        out = kubectl("create", "-f", "-", input=rest)
        assert out.returncode == 0, out.stderr
        assert k8s.AppsV1Api(api).read_namespaced_deployment("migops-webhook", "migops-system").spec.replicas == 2
        hooks = k8s.AdmissionregistrationV1Api(api).read_validating_webhook_configuration("manifest-test").webhooks
        assert [h.name for h in hooks][:2] == ["configmaps.validate.migops.io", "nodes.validate.migops.io"]
    finally:
        for kind in ("validatingwebhookconfiguration", "mutatingwebhookconfiguration"):
            kubectl("delete", kind, "manifest-test", "--ignore-not-found")


def test_network_policy_component_admits_only_non_pod_sources_to_the_webhook_port(kubectl, api, tmp_path) -> None:
    """manifests/overlays/components/webhook-network-policy, added to the base: it selects the webhook's
    pods, opens only their HTTPS port, and only to sources outside the pod network; the API server
    accepts it (it cannot enforce it: the local control plane has no CNI, so enforcement is not tested)."""
    import os

    overlay = tmp_path / "test-network-policy"
    overlay.mkdir()
    components = ROOT / "manifests" / "overlays" / "components"
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [os.path.relpath(BASE, overlay)],
                "components": [os.path.relpath(components / "webhook-network-policy", overlay)],
            }
        )
    )
    out = kubectl("kustomize", str(overlay))
    assert out.returncode == 0, out.stderr
    docs = {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(out.stdout) if d}
    policy = docs[("NetworkPolicy", "migops-webhook")]
    pod = docs[("Deployment", "migops-webhook")]["spec"]["template"]
    assert policy["metadata"]["namespace"] == "migops-system"
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    (rule,) = policy["spec"]["ingress"]
    (port,) = pod["spec"]["containers"][0]["ports"]
    assert rule["ports"] == [{"port": port["containerPort"], "protocol": "TCP"}]
    (source,) = rule["from"]
    assert set(source) == {"ipBlock"} and source["ipBlock"]["except"], "every pod is shut out"
    for doc in docs.values():  # no other policy selects the reconciler's or agents' pods
        if doc["kind"] == "NetworkPolicy":
            assert doc["metadata"]["name"] == "migops-webhook"
    ns = yaml.safe_dump({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "migops-system"}})
    assert kubectl("apply", "--server-side", "-f", "-", input=ns).returncode == 0
    out = kubectl("apply", "--server-side", "--dry-run=server", "-f", "-", input=yaml.safe_dump(policy))
    assert out.returncode == 0, out.stderr

"""Each rule through the real API server, the webhook registered and called over TLS: `kubectl apply`
(also --dry-run=server) and the Python client, denied with the reason; good objects admitted."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from webhook_helpers import CM_NAME, CM_NS, DEFAULT_CONFIG, MANAGER, configmap, eventually

from migops.kube import ssa

pytestmark = pytest.mark.usefixtures("cluster_state")

UNKNOWN_PROFILE = """version: v1
mig-configs:
  typo:
    - devices: all
      mig-enabled: true
      mig-devices: {"1g.9gb": 7}
"""
OVERFULL = """version: v1
mig-configs:
  three-halves:
    - device-filter: "0x233010DE"
      devices: all
      mig-enabled: true
      mig-devices: {"3g.40gb": 3}
"""
H100_ONLY = """version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false
  small:
    - devices: all
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}
"""

# A billion laughs: nine levels of ten aliases each.
LAUGHS = (
    "l0: &l0 ["
    + ", ".join(['"lol"'] * 10)
    + "]\n"
    + "".join(f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 10) + "]\n" for i in range(1, 9))
)


def _manifest(obj: dict) -> str:
    return yaml.safe_dump(obj)


def _label(api: k8s.ApiClient, node: str, value: str | None, *, dry_run: bool = False) -> None:
    body = {"metadata": {"labels": {"nvidia.com/mig.config": value}}}
    k8s.CoreV1Api(api).patch_node(node, body, **({"dry_run": "All"} if dry_run else {}))


def _denied(exc: pytest.ExceptionInfo[ApiException]) -> str:
    assert exc.value.status in (400, 403, 422), exc.value
    return json.loads(exc.value.body)["message"]


# ------------------------------------------------------------------------------------------ ConfigMaps
def test_default_config_admitted_with_short_merged_warnings(kubectl) -> None:
    # A content change: re-applying what is stored is never sent to the webhook (matchConditions).
    out = kubectl(
        "apply",
        "--server-side",
        "--field-manager",
        MANAGER,
        "--force-conflicts",
        "-f",
        "-",
        input=_manifest(configmap(DEFAULT_CONFIG + "# reviewed\n")),
    )
    assert out.returncode == 0, out.stderr
    warnings = [line.removeprefix("Warning: ") for line in out.stderr.splitlines() if line.startswith("Warning: ")]
    assert warnings, out.stderr
    assert all(len(w) <= 120 for w in warnings), warnings
    assert len({w.split("[")[-1] for w in warnings}) == len(warnings)  # one line per rule
    assert any("fits-some-gpus" in w and "cannot serve nodes gpu-node-1, gpu-node-3" in w for w in warnings), warnings


@pytest.mark.parametrize("dry_run", [False, True])
def test_unknown_profile_denied_by_kubectl(kubectl, dry_run: bool) -> None:
    args = ["apply", "-f", "-"] + (["--dry-run=server"] if dry_run else [])
    out = kubectl(
        *args,
        input=_manifest(
            configmap(UNKNOWN_PROFILE, name="custom", namespace="default", labels={"migops.io/mig-config": "true"})
        ),
    )
    assert out.returncode == 1
    assert 'denied the request' in out.stderr and "[unknown-profile]" in out.stderr, out.stderr
    assert 'mig-configs.typo[0].mig-devices."1g.9gb"' in out.stderr and "[fits-no-gpu]" in out.stderr


@pytest.mark.parametrize("dry_run", [False, True])
def test_unplaceable_geometry_denied_by_python_client(api, dry_run: bool) -> None:
    body = configmap(OVERFULL, name="overfull", namespace="default", labels={"migops.io/mig-config": "true"})
    with pytest.raises(ApiException) as exc:
        k8s.CoreV1Api(api).create_namespaced_config_map("default", body, **({"dry_run": "All"} if dry_run else {}))
    message = _denied(exc)
    assert "[count-exceeds-max]" in message and "3 x 3g.40gb" in message


def test_parse_errors_and_bad_payloads_denied_with_paths(api) -> None:
    core = k8s.CoreV1Api(api)
    cases = {
        "version: v2\nmig-configs: {}\n": "[unknown-version]",
        "version: v1\nmig-configs:\n  a: [{devices: all}]\n": "mig-configs.a[0].mig-enabled",
        LAUGHS: "excessive aliasing",  # go-yaml's own alias limit comes before migops's node bound
        "[" * 5000: "[yaml-too-deep]",
    }
    for text, expected in cases.items():
        with pytest.raises(ApiException) as exc:
            core.create_namespaced_config_map(
                CM_NS, configmap(text, name="bad-parse", labels={"migops.io/mig-config": "true"}), dry_run="All"
            )
        assert expected in _denied(exc), text[:40]
    binary = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": CM_NAME, "namespace": CM_NS},
        "binaryData": {"config.yaml": "dmVyc2lvbjogdjEK"},
    }
    with pytest.raises(ApiException) as exc:
        core.replace_namespaced_config_map(CM_NAME, CM_NS, binary, dry_run="All")
    assert "[configmap-binary-data]" in _denied(exc) and "[configmap-key]" in _denied(exc)


def test_other_configmaps_and_skipped_namespaces_are_not_checked(api) -> None:
    core = k8s.CoreV1Api(api)
    garbage = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "app", "namespace": "default"},
        "data": {"settings.yaml": "not: [a mig config"},
    }
    core.create_namespaced_config_map("default", garbage, dry_run="All")
    for ns in ("kube-system", "migops-system"):
        try:
            core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        except ApiException as exc:
            assert exc.status == 409
    ssa.apply(
        api,
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": "migops-system", "labels": {"migops.io/webhook": "skip"}},
        },
        field_manager=MANAGER,
    )
    for ns in ("kube-system", "migops-system"):
        labelled = configmap(UNKNOWN_PROFILE, name="ignored", namespace=ns, labels={"migops.io/mig-config": "true"})
        eventually(lambda: core.create_namespaced_config_map(ns, labelled, dry_run="All"))


def test_without_a_migsync_a_gitops_tool_writes_the_configmap_in_force(plane, api) -> None:
    """The webhook alone (Flux or Argo CD syncing the MIG ConfigMap, no MigSync): the tool's identity
    changes the content of the ConfigMap in force, judged on its content only."""
    kubeconfig = plane.kubeconfig_for("system:serviceaccount:argocd:argocd-application-controller", ("system:masters",))
    edited = DEFAULT_CONFIG + "# applied by the GitOps tool\n"
    with plane.api_client(kubeconfig) as tool:
        core = k8s.CoreV1Api(tool)
        core.patch_namespaced_config_map(CM_NAME, CM_NS, {"data": {"config.yaml": edited}})
        assert k8s.CoreV1Api(api).read_namespaced_config_map(CM_NAME, CM_NS).data["config.yaml"] == edited
        with pytest.raises(ApiException) as exc:
            core.patch_namespaced_config_map(CM_NAME, CM_NS, {"data": {"config.yaml": UNKNOWN_PROFILE}})
        message = json.loads(exc.value.body)["message"]
        assert "[unknown-profile]" in message and "[git-owned]" not in message, message


def test_removing_or_deleting_a_config_in_use_is_denied_naming_the_nodes(api) -> None:
    _label(api, "gpu-node-1", "all-1g.10gb")
    _label(api, "gpu-node-3", "all-1g.10gb")
    removed = DEFAULT_CONFIG.replace("  all-1g.10gb:\n", "  renamed-1g.10gb:\n", 1)
    assert removed != DEFAULT_CONFIG
    core = k8s.CoreV1Api(api)

    def removal_denied() -> None:
        with pytest.raises(ApiException) as exc:
            core.patch_namespaced_config_map(CM_NAME, CM_NS, {"data": {"config.yaml": removed}}, dry_run="All")
        message = _denied(exc)
        assert "[config-in-use]" in message and "gpu-node-1, gpu-node-3" in message, message

    eventually(removal_denied)
    with pytest.raises(ApiException) as exc:
        core.delete_namespaced_config_map(CM_NAME, CM_NS)
    assert exc.value.status == 403 and "gpu-node-1" in _denied(exc)


def test_config_that_becomes_multi_profile_under_single_is_denied(api) -> None:
    ssa.apply(api, configmap(H100_ONLY), field_manager=MANAGER, force=True)

    def labelled() -> None:  # denied (config-not-found) until the webhook's informer has the new ConfigMap
        try:
            _label(api, "gpu-node-1", "small")
        except ApiException as exc:
            raise AssertionError(exc.body) from None

    eventually(labelled)
    from migops.local.cluster import apply_cluster_policy

    eventually(lambda: apply_cluster_policy(api, "single"))
    mixed = H100_ONLY.replace('{"1g.10gb": 7}', '{"1g.10gb": 3, "2g.20gb": 2}')

    def denied() -> None:
        with pytest.raises(ApiException) as exc:
            ssa.apply(api, configmap(mixed), field_manager=MANAGER, force=True, dry_run=True)
        message = _denied(exc)
        assert "[strategy-mismatch]" in message and "gpu-node-1" in message, message

    eventually(denied)


def _reviews(direct, kind: str) -> dict[str, float]:
    """Reviews the webhook answered so far for `kind`, by endpoint (validate, mutate)."""
    counts = {"validate": 0.0, "mutate": 0.0}
    for line in direct.get("/metrics").data.decode().splitlines():
        if line.startswith("migops_webhook_requests_total{") and f'kind="{kind}"' in line:
            endpoint = line.split('endpoint="', 1)[1].split('"', 1)[0]
            counts[endpoint] += float(line.split()[-1])
    return counts


def test_configmap_writes_that_keep_the_content_never_reach_the_webhook(api, direct) -> None:
    """matchConditions: an UPDATE that leaves data, binaryData and the migops label as they are is
    not sent (GitOps re-applies, label and annotation edits); one that changes them is, once to
    each webhook; a write that drops the digest annotation goes to the mutation only, which restores it."""
    core = k8s.CoreV1Api(api)
    before = _reviews(direct, "ConfigMap")
    ssa.apply(api, configmap(DEFAULT_CONFIG), field_manager=MANAGER, force=True)  # as Flux re-applies it
    ssa.apply(api, configmap(DEFAULT_CONFIG), field_manager="argocd-controller")  # a second manager, same content
    core.patch_namespaced_config_map(CM_NAME, CM_NS, {"metadata": {"labels": {"team": "gpu"}}})
    core.patch_namespaced_config_map(CM_NAME, CM_NS, {"metadata": {"annotations": {"note": "x"}}})
    core.patch_namespaced_config_map(CM_NAME, CM_NS, {"metadata": {"labels": {"team": "ml"}}}, dry_run="All")
    assert _reviews(direct, "ConfigMap") == before
    edited = DEFAULT_CONFIG.replace('"1g.10gb": 7', '"1g.10gb": 6', 1)
    assert edited != DEFAULT_CONFIG
    ssa.apply(api, configmap(edited), field_manager=MANAGER, force=True)
    assert _reviews(direct, "ConfigMap") == {"validate": before["validate"] + 1, "mutate": before["mutate"] + 1}
    digest = core.read_namespaced_config_map(CM_NAME, CM_NS).metadata.annotations["migops.io/config-digest"]
    ssa.apply(api, configmap(edited), field_manager=MANAGER, force=True)  # the next interval: nothing sent
    core.patch_namespaced_config_map(CM_NAME, CM_NS, {"metadata": {"labels": {"migops.io/mig-config": "true"}}})
    assert _reviews(direct, "ConfigMap") == {"validate": before["validate"] + 2, "mutate": before["mutate"] + 2}
    core.patch_namespaced_config_map(
        CM_NAME, CM_NS, [{"op": "remove", "path": "/metadata/annotations/migops.io~1config-digest"}]
    )
    assert _reviews(direct, "ConfigMap") == {"validate": before["validate"] + 2, "mutate": before["mutate"] + 3}
    assert core.read_namespaced_config_map(CM_NAME, CM_NS).metadata.annotations["migops.io/config-digest"] == digest
    core.patch_namespaced_config_map(
        CM_NAME,
        CM_NS,
        {"metadata": {"labels": {"migops.io/mig-config": None, "team": None}, "annotations": {"note": None}}},
    )


# ------------------------------------------------------------------------------------------ Nodes
def test_node_label_to_missing_config_denied(api, kubectl) -> None:
    out = kubectl("label", "node", "gpu-node-1", "nvidia.com/mig.config=all-1g.10gbb", "--overwrite")
    assert out.returncode == 1 and "[config-not-found]" in out.stderr and "did you mean 'all-1g.10gb'" in out.stderr
    out = kubectl("label", "node", "gpu-node-1", "nvidia.com/mig.config=nope", "--overwrite", "--dry-run=server")
    assert out.returncode == 1 and "[config-not-found]" in out.stderr
    with pytest.raises(ApiException) as exc:
        _label(api, "gpu-node-1", "nope")
    assert "[config-not-found]" in _denied(exc)


def test_node_label_geometry_must_fit_the_nodes_gpus(api, kubectl) -> None:
    with pytest.raises(ApiException) as exc:
        _label(api, "gpu-node-1", "all-1g.5gb")  # an A100 profile on an H100 node
    assert "[unknown-profile]" in _denied(exc) and "H100" in _denied(exc)
    _label(api, "gpu-node-2", "all-1g.5gb")  # the A100 node
    out = kubectl("label", "node", "gpu-node-1", "nvidia.com/mig.config=all-balanced", "--overwrite")
    assert out.returncode == 0, out.stderr
    out = kubectl("label", "node", "gpu-node-1", "nvidia.com/mig.config-", "--overwrite")
    assert out.returncode == 0, out.stderr  # removing the label is always allowed


def test_node_label_multi_profile_denied_under_single(api) -> None:
    from migops.local.cluster import apply_cluster_policy

    apply_cluster_policy(api, "single")

    def denied() -> None:
        with pytest.raises(ApiException) as exc:
            _label(api, "gpu-node-1", "all-balanced", dry_run=True)
        assert "[strategy-mismatch]" in _denied(exc)

    eventually(denied)
    _label(api, "gpu-node-1", "all-1g.10gb")


def test_other_node_writes_never_reach_the_webhook(api, direct) -> None:
    def node_reviews() -> float:
        text = direct.get("/metrics").data.decode()
        return sum(
            float(line.split()[-1])
            for line in text.splitlines()
            if line.startswith("migops_webhook_requests_total{") and 'kind="Node"' in line
        )

    before = node_reviews()
    for i in range(5):
        ssa.apply(
            api,
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": "gpu-node-1", "labels": {"example.com/heartbeat": str(i)}},
            },
            field_manager=MANAGER,
        )
    _label(api, "gpu-node-1", "all-1g.10gb")
    assert node_reviews() == before + 1


# ------------------------------------------------------------------------------------------ ClusterPolicy
def test_switch_to_single_with_a_balanced_node_denied(api, kubectl) -> None:
    _label(api, "gpu-node-1", "all-balanced")
    patch = json.dumps({"spec": {"mig": {"strategy": "single"}}})

    def denied() -> None:
        out = kubectl("patch", "clusterpolicy", "cluster-policy", "--type=merge", "-p", patch, "--dry-run=server")
        assert out.returncode == 1 and "[strategy-mismatch]" in out.stderr and "gpu-node-1" in out.stderr, out.stderr

    eventually(denied)
    with pytest.raises(ApiException) as exc:
        k8s.CustomObjectsApi(api).patch_cluster_custom_object(
            "nvidia.com", "v1", "clusterpolicies", "cluster-policy", {"spec": {"mig": {"strategy": "single"}}}
        )
    assert "[strategy-mismatch]" in _denied(exc)


def test_mig_manager_needs_its_image(api) -> None:
    objects = k8s.CustomObjectsApi(api)
    with pytest.raises(ApiException) as exc:
        objects.patch_cluster_custom_object(
            "nvidia.com",
            "v1",
            "clusterpolicies",
            "cluster-policy",
            {"spec": {"migManager": {"enabled": True, "version": ""}}},
        )
    assert "[mig-manager-image]" in _denied(exc) and "version" in _denied(exc)


# ------------------------------------------------------------------------------------------ Pods
def _pod(name: str, ns: str, resource: str, count: str = "1") -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"containers": [{"name": "c", "image": "busybox", "resources": {"limits": {resource: count}}}]},
    }


def test_pod_with_a_typo_in_the_profile_denied(api) -> None:
    with pytest.raises(ApiException) as exc:
        k8s.CoreV1Api(api).create_namespaced_pod("default", _pod("typo", "default", "nvidia.com/mig-1g.10g"))
    assert "[unknown-mig-resource]" in _denied(exc) and "did you mean nvidia.com/mig-1g.10gb" in _denied(exc)


def test_pod_not_offered_is_admitted_with_a_warning(kubectl) -> None:
    out = kubectl(
        "create", "--dry-run=server", "-f", "-", input=_manifest(_pod("p", "default", "nvidia.com/mig-2g.20gb"))
    )
    assert out.returncode == 0, out.stderr
    assert "no node offers it now" in out.stderr


def test_pod_under_single_denied_or_translated_in_opted_in_namespaces(api) -> None:
    from migops.local.cluster import apply_cluster_policy

    core = k8s.CoreV1Api(api)
    apply_cluster_policy(api, "single")

    def denied() -> None:
        with pytest.raises(ApiException) as exc:
            core.create_namespaced_pod(
                "default", _pod("single", "default", "nvidia.com/mig-1g.10gb", "2"), dry_run="All"
            )
        message = _denied(exc)
        assert "[strategy-single]" in message and "nvidia.com/gpu: 2" in message, message

    eventually(denied)
    ns = f"translate-{int(time.time() * 1000) % 100000}"
    core.create_namespace(
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": ns, "labels": {"migops.io/mig-translate": "single"}},
        }
    )
    attempt = iter(range(1000))

    def translated() -> Any:
        # A fresh name each try: the webhook's node view follows other tests' node writes a moment behind.
        pod = core.create_namespaced_pod(ns, _pod(f"translated-{next(attempt)}", ns, "nvidia.com/mig-1g.10gb", "2"))
        assert pod.spec.containers[0].resources.limits == {"nvidia.com/gpu": "2"}
        # 1g.10gb exists on the H100 nodes and on the A100 (40GB) node: either product will do.
        (term,) = (
            pod.spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution.node_selector_terms
        )
        (expression,) = term.match_expressions
        assert expression.key == "nvidia.com/gpu.product" and expression.operator == "In"
        assert set(expression.values) == {"NVIDIA-H100-80GB-HBM3-MIG-1g.10gb", "NVIDIA-A100-SXM4-40GB-MIG-1g.10gb"}
        return pod

    pod = eventually(translated)
    single = eventually(lambda: core.create_namespaced_pod(ns, _pod("translated-3g", ns, "nvidia.com/mig-3g.40gb")))
    assert single.spec.node_selector == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-MIG-3g.40gb"}
    assert pod.metadata.annotations["migops.io/mig-translated-from"] == "nvidia.com/mig-1g.10gb"

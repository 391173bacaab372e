"""Through the real API server: git owns a managed node's nvidia.com/mig.config and, while a MigSync
manages the nodes, the MIG ConfigMap in force (the webhook's side), and the status subresource is
reviewed like the Node.

The reconciler writes migops.io/managed-by itself (another branch); here the test sets it, with a
MigSync naming the repo, and writes as three identities: the admin (a person's kubectl), the
reconciler's ServiceAccount (the webhook's default --reconciler-user) with a bound token, and the
local reconciler's certificate user."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from webhook_helpers import CM_NAME, CM_NS, DEFAULT_CONFIG, MANAGER, eventually

from migops.api.names import MANAGED_BY_ANNOTATION, MIG_CONFIG_LABEL, UNMANAGED_LABEL
from migops.kube import ssa
from migops.reconciler.status import install_crd

pytestmark = pytest.mark.usefixtures("cluster_state")

NS = "migops-system"
SYNC = "fleet"
URL = "https://git.example.com/gpu/mig.git"
NODE = "gpu-node-3"


@pytest.fixture(scope="module")
def reconciler_api(plane, api) -> Iterator[k8s.ApiClient]:
    """The reconciler's ServiceAccount, allowed to patch Nodes (as manifests/base/reconciler grants)."""
    core = k8s.CoreV1Api(api)
    ssa.apply(api, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}, field_manager=MANAGER)
    ssa.apply(
        api,
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "test-reconciler-nodes"},
            "rules": [{"apiGroups": [""], "resources": ["nodes", "configmaps"], "verbs": ["get", "patch"]}],
        },
        field_manager=MANAGER,
    )
    ssa.apply(
        api,
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "test-reconciler-nodes"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "test-reconciler-nodes",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "migops-reconciler", "namespace": NS}],
        },
        field_manager=MANAGER,
    )
    kubeconfig = plane.kubeconfig_for_service_account(NS, "migops-reconciler")
    assert core.read_namespace(NS)
    with plane.api_client(kubeconfig) as client:
        yield client
    # The package's plane is shared: leave nothing the manifests test creates itself.
    rbac = k8s.RbacAuthorizationV1Api(api)
    rbac.delete_cluster_role_binding("test-reconciler-nodes")
    rbac.delete_cluster_role("test-reconciler-nodes")
    core.delete_namespaced_service_account("migops-reconciler", NS)


@pytest.fixture(scope="module")
def migsync(api) -> Iterator[None]:
    install_crd(api, field_manager=MANAGER)
    custom = k8s.CustomObjectsApi(api)
    ssa.apply(api, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}, field_manager=MANAGER)
    custom.create_namespaced_custom_object(
        "migops.io",
        "v1alpha1",
        NS,
        "migsyncs",
        {
            "apiVersion": "migops.io/v1alpha1",
            "kind": "MigSync",
            "metadata": {"name": SYNC},
            "spec": {"url": URL, "path": "clusters/prod", "ref": "main"},
        },
    )
    yield
    custom.delete_namespaced_custom_object("migops.io", "v1alpha1", NS, "migsyncs", SYNC)
    k8s.ApiextensionsV1Api(api).delete_custom_resource_definition("migsyncs.migops.io")


@pytest.fixture
def managed(api, reconciler_api, migsync) -> Iterator[None]:
    """NODE managed by the MigSync (the annotation written by the reconciler's identity, as it will
    be), and the webhook's informers caught up (its MigSync watch sees a new CRD within its 10 s re-list)."""
    core = k8s.CoreV1Api(reconciler_api)
    core.patch_node(NODE, {"metadata": {"annotations": {MANAGED_BY_ANNOTATION: f"{NS}/{SYNC}"}}})

    def refused() -> None:
        try:
            _label(api, NODE, "all-balanced", dry_run=True)
        except ApiException as exc:
            assert "[git-owned]" in json.loads(exc.body)["message"]
        else:
            raise AssertionError("admitted")

    eventually(refused, timeout=30)
    yield
    core.patch_node(
        NODE, {"metadata": {"annotations": {MANAGED_BY_ANNOTATION: None}, "labels": {UNMANAGED_LABEL: None}}}
    )


def _label(api: k8s.ApiClient, node: str, value: str | None, *, dry_run: bool = False, **labels: str | None) -> None:
    body = {"metadata": {"labels": {MIG_CONFIG_LABEL: value, **labels}}}
    k8s.CoreV1Api(api).patch_node(node, body, **({"dry_run": "All"} if dry_run else {}))


def _message(exc: pytest.ExceptionInfo[ApiException]) -> str:
    assert exc.value.status in (400, 403, 422), exc.value
    return json.loads(exc.value.body)["message"]


def _config(api: k8s.ApiClient, node: str = NODE) -> str | None:
    return (k8s.CoreV1Api(api).read_node(node).metadata.labels or {}).get(MIG_CONFIG_LABEL)


# --------------------------------------------------------------------------------------- hand edits
def test_a_hand_edit_of_a_managed_node_is_denied_naming_the_migsync_repo_and_file(api, kubectl, managed) -> None:
    for dry_run in ((), ("--dry-run=server",)):
        out = kubectl("label", "node", NODE, f"{MIG_CONFIG_LABEL}=all-balanced", "--overwrite", *dry_run)
        assert out.returncode == 1, out.stdout
        assert f"MigSync {NS}/{SYNC}" in out.stderr and URL in out.stderr, out.stderr
        assert "clusters/prod/nodes.yaml" in out.stderr and "(ref main)" in out.stderr
        assert f"{UNMANAGED_LABEL}=true" in out.stderr and "[git-owned]" in out.stderr
    out = kubectl("label", "node", NODE, f"{MIG_CONFIG_LABEL}-")  # removing is a change too
    assert out.returncode == 1 and "[git-owned]" in out.stderr
    out = kubectl("label", "node", NODE, f"{MIG_CONFIG_LABEL}=no-such-config", "--overwrite")
    assert "[git-owned]" in out.stderr and "[config-not-found]" in out.stderr, out.stderr  # one answer, all of it
    assert _config(api) == "all-disabled"


def test_the_reconcilers_identity_may_change_it_and_is_still_checked(api, reconciler_api, managed) -> None:
    _label(reconciler_api, NODE, "all-balanced")
    assert _config(api) == "all-balanced"
    with pytest.raises(ApiException) as exc:  # the config rule holds for the reconciler too
        _label(reconciler_api, NODE, "no-such-config")
    assert "[config-not-found]" in _message(exc)


def test_a_certificate_user_named_like_the_reconciler_is_not_the_reconciler(plane, api, managed) -> None:
    """The local stack's reconciler runs as the ServiceAccount: the client-certificate
    user `migops-reconciler` it used to be is no reconciler identity any more, even in system:masters."""
    kubeconfig = plane.kubeconfig_for("migops-reconciler", ("system:masters",))
    with plane.api_client(Path(kubeconfig)) as client, pytest.raises(ApiException) as exc:
        _label(client, NODE, "all-1g.10gb")
    assert "[git-owned]" in _message(exc)
    assert _config(api) != "all-1g.10gb"


def test_taking_a_node_out_of_management_then_anyone_may_set_it(api, kubectl, managed) -> None:
    out = kubectl("label", "node", NODE, f"{UNMANAGED_LABEL}=true")  # the label itself: always allowed
    assert out.returncode == 0, out.stderr
    out = kubectl("label", "node", NODE, f"{MIG_CONFIG_LABEL}=all-balanced", "--overwrite")
    assert out.returncode == 0, out.stderr
    with pytest.raises(ApiException) as exc:  # still a valid config only
        _label(api, NODE, "no-such-config")
    assert "[config-not-found]" in _message(exc)
    out = kubectl("label", "node", NODE, f"{UNMANAGED_LABEL}-")
    assert out.returncode == 0, out.stderr
    out = kubectl("label", "node", NODE, f"{MIG_CONFIG_LABEL}=all-disabled", "--overwrite")
    assert out.returncode == 1 and "[git-owned]" in out.stderr  # managed again


def test_only_the_reconciler_changes_the_managed_by_annotation(api, reconciler_api, kubectl, managed) -> None:
    out = kubectl("annotate", "node", NODE, f"{MANAGED_BY_ANNOTATION}-")
    assert out.returncode == 1 and "[managed-by]" in out.stderr, out.stderr
    out = kubectl("annotate", "node", "gpu-node-1", f"{MANAGED_BY_ANNOTATION}={NS}/{SYNC}")
    assert out.returncode == 1 and "[managed-by]" in out.stderr, out.stderr
    k8s.CoreV1Api(reconciler_api).patch_node(NODE, {"metadata": {"annotations": {MANAGED_BY_ANNOTATION: None}}})
    out = kubectl("label", "node", NODE, f"{MIG_CONFIG_LABEL}=all-balanced", "--overwrite")
    assert out.returncode == 0, out.stderr  # left management: anyone's again


def test_other_writes_of_a_managed_node_are_not_affected(api, managed) -> None:
    core = k8s.CoreV1Api(api)
    core.patch_node(NODE, {"metadata": {"labels": {"example.com/team": "a"}}})
    core.patch_node(NODE, {"metadata": {"labels": {"example.com/team": None}}})
    _label(api, "gpu-node-1", "all-balanced")  # an unmanaged node: as before


def test_a_managed_by_naming_no_migsync_warns_and_allows(api, reconciler_api, migsync, kubectl) -> None:
    core = k8s.CoreV1Api(reconciler_api)
    core.patch_node(NODE, {"metadata": {"annotations": {MANAGED_BY_ANNOTATION: f"{NS}/gone"}}})
    try:
        out = kubectl("label", "node", NODE, f"{MIG_CONFIG_LABEL}=all-balanced", "--overwrite")
        assert out.returncode == 0, out.stderr
        assert "does not exist" in out.stderr and "[managed-by-unknown]" in out.stderr
    finally:
        core.patch_node(NODE, {"metadata": {"annotations": {MANAGED_BY_ANNOTATION: None}}})


# --------------------------------------------------------------------------- the MIG ConfigMap in force
EDITED = DEFAULT_CONFIG + "# tuned by hand\n"


def _content(client: k8s.ApiClient, text: str, *, dry_run: bool = False, **labels: str | None) -> None:
    body: dict = {"data": {"config.yaml": text}}
    if labels:
        body["metadata"] = {"labels": labels}
    k8s.CoreV1Api(client).patch_namespaced_config_map(CM_NAME, CM_NS, body, **({"dry_run": "All"} if dry_run else {}))


def _owned(api: k8s.ApiClient, owned: bool) -> None:
    """Wait until the webhook's MigSync informer says the ConfigMap is (not) git's."""

    def check() -> None:
        try:
            _content(api, EDITED, dry_run=True)
        except ApiException as exc:
            assert owned and "[git-owned]" in json.loads(exc.body)["message"], exc.body
        else:
            assert not owned, "admitted"

    eventually(check, timeout=30)


def _suspend(api: k8s.ApiClient, value: bool) -> None:
    k8s.CustomObjectsApi(api).patch_namespaced_custom_object(
        "migops.io", "v1alpha1", NS, "migsyncs", SYNC, {"spec": {"suspend": value}}
    )


def test_git_owns_the_mig_configmap_in_force_while_a_migsync_manages_it(api, kubectl, reconciler_api, migsync) -> None:
    _owned(api, True)
    edited = json.dumps({"data": {"config.yaml": EDITED}})
    for dry_run in ((), ("--dry-run=server",)):
        out = kubectl("patch", "configmap", "-n", CM_NS, CM_NAME, "--type=merge", "-p", edited, *dry_run)
        assert out.returncode == 1 and "[git-owned]" in out.stderr, out.stderr
        assert f"MigSync {NS}/{SYNC}" in out.stderr and f"{URL} (ref main)" in out.stderr, out.stderr
        assert "clusters/prod/config.yaml" in out.stderr and "migops.io/unmanaged=true" in out.stderr
    out = kubectl("delete", "configmap", "-n", CM_NS, CM_NAME, "--dry-run=server")
    assert out.returncode == 1 and "[git-owned]" in out.stderr, out.stderr
    out = kubectl("label", "configmap", "-n", CM_NS, CM_NAME, "migops.io/mig-config=true")
    assert out.returncode == 1 and "[git-owned]" in out.stderr, out.stderr
    # The reconciler's identity writes it, and is still checked.
    _content(reconciler_api, EDITED)
    with pytest.raises(ApiException) as exc:
        _content(reconciler_api, EDITED.replace("1g.10gb", "1g.9gb"))
    assert "[unknown-profile]" in _message(exc)
    _content(reconciler_api, DEFAULT_CONFIG)
    # Other writes of it are not affected.
    k8s.CoreV1Api(api).patch_namespaced_config_map(CM_NAME, CM_NS, {"metadata": {"annotations": {"team": "a"}}})


def test_the_configmaps_escape_hatches_unmanaged_and_suspend(api, kubectl, migsync) -> None:
    _owned(api, True)
    try:
        _content(api, EDITED, **{UNMANAGED_LABEL: "true"})  # the hatch in the write itself
        with pytest.raises(ApiException) as exc:  # still a valid config only
            _content(api, EDITED.replace("1g.10gb", "1g.9gb"))
        assert "[unknown-profile]" in _message(exc)
        _content(api, DEFAULT_CONFIG)
    finally:
        out = kubectl("label", "configmap", "-n", CM_NS, CM_NAME, f"{UNMANAGED_LABEL}-")
        assert out.returncode == 0, out.stderr  # given back to git: a label write, never judged
    _owned(api, True)
    _suspend(api, True)
    try:
        _owned(api, False)  # a suspended MigSync applies nothing: the ConfigMap is anyone's
    finally:
        _suspend(api, False)
    _owned(api, True)


# --------------------------------------------------------------------------- the status subresource
def test_the_status_subresource_is_reviewed_like_the_node(api, kubectl) -> None:
    bad = json.dumps({"metadata": {"labels": {MIG_CONFIG_LABEL: "no-such-config"}}})
    for dry_run in ((), ("--dry-run=server",)):
        out = kubectl("patch", "node", "gpu-node-2", "--subresource=status", "--type=merge", "-p", bad, *dry_run)
        assert out.returncode == 1 and "[config-not-found]" in out.stderr, (out.stdout, out.stderr)
    assert _config(api, "gpu-node-2") == "all-disabled"
    good = json.dumps({"metadata": {"labels": {MIG_CONFIG_LABEL: "all-1g.5gb"}}})
    out = kubectl("patch", "node", "gpu-node-2", "--subresource=status", "--type=merge", "-p", good)
    assert out.returncode == 0, out.stderr
    assert _config(api, "gpu-node-2") == "all-1g.5gb"  # the status subresource does store labels


def test_a_status_write_of_a_managed_node_is_denied_too(api, kubectl, managed) -> None:
    body = json.dumps({"metadata": {"labels": {MIG_CONFIG_LABEL: "all-balanced"}}})
    out = kubectl("patch", "node", NODE, "--subresource=status", "--type=merge", "-p", body)
    assert out.returncode == 1 and "[git-owned]" in out.stderr, out.stderr


def test_status_writes_without_label_changes_never_reach_the_webhook(api, direct) -> None:
    def node_reviews() -> float:
        text = direct.get("/metrics").data.decode()
        return sum(
            float(line.split()[-1])
            for line in text.splitlines()
            if line.startswith("migops_webhook_requests_total{") and 'kind="Node"' in line
        )

    before = node_reviews()
    core = k8s.CoreV1Api(api)
    for i in range(5):  # what a kubelet's heartbeat does
        core.patch_node_status("gpu-node-1", {"status": {"capacity": {"example.com/widgets": str(i)}}})
    assert node_reviews() == before

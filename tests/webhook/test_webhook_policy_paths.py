"""Through the real API server: every way the config in force or the strategy can change is
reviewed (`clusterpolicies/status` and DELETE), a MigSync the webhook's cache lacks is read live,
never taken for "unmanaged", and migops.io/mig.config.revision is the reconciler's alone."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from webhook_helpers import DEFAULT_CONFIG, MANAGER, configmap, eventually

from migops.api.names import MANAGED_BY_ANNOTATION, MIG_CONFIG_LABEL, REVISION_ANNOTATION, UNMANAGED_LABEL
from migops.kube import ssa
from migops.reconciler.status import install_crd
from migops.webhook.app import ReviewPorts, create_app
from migops.webhook.server import migsync_reader
from migops.webhook.state import DEFAULT_RECONCILER_USER, MigSyncRef, Snapshot

pytestmark = pytest.mark.usefixtures("cluster_state")

POLICY = "cluster-policy"
TEAM = "team-a"
NS = "migops-system"
SYNC = "paths"
URL = "https://git.example.com/gpu/paths.git"
# The team's ConfigMap: the same names as NVIDIA's default, but all-balanced is 7 x 1g.10gb.
NOT_IN_GIT = DEFAULT_CONFIG.replace("all-balanced:", "all-balanced-was:").replace(
    "mig-configs:",
    'mig-configs:\n  all-balanced:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {"1g.10gb": 7}',
    1,
)


@pytest.fixture
def team_configmap(api: k8s.ApiClient) -> Iterator[None]:
    core = k8s.CoreV1Api(api)
    ssa.apply(api, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": TEAM}}, field_manager=MANAGER)
    ssa.apply(api, configmap(NOT_IN_GIT, namespace=TEAM), field_manager=MANAGER, force=True)
    yield
    core.delete_namespaced_config_map("default-mig-parted-config", TEAM)


@pytest.fixture
def migsync(api: k8s.ApiClient) -> Iterator[None]:
    """A MigSync, and the webhook's informer holding it (a ClusterPolicy switch reads the cache)."""
    install_crd(api, field_manager=MANAGER)
    ssa.apply(api, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}, field_manager=MANAGER)
    custom = k8s.CustomObjectsApi(api)
    body = {
        "apiVersion": "migops.io/v1alpha1",
        "kind": "MigSync",
        "metadata": {"name": SYNC},
        "spec": {"url": URL, "path": "clusters/prod", "ref": "main"},
    }
    eventually(lambda: _created(custom, body), timeout=30)  # the CRD is served a moment after it is created
    yield
    custom.delete_namespaced_custom_object("migops.io", "v1alpha1", NS, "migsyncs", SYNC)


def _created(custom: k8s.CustomObjectsApi, body: dict) -> None:
    try:
        custom.create_namespaced_custom_object("migops.io", "v1alpha1", NS, "migsyncs", body)
    except ApiException as exc:
        if exc.status == 409:
            return
        raise AssertionError(exc) from exc


def _status_namespace(api: k8s.ApiClient) -> str:
    obj = k8s.CustomObjectsApi(api).get_cluster_custom_object("nvidia.com", "v1", "clusterpolicies", POLICY)
    return obj["status"]["namespace"]


def _relabel(api: k8s.ApiClient, node: str, config: str) -> None:
    k8s.CoreV1Api(api).patch_node(node, {"metadata": {"labels": {MIG_CONFIG_LABEL: config}}})


# ------------------------------------------------------------------------------ the config in force
def test_a_status_namespace_switch_to_a_config_not_in_git_is_denied(api, kubectl, team_configmap, migsync) -> None:
    """A ClusterPolicy switch by status.namespace: with a MigSync, the ConfigMap in force holds git's config; status.namespace
    pointing at another one with other content is refused, as the spec switch would be."""

    def refused() -> None:
        for dry_run in (("--dry-run=server",), ()):
            out = kubectl(
                "patch",
                "clusterpolicy",
                POLICY,
                "--subresource=status",
                "--type=merge",
                "-p",
                json.dumps({"status": {"namespace": TEAM}}),
                *dry_run,
            )
            assert out.returncode == 1, out.stdout
            assert "[git-owned]" in out.stderr and f"MigSync {NS}/{SYNC}" in out.stderr, out.stderr
            assert "status.namespace" in out.stderr and "clusters/prod/nodes.yaml" in out.stderr, out.stderr

    eventually(refused, timeout=30)  # the webhook's MigSync informer catches up
    assert _status_namespace(api) == "gpu-operator"


def test_a_status_namespace_switch_is_judged_like_a_spec_switch(api, kubectl) -> None:
    """Without a MigSync: the target must exist and serve every node's label; a good one is admitted."""
    core = k8s.CoreV1Api(api)
    ssa.apply(api, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": TEAM}}, field_manager=MANAGER)
    lacking = "version: v1\nmig-configs:\n  all-1g:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {\"1g.10gb\": 7}\n"
    ssa.apply(api, configmap(lacking, namespace=TEAM), field_manager=MANAGER, force=True)
    patch = ("patch", "clusterpolicy", POLICY, "--subresource=status", "--type=merge", "-p")
    try:
        out = kubectl(*patch, json.dumps({"status": {"namespace": TEAM}}))
        assert out.returncode == 1, out.stdout
        assert "[config-not-found]" in out.stderr and "status.namespace: ConfigMap team-a/" in out.stderr, out.stderr
        out = kubectl(*patch, json.dumps({"status": {"namespace": "nowhere"}}))
        assert out.returncode == 1 and "[configmap-missing]" in out.stderr, out.stderr
        assert _status_namespace(api) == "gpu-operator"
        # The operator's other status writes are not sent at all (the match condition).
        out = kubectl(*patch, json.dumps({"status": {"state": "notReady"}}))
        assert out.returncode == 0, out.stderr
    finally:
        kubectl(*patch, json.dumps({"status": {"state": "ready"}}))  # as the operator applies it (no conflict)
        core.delete_namespaced_config_map("default-mig-parted-config", TEAM)


def test_deleting_the_cluster_policy_is_reviewed(api, kubectl) -> None:
    """Deleting it puts the operator's default strategy (single) in force: denied while a node holds a
    geometry single cannot serve, admitted once none does."""
    _relabel(api, "gpu-node-1", "all-balanced")

    def refused() -> None:
        for dry_run in (("--dry-run=server",), ()):
            out = kubectl("delete", "clusterpolicy", POLICY, *dry_run)
            assert out.returncode == 1, out.stdout
            assert "[strategy-mismatch]" in out.stderr and "gpu-node-1" in out.stderr, out.stderr
            assert f"deleting ClusterPolicy {POLICY}" in out.stderr, out.stderr

    eventually(refused, timeout=30)  # the webhook's node informer sees the label
    _relabel(api, "gpu-node-1", "all-disabled")

    def admitted() -> None:
        out = kubectl("delete", "clusterpolicy", POLICY, "--dry-run=server")
        assert out.returncode == 0, out.stderr

    eventually(admitted, timeout=30)


# ------------------------------------------------------------------------ a MigSync the cache lacks
def _node_review(node: str, owner: str, user: str = "admin") -> bytes:
    old = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": node,
            "labels": {MIG_CONFIG_LABEL: "all-disabled"},
            "annotations": {MANAGED_BY_ANNOTATION: owner},
        },
    }
    new = json.loads(json.dumps(old))
    new["metadata"]["labels"][MIG_CONFIG_LABEL] = "all-balanced"
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": "", "version": "v1", "kind": "Node"},
            "operation": "UPDATE",
            "name": node,
            "object": new,
            "oldObject": old,
            "userInfo": {"username": user},
        },
    }
    return json.dumps(review).encode()


class _Fixed:
    """A webhook state whose MigSync cache is empty: the informer has not seen any yet."""

    def __init__(self) -> None:
        import threading

        self.lock = threading.RLock()
        self.synced = True
        policy = {"metadata": {"name": POLICY}, "spec": {"mig": {"strategy": "mixed"}}}
        self._snap = Snapshot.build(0, [], [policy], [configmap(DEFAULT_CONFIG)], [])

    def wait_synced(self, timeout: float) -> bool:
        return True

    def snapshot(self) -> Snapshot:
        return self._snap

    def errors(self) -> dict[str, str]:
        return {}


def _answer(app, body: bytes) -> dict:
    got = app.test_client().post("/validate", data=body, content_type="application/json")
    assert got.status_code == 200, got.data
    return json.loads(got.data)["response"]


def test_a_migsync_the_cache_lacks_is_read_live_not_taken_for_unmanaged(api, migsync) -> None:
    """The informer has not seen the MigSync (the CRD was missing at start): the rule asks the API
    server, finds it, and denies the hand edit as git-owned."""
    app = create_app(_Fixed(), ReviewPorts(read_migsync=migsync_reader(api)))
    response = _answer(app, _node_review("gpu-node-3", f"{NS}/{SYNC}"))
    assert response["allowed"] is False, response
    assert "[git-owned]" in response["status"]["message"] and URL in response["status"]["message"]
    # One that really does not exist: not git-owned, said in a warning.
    response = _answer(app, _node_review("gpu-node-3", f"{NS}/gone"))
    assert response["allowed"] is True and any("[managed-by-unknown]" in w for w in response["warnings"])
    # The reconciler's own writes need no lookup: git owns nothing against it.
    response = _answer(app, _node_review("gpu-node-3", f"{NS}/{SYNC}", user=DEFAULT_RECONCILER_USER))
    assert response["allowed"] is True, response


def test_a_cache_miss_that_cannot_be_read_is_denied(api) -> None:
    """No way to read (or a failed read): denied, saying why; never admitted."""

    def failing(namespace: str, name: str) -> MigSyncRef | None:
        raise ApiException(status=503, reason="Service Unavailable")

    for app in (create_app(_Fixed()), create_app(_Fixed(), ReviewPorts(read_migsync=failing))):
        response = _answer(app, _node_review("gpu-node-3", f"{NS}/{SYNC}"))
        assert response["allowed"] is False, response
        assert "[managed-by-unverified]" in response["status"]["message"]
        assert "Service Unavailable" in response["status"]["message"] or "cannot read" in response["status"]["message"]


# -------------------------------------------------------------------------- the revision annotation
def test_only_the_reconciler_writes_the_revision_annotation(plane, api, kubectl) -> None:
    node = "gpu-node-2"
    forged = "f" * 40
    for args in (
        (f"{REVISION_ANNOTATION}={forged}",),
        (f"{REVISION_ANNOTATION}={forged}", "--dry-run=server"),
    ):
        out = kubectl("annotate", "node", node, *args)
        assert out.returncode == 1, out.stdout
        assert "[revision]" in out.stderr and DEFAULT_RECONCILER_USER in out.stderr, out.stderr
    # Not through the status subresource either, nor with the node taken out of management.
    with pytest.raises(ApiException) as exc:
        k8s.CoreV1Api(api).patch_node_status(node, {"metadata": {"annotations": {REVISION_ANNOTATION: forged}}})
    assert "[revision]" in json.loads(exc.value.body)["message"]
    out = kubectl("label", "node", node, f"{UNMANAGED_LABEL}=true")
    assert out.returncode == 0, out.stderr
    try:
        out = kubectl("annotate", "node", node, f"{REVISION_ANNOTATION}={forged}")
        assert out.returncode == 1 and "[revision]" in out.stderr, out.stderr
    finally:
        assert kubectl("label", "node", node, f"{UNMANAGED_LABEL}-").returncode == 0
    kubeconfig = plane.kubeconfig_for(DEFAULT_RECONCILER_USER, ("system:masters",))
    with plane.api_client(Path(kubeconfig)) as client:
        core = k8s.CoreV1Api(client)
        core.patch_node(node, {"metadata": {"annotations": {REVISION_ANNOTATION: forged}}})
        assert core.read_node(node).metadata.annotations[REVISION_ANNOTATION] == forged
        core.patch_node(node, {"metadata": {"annotations": {REVISION_ANNOTATION: None}}})


def test_live_reads_are_bounded(api) -> None:
    """Reviews posted directly, naming made-up MigSyncs, cost at most `per_second` GETs a second: the
    rest are denied (never admitted), not sent on to the API server."""
    app = create_app(_Fixed(), ReviewPorts(read_migsync=migsync_reader(api, per_second=1)))
    answers = [_answer(app, _node_review("gpu-node-3", f"{NS}/made-up-{i}")) for i in range(10)]
    assert answers[0]["allowed"] is True  # read: it does not exist
    refused = [a for a in answers if not a["allowed"]]
    assert refused and all("reads a second" in a["status"]["message"] for a in refused)

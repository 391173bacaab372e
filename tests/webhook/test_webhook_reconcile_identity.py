"""Through the real API server and migops's own webhook: `migops reconcile --once`
run by a cluster admin is refused before it writes anything, naming the identity it ran as, the ones
the webhook accepts and how to run as one; run with `--as` the reconciler's ServiceAccount, it works.
`migops diff` asks the same before its server-side dry runs."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from gitrepo import GitRepo, nodes_yaml
from kubernetes import client as k8s
from webhook_helpers import DEFAULT_CONFIG, MANAGER

from migops.api import migsync
from migops.api.names import MANAGED_BY_ANNOTATION, REVISION_ANNOTATION
from migops.kube import ssa
from migops.reconciler import status as st
from migops.reconciler.preflight import DEFAULT_USER

pytestmark = pytest.mark.usefixtures("cluster_state")

MIGOPS = Path(sys.executable).parent / "migops"
NS = "migops-system"
NODE = "gpu-node-1"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(MIGOPS), *args], capture_output=True, text=True, timeout=180, check=False)


@pytest.fixture
def as_reconciler(api: k8s.ApiClient) -> Iterator[k8s.ApiClient]:
    """The reconciler's ServiceAccount with a cluster-admin binding (what it may do is not the point
    here, who it is is), and an admin client impersonating it."""
    ssa.apply(api, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}, field_manager=MANAGER)
    st.install_crd(api, field_manager=MANAGER)
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "test-reconcile-identity"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": "migops-reconciler", "namespace": NS}],
    }
    ssa.apply(api, binding, field_manager=MANAGER)
    client = k8s.ApiClient(api.configuration)
    client.set_default_header("Impersonate-User", DEFAULT_USER)
    yield client
    client.close()
    k8s.RbacAuthorizationV1Api(api).delete_cluster_role_binding("test-reconcile-identity")


def _migsyncs(api: k8s.ApiClient) -> set[str]:
    found = k8s.CustomObjectsApi(api).list_namespaced_custom_object(migsync.GROUP, migsync.VERSION, NS, migsync.PLURAL)[
        "items"
    ]
    return {m["metadata"]["name"] for m in found}


def test_reconcile_once_as_an_admin_refuses_before_writing_and_works_as_the_reconciler(
    plane, api, as_reconciler, tmp_path
) -> None:
    repo = GitRepo(tmp_path / "repo")
    nodes = nodes_yaml(f"  - nodes: [{NODE}]\n    config: all-balanced")
    repo.commit({"config.yaml": DEFAULT_CONFIG, "nodes.yaml": nodes})
    name = f"id-{uuid.uuid4().hex[:6]}"
    common = ["--repo", repo.url, "--name", name, "--cache-dir", str(tmp_path / "cache"), "--once"]
    common += ["--kubeconfig", str(plane.admin_kubeconfig)]
    core = k8s.CoreV1Api(api)

    out = _run("reconcile", *common)
    assert out.returncode == 3, out.stdout + out.stderr
    assert "refused before writing anything" in out.stderr, out.stderr
    assert "it runs as: admin (groups: system:masters" in out.stderr, out.stderr  # from a SelfSubjectReview
    assert "the webhook accepts, for what git owns on a managed node: " in out.stderr
    assert DEFAULT_USER in out.stderr and f"--as {DEFAULT_USER}" in out.stderr, out.stderr
    assert "kubectl create token migops-reconciler -n migops-system" in out.stderr
    # Nothing written: no MigSync, no annotation, the label as it was.
    assert name not in _migsyncs(api)
    node = core.read_node(NODE).metadata
    assert MANAGED_BY_ANNOTATION not in (node.annotations or {})
    assert node.labels["nvidia.com/mig.config"] == "all-disabled"

    try:
        out = _run("reconcile", *common, "--as", DEFAULT_USER)
        assert out.returncode == 0, out.stdout + out.stderr
        node = core.read_node(NODE).metadata
        assert node.annotations[MANAGED_BY_ANNOTATION] == f"{NS}/{name}"
        assert node.labels["nvidia.com/mig.config"] == "all-balanced"
    finally:
        # As the reconciler: the webhook denies anyone else the annotations and the managed label.
        k8s.CoreV1Api(as_reconciler).patch_node(
            NODE,
            {
                "metadata": {
                    "annotations": {MANAGED_BY_ANNOTATION: None, REVISION_ANNOTATION: None},
                    "labels": {"nvidia.com/mig.config": "all-disabled"},
                }
            },
        )
        custom = k8s.CustomObjectsApi(api)
        if name in _migsyncs(api):
            custom.patch_namespaced_custom_object(
                migsync.GROUP, migsync.VERSION, NS, migsync.PLURAL, name, {"metadata": {"finalizers": None}}
            )
            custom.delete_namespaced_custom_object(migsync.GROUP, migsync.VERSION, NS, migsync.PLURAL, name)
        for cm in core.list_namespaced_config_map(NS).items:
            if name in cm.metadata.name:
                core.delete_namespaced_config_map(cm.metadata.name, NS)


def test_diff_as_an_admin_says_its_dry_runs_would_be_refused_and_works_as_the_reconciler(
    plane, api, as_reconciler, tmp_path
) -> None:
    """A valid change is never reported invalid because of who asks: the identity check comes first,
    with its own exit status, and `--as` the reconciler (or no server-side dry run) shows the diff."""
    repo = GitRepo(tmp_path / "repo")
    nodes = nodes_yaml(f"  - nodes: [{NODE}]\n    config: all-balanced")
    repo.commit({"config.yaml": DEFAULT_CONFIG, "nodes.yaml": nodes})
    name = f"diff-{uuid.uuid4().hex[:6]}"
    common = ["--repo", repo.url, "--name", name, "--cache-dir", str(tmp_path / "cache")]
    common += ["--kubeconfig", str(plane.admin_kubeconfig)]

    out = _run("diff", *common)
    assert out.returncode == 4, out.stdout + out.stderr
    assert "invalid" not in (out.stdout + out.stderr).lower()
    assert "migops diff: the server-side dry runs would be refused" in out.stderr, out.stderr
    assert "it runs as: admin (groups: system:masters" in out.stderr
    assert f"migops diff --as {DEFAULT_USER}" in out.stderr and "migops diff --no-server-dry-run" in out.stderr
    as_json = _run("diff", *common, "-o", "json")
    assert as_json.returncode == 4 and '"outcome": "Refused"' in as_json.stdout, as_json.stdout

    for extra in (["--as", DEFAULT_USER], ["--no-server-dry-run"]):
        out = _run("diff", *common, *extra)
        assert out.returncode == 1, extra + [out.stdout, out.stderr]  # 1: changes, as kubectl diff
        assert NODE in out.stdout and "all-balanced" in out.stdout, out.stdout
        assert "denied" not in out.stdout
    # Nothing was written by any of them.
    assert name not in _migsyncs(api)
    assert k8s.CoreV1Api(api).read_node(NODE).metadata.labels["nvidia.com/mig.config"] == "all-disabled"

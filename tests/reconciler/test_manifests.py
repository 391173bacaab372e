"""manifests/base on the real API server; the reconciler at work with exactly its ServiceAccount's rights."""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

import pytest
from gitrepo import CONFIG_YAML, nodes_yaml
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from reconciler_harness import agent_reports, condition, events_for, eventually, labels_of, migsync

from migops.api.migsync import SyncSpec, TrustPolicy, crd, migsync_object
from migops.api.names import MIG_CONFIG_LABEL
from migops.kube import ssa
from migops.local.binaries import locate
from migops.mig.yamlsafe import load_yaml
from migops.reconciler.controller import Reconciler
from migops.reconciler.main import ServeOptions, serve
from migops.reconciler.record import read_record

ROOT = Path(__file__).resolve().parents[2]
NS = "migops-system"


def test_shipped_crd_is_the_packaged_one() -> None:
    assert load_yaml((ROOT / "charts/migops/crds/migsyncs.migops.io.yaml").read_text()) == crd()


def _record_refusal(api) -> str:
    """Why a dry-run write of an applied record (a ConfigMap migops-applied-*) in migops-system is
    refused; "" when it is admitted."""
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "migops-applied-probe", "namespace": NS}}
    try:
        ssa.apply(api, body, field_manager="migops-test", force=True, dry_run=True)
    except ApiException as exc:
        return exc.body or str(exc.status)
    return ""


@pytest.fixture
def no_record_policy_after(rapi):
    """The package's plane is shared, and other tests' reconcilers run as the admin: the applied
    record's admission policy that manifests/base installs must not outlive this test."""
    yield
    admission = k8s.AdmissionregistrationV1Api(rapi)
    for delete in (
        admission.delete_validating_admission_policy_binding,
        admission.delete_validating_admission_policy,
    ):
        try:
            delete("migops-applied-record")
        except ApiException as exc:
            if exc.status != 404:
                raise
    eventually(lambda: not _record_refusal(rapi))


def test_reconciler_runs_with_exactly_its_rbac(rplane, rapi, repo, gpu_nodes, tmp_path, no_record_policy_after) -> None:
    kubectl = str(locate().directory / "kubectl")
    applied = subprocess.run(
        [
            kubectl,
            "--kubeconfig",
            str(rplane.admin_kubeconfig),
            "apply",
            "--server-side",
            "--force-conflicts",
            "-k",
            str(ROOT / "manifests/base"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert applied.returncode == 0, applied.stderr
    assert "role.rbac.authorization.k8s.io/migops-reconciler serverside-applied" in applied.stdout
    # No webhook server runs beside this reconciler: its registrations (failurePolicy Fail, calling a
    # Service that does not exist here) would refuse the writes of every later test on this plane.
    removed = subprocess.run(
        [
            kubectl,
            "--kubeconfig",
            str(rplane.admin_kubeconfig),
            "delete",
            "validatingwebhookconfiguration/migops-webhook",
            "mutatingwebhookconfiguration/migops-webhook",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert removed.returncode == 0, removed.stderr
    sa = rplane.kubeconfig_for_service_account("migops-system", "migops-reconciler")
    api = rplane.api_client(sa)
    # What it may not do: read Secrets, write ConfigMaps outside gpu-operator, delete Nodes.
    core = k8s.CoreV1Api(api)
    for call in (
        lambda: core.list_namespaced_secret("gpu-operator"),
        lambda: core.create_namespaced_config_map("migops-system", {"metadata": {"name": "x"}}),
        lambda: core.delete_node("nope"),
    ):
        with pytest.raises(ApiException) as err:
            call()
        assert err.value.status == 403

    names = gpu_nodes(3, pool="rbac")
    repo.commit(
        {
            "config.yaml": CONFIG_YAML,
            "nodes.yaml": nodes_yaml("  - nodeSelector: {matchLabels: {pool: rbac}}\n    config: all-3g.40gb"),
        }
    )
    spec = SyncSpec(repo.url, "main", "", 60.0, False, TrustPolicy())
    ssa.apply(rapi, migsync_object("migops", "migops-system", spec), field_manager="migops-test", force=True)
    rec = Reconciler(
        api, name="migops", namespace="migops-system", cache_dir=tmp_path / "cache"
    )  # spec from the MigSync
    stop = threading.Event()
    options = ServeOptions("127.0.0.1", 0, leader_elect=True, lease_duration=4, renew_deadline=3, retry_period=0.5)
    thread = threading.Thread(target=serve, args=(rec, options, stop), daemon=True)
    thread.start()
    try:
        eventually(lambda: {labels_of(rapi, names)[n].get(MIG_CONFIG_LABEL) for n in names} == {"all-3g.40gb"})
        agent_reports(rapi, CONFIG_YAML, names)
        eventually(lambda: condition(migsync(rapi, "migops"), "Ready")["status"] == "True")
        # The applied record's admission policy is in force: not even the admin may write one; the
        # reconciler's ServiceAccount writes the next one below (the new path's).
        refusal = eventually(lambda: _record_refusal(rapi))
        assert "only ServiceAccount migops-system/migops-reconciler may write it, not admin" in refusal
        # A new spec (here another path) is fetched at once, not at the next 60 s poll.
        repo.commit(
            {
                "other/config.yaml": CONFIG_YAML,
                "other/nodes.yaml": nodes_yaml(
                    "  - nodeSelector: {matchLabels: {pool: rbac}}\n    config: all-1g.10gb"
                ),
            }
        )
        k8s.CustomObjectsApi(rapi).patch_namespaced_custom_object(
            "migops.io", "v1alpha1", "migops-system", "migsyncs", "migops", {"spec": {"path": "other"}}
        )
        eventually(
            lambda: {labels_of(rapi, names)[n].get(MIG_CONFIG_LABEL) for n in names} == {"all-1g.10gb"}, timeout=20
        )
        agent_reports(rapi, CONFIG_YAML, names)
        eventually(
            lambda: (
                migsync(rapi, "migops")["status"].get("observedGeneration") == 2
                and condition(migsync(rapi, "migops"), "Ready")["status"] == "True"
            )
        )
    finally:
        stop.set()
        thread.join(30)
        api.close()
    lease = k8s.CoordinationV1Api(rapi).read_namespaced_lease("migops-reconciler-migops", "migops-system")
    assert lease.spec.holder_identity is None  # released on shutdown
    assert events_for(rapi, "migops", "ReconciliationSucceeded", "migops-system")
    assert events_for(rapi, "migops", "MigConfigAssigned", "migops-system")
    assert rec.metrics.writes() >= 4
    # Its applied record was written with exactly that RBAC (a Role on that one ConfigMap's name).
    record = read_record(rapi, "migops-system", "migops")
    assert record is not None and record.path == "other"

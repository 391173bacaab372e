"""migops.kube against the real API server: apply, informer (list, watch, resume, 410), events."""

from __future__ import annotations

import gc
import threading
import time
import weakref
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from kubernetes import client as k8s
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic.exceptions import ResourceNotFoundError
from polling import until

from migops.kube import crds, events, ssa
from migops.kube.clusterpolicy import read_settings
from migops.kube.informer import Informer
from migops.local.binaries import locate
from migops.local.cluster import apply_cluster_policy, install_clusterpolicy_crd
from migops.local.controlplane import ControlPlane


def _cm(name: str, ns: str, data: dict) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns}, "data": data}


def _cluster_crd(group: str, plural: str, singular: str, kind: str) -> dict:
    """A cluster-scoped CRD of one served version that keeps every field (the tests' own kinds)."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": "Cluster",
            "names": {"plural": plural, "singular": singular, "kind": kind},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
                }
            ],
        },
    }


def test_apply_owns_only_what_it_sends_and_conflicts_without_force(admin: ApiClient, node: str) -> None:
    label = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node, "labels": {"a": "1"}}}
    ssa.apply(admin, label, field_manager="one")
    ssa.apply(admin, {**label, "metadata": {"name": node, "labels": {"b": "2"}}}, field_manager="two")
    got = k8s.CoreV1Api(admin).read_node(node).metadata.labels
    assert got["a"] == "1" and got["b"] == "2"
    with pytest.raises(ApiException) as conflict:
        ssa.apply(admin, {**label, "metadata": {"name": node, "labels": {"a": "x"}}}, field_manager="two")
    assert conflict.value.status == 409
    ssa.apply(admin, {**label, "metadata": {"name": node, "labels": {"a": "x"}}}, field_manager="two", force=True)
    ssa.apply(
        admin, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node, "labels": {}}}, field_manager="one"
    )  # "one" owns nothing any more
    assert k8s.CoreV1Api(admin).read_node(node).metadata.labels["a"] == "x"


def test_apply_dry_run_writes_nothing(admin: ApiClient, namespace: str) -> None:
    out = ssa.apply(admin, _cm("dry", namespace, {"k": "v"}), field_manager="t", dry_run=True)
    assert out["data"] == {"k": "v"}
    with pytest.raises(ApiException) as missing:
        k8s.CoreV1Api(admin).read_namespaced_config_map("dry", namespace)
    assert missing.value.status == 404


def test_apply_finds_each_kind_where_the_api_server_serves_it(admin: ApiClient, namespace: str) -> None:
    """Resource names and scopes come from discovery: irregular plurals, cluster-scoped kinds of several
    groups, a CRD's kind, namespaced kinds placed by their metadata or by `namespace=`."""
    install_clusterpolicy_crd(admin)
    suffix = namespace[-8:]
    cluster_scoped = [
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": f"p-{suffix}"},
            "value": 7,
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": f"vap-{suffix}"},
            "spec": {
                "matchConstraints": {
                    "resourceRules": [
                        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["secrets"]}
                    ]
                },
                "validations": [{"expression": "true"}],
            },
        },
        {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": f"cp-{suffix}"}, "spec": {}},
    ]
    for body in cluster_scoped:
        ssa.apply(admin, {**body, "metadata": {**body["metadata"], "namespace": namespace}}, field_manager="t")
    rule = {
        "host": "x.example",
        "http": {
            "paths": [
                {"path": "/", "pathType": "Prefix", "backend": {"service": {"name": "s", "port": {"number": 80}}}}
            ]
        },
    }
    ssa.apply(
        admin,
        {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": {"name": "i"}, "spec": {"rules": [rule]}},
        field_manager="t",
        namespace=namespace,
    )
    ssa.apply(
        admin,
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "sa", "namespace": namespace}},
        field_manager="t",
    )
    try:
        assert k8s.SchedulingV1Api(admin).read_priority_class(f"p-{suffix}").value == 7
        assert k8s.AdmissionregistrationV1Api(admin).read_validating_admission_policy(f"vap-{suffix}")
        assert k8s.CustomObjectsApi(admin).get_cluster_custom_object(
            "nvidia.com", "v1", "clusterpolicies", f"cp-{suffix}"
        )
        assert k8s.NetworkingV1Api(admin).read_namespaced_ingress("i", namespace).spec.rules[0].host == "x.example"
        assert k8s.CoreV1Api(admin).read_namespaced_service_account("sa", namespace)
    finally:
        k8s.SchedulingV1Api(admin).delete_priority_class(f"p-{suffix}")
        k8s.AdmissionregistrationV1Api(admin).delete_validating_admission_policy(f"vap-{suffix}")
        k8s.CustomObjectsApi(admin).delete_cluster_custom_object("nvidia.com", "v1", "clusterpolicies", f"cp-{suffix}")
    with pytest.raises(ValueError, match="Namespace is required"):
        ssa.apply(admin, _cm("c", "", {}), field_manager="t")
    with pytest.raises(ResourceNotFoundError):
        ssa.apply(admin, {"apiVersion": "v1", "kind": "NoSuchKind", "metadata": {"name": "x"}}, field_manager="t")


def test_a_kind_installed_after_the_first_apply_is_found(admin: ApiClient, control_plane: ControlPlane) -> None:
    group, plural = "latekind.migops.io", "lates"
    with control_plane.api_client() as api:
        ssa.apply(api, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}}, field_manager="t")
        crds.install(admin, [_cluster_crd(group, plural, "late", "Late")], field_manager="t")  # another client
        try:
            ssa.apply(api, {"apiVersion": f"{group}/v1", "kind": "Late", "metadata": {"name": "l"}}, field_manager="t")
            assert k8s.CustomObjectsApi(admin).get_cluster_custom_object(group, "v1", plural, "l")
        finally:
            k8s.ApiextensionsV1Api(admin).delete_custom_resource_definition(f"{plural}.{group}")


def _count_requests(api: ApiClient) -> list[str]:
    """The paths `api` requests from now on (its own call_api, counted)."""
    sent: list[str] = []
    call_api = api.call_api

    def counted(path: str, *args: object, **kwargs: object) -> object:
        sent.append(path)
        return call_api(path, *args, **kwargs)

    api.call_api = counted  # type: ignore[method-assign]
    return sent


def _label_from_threads(control_plane: ControlPlane, node: str) -> weakref.ref[ApiClient]:
    """A client's first apply asks discovery; 64 more from 8 threads send one request each."""
    with control_plane.api_client() as api:
        sent = _count_requests(api)
        body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node, "labels": {"n": "0"}}}
        ssa.apply(api, body, field_manager="t")
        assert len(sent) > 1 and sent[-1] == f"/api/v1/nodes/{node}"  # discovery, then the apply
        sent.clear()

        def label(i: int) -> None:
            ssa.apply(api, {**body, "metadata": {"name": node, "labels": {"n": str(i)}}}, field_manager="t", force=True)

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(label, range(64)))
        assert sent == [f"/api/v1/nodes/{node}"] * 64
        return weakref.ref(api)


def test_discovery_is_asked_once_per_client_and_dies_with_it(control_plane: ControlPlane, node: str) -> None:
    """Only a client's first apply asks discovery, from any thread; what is kept for a client does not keep
    the client alive."""
    alive = _label_from_threads(control_plane, node)
    gc.collect()
    assert alive() is None


def test_informer_lists_then_follows_changes(admin: ApiClient, namespace: str) -> None:
    core = k8s.CoreV1Api(admin)
    ssa.apply(admin, _cm("before", namespace, {"k": "1"}), field_manager="t")
    seen: list[tuple[str, str]] = []
    lock = threading.Lock()

    def handler(kind: str, obj: dict) -> None:
        with lock:
            seen.append((kind, obj["metadata"]["name"]))

    with Informer(core.list_namespaced_config_map, namespace, handler=handler, watch_timeout=1) as inf:
        assert inf.wait_synced(20)
        assert f"{namespace}/before" in inf.items()
        assert "managedFields" not in inf.get(f"{namespace}/before")["metadata"]
        ssa.apply(admin, _cm("after", namespace, {"k": "2"}), field_manager="t")
        ssa.apply(admin, _cm("before", namespace, {"k": "3"}), field_manager="t")
        core.delete_namespaced_config_map("after", namespace)
        # watch_timeout=1: the server ends the watch every second; each is resumed, not re-listed.
        time.sleep(2.5)
        until(lambda: inf.get(f"{namespace}/before")["data"] == {"k": "3"} and f"{namespace}/after" not in inf.items())
        assert inf.lists == 1
    with lock:
        assert ("ADDED", "before") in seen and ("ADDED", "after") in seen
        assert ("MODIFIED", "before") in seen and ("DELETED", "after") in seen


def test_informer_field_selector(admin: ApiClient, node: str, namespace: str) -> None:
    core = k8s.CoreV1Api(admin)
    with Informer(core.list_node, field_selector=f"metadata.name={node}", watch_timeout=5) as inf:
        assert inf.wait_synced(20)
        assert list(inf.items()) == [node]


@pytest.fixture(scope="module")
def compacting_plane() -> Iterator[ControlPlane]:
    """A control plane that forgets history fast: no watch cache (watches are served by etcd) and a
    compaction every second, so an old resourceVersion really expires (410 Gone), as it does after a
    long disconnect in a real cluster."""
    with ControlPlane(locate(), apiserver_args=("--watch-cache=false", "--etcd-compaction-interval=1s")) as plane:
        yield plane


def test_informer_lists_again_when_its_resource_version_expires(compacting_plane: ControlPlane) -> None:
    with compacting_plane.api_client() as api:
        core = k8s.CoreV1Api(api)
        ssa.apply(api, _cm("first", "default", {}), field_manager="t")
        inf = Informer(core.list_namespaced_config_map, "default", watch_timeout=1, backoff=(0.05, 0.2))
        with inf:
            assert inf.wait_synced(20)
            stale = inf.resource_version
            for i in range(5):  # move etcd's revision on, then let the compactor pass it
                ssa.apply(api, _cm(f"churn-{i}", "default", {}), field_manager="t")
        # The compactor passes the stale revision within a few of its 1 s ticks; until then the watch
        # from it still works (and ends after watch_timeout). Then it must report "list again".
        deadline = time.monotonic() + 60
        expired = False
        probe = Informer(core.list_namespaced_config_map, "default", watch_timeout=1)  # never started
        while not expired and time.monotonic() < deadline:
            probe.resource_version = stale
            expired = probe._watch_once() is False
        assert expired
        with Informer(core.list_namespaced_config_map, "default", watch_timeout=1, backoff=(0.05, 0.2)) as again:
            assert again.wait_synced(20)
            again.resource_version = stale  # as if it had been disconnected for long
            until(lambda: again.lists >= 2)
            ssa.apply(api, _cm("after-expiry", "default", {}), field_manager="t")
            until(lambda: "default/after-expiry" in again.items())


def test_informer_relists_after_the_connection_breaks(admin: ApiClient, namespace: str) -> None:
    core = k8s.CoreV1Api(admin)
    with Informer(core.list_namespaced_config_map, namespace, watch_timeout=60, backoff=(0.05, 0.2)) as inf:
        assert inf.wait_synced(20)
        until(lambda: inf._response is not None)
        broken = inf._response
        broken.shutdown()
        ssa.apply(admin, _cm("later", namespace, {}), field_manager="t")
        until(lambda: f"{namespace}/later" in inf.items())
        # The object came by a new request: a read that fails lists again, one that ends cleanly (the
        # shut socket read as the end of the stream, seen on a busy machine) watches again from the
        # last resourceVersion, as client-go's reflector does. Either way nothing was missed.
        assert inf.lists >= 2 or inf._response is not broken


def test_informer_stop_is_prompt_during_a_long_watch(admin: ApiClient, namespace: str) -> None:
    inf = Informer(k8s.CoreV1Api(admin).list_namespaced_config_map, namespace, watch_timeout=300).start()
    assert inf.wait_synced(20)
    until(lambda: inf._response is not None)
    inf.stop(timeout=10)
    assert not inf._thread.is_alive()


def test_event_is_recorded_and_never_raises(admin: ApiClient, node: str) -> None:
    obj = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}}
    assert events.record(admin, obj, "MigConfigApplied", "applied all-1g.10gb", controller="migops.io/test")
    found = k8s.CoreV1Api(admin).list_namespaced_event("default", field_selector=f"involvedObject.name={node}")
    assert [(e.reason, e.message, e.type) for e in found.items] == [
        ("MigConfigApplied", "applied all-1g.10gb", "Normal")
    ]
    # Best effort: a failure (here, a namespace that does not exist) is reported, never raised.
    assert not events.record(
        admin,
        {"kind": "ConfigMap", "metadata": {"name": "x", "namespace": "no-such-ns-4f2a"}},
        "X",
        "y",
        controller="migops.io/test",
    )


def test_read_settings_from_the_cluster_policy(admin: ApiClient) -> None:
    install_clusterpolicy_crd(admin)
    apply_cluster_policy(admin, "mixed")
    settings = read_settings(admin)
    assert settings.strategy == "mixed" and settings.configmap == ("gpu-operator", "default-mig-parted-config")


def test_informer_missing_ok_counts_an_absent_kind_as_empty_until_it_appears(admin: ApiClient) -> None:
    group, plural = "informertest.migops.io", "widgets"
    objects = k8s.CustomObjectsApi(admin)
    with Informer(
        objects.list_cluster_custom_object, group, "v1", plural, missing_ok=True, backoff=(0.05, 0.3), watch_timeout=5
    ) as inf:
        assert inf.wait_synced(20)
        assert len(inf) == 0 and inf.missing
        crd = _cluster_crd(group, plural, "widget", "Widget")
        ssa.apply(admin, crd, field_manager="t")
        try:

            def create() -> bool:
                try:
                    objects.create_cluster_custom_object(
                        group, "v1", plural, {"apiVersion": f"{group}/v1", "kind": "Widget", "metadata": {"name": "w1"}}
                    )
                    return True
                except ApiException:
                    return False

            until(create)
            until(lambda: "w1" in inf.items() and not inf.missing)
        finally:
            k8s.ApiextensionsV1Api(admin).delete_custom_resource_definition(f"{plural}.{group}")


def test_installing_a_crd_being_deleted_waits_for_the_deletion_then_creates_it(admin: ApiClient) -> None:
    """A CRD applied while it terminates would only patch the doomed object (still Established), which
    then disappears: install waits the deletion out and creates it anew (a test's cleanup, an uninstall)."""
    group, plural = "crdinstall.migops.io", "holds"
    name = f"{plural}.{group}"
    crd = _cluster_crd(group, plural, "hold", "Hold")
    ext, objects = k8s.ApiextensionsV1Api(admin), k8s.CustomObjectsApi(admin)
    crds.install(admin, [crd], field_manager="t")
    held = {
        "apiVersion": f"{group}/v1",
        "kind": "Hold",
        "metadata": {"name": "h", "finalizers": ["migops.io/test-hold"]},
    }
    objects.create_cluster_custom_object(group, "v1", plural, held)
    try:
        ext.delete_custom_resource_definition(name)  # terminates until "h" is gone: its finalizer holds it
        until(lambda: ext.read_custom_resource_definition(name).metadata.deletion_timestamp is not None)
        installing = threading.Thread(target=crds.install, args=(admin, [crd]), kwargs={"field_manager": "t"})
        installing.start()
        time.sleep(1.0)
        assert installing.is_alive(), "install returned while the CRD was still being deleted"
        objects.patch_cluster_custom_object(group, "v1", plural, "h", {"metadata": {"finalizers": None}})
        installing.join(30)
        assert not installing.is_alive()
        got = ext.read_custom_resource_definition(name)
        assert got.metadata.deletion_timestamp is None
        objects.create_cluster_custom_object(group, "v1", plural, {**held, "metadata": {"name": "h2"}})
    finally:
        for obj in ("h", "h2"):
            try:
                objects.patch_cluster_custom_object(group, "v1", plural, obj, {"metadata": {"finalizers": None}})
            except ApiException:
                pass
        try:
            ext.delete_custom_resource_definition(name)
        except ApiException:
            pass

"""Fixtures for the reconciler against a real API server.

The reconciler watches every Node, so these tests run on a control plane of their own (`rplane`,
one per test package), seeded as a GPU Operator cluster with MIG strategy `mixed`: other tests' Nodes
never meet a reconciler, and a test may restart this kube-apiserver. Each test makes its own Nodes
(`gpu_nodes`) with a unique `pool` label that its nodes.yaml selects, and deletes them afterwards.
Helpers the tests import (`agent_reports`, which plays the agent's part on the API server, ...) are
in reconciler_harness.py.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from gitrepo import GitRepo
from kubernetes import client as k8s
from kubernetes.client import ApiClient

from migops.api.names import MIGSYNC_FINALIZER
from migops.kube import ssa
from migops.local.binaries import locate
from migops.local.cluster import apply_node, plan_nodes, seed
from migops.local.controlplane import ControlPlane
from migops.mig.catalogue import catalogue
from migops.reconciler.status import install_crd

H100 = "0x233010DE"


@pytest.fixture(scope="package")
def rplane() -> Iterator[ControlPlane]:
    with ControlPlane(locate()) as plane:
        with plane.api_client() as api:
            seed(api, (), "mixed")  # the GPU Operator's namespace and ClusterPolicy, no nodes yet
            k8s.CoreV1Api(api).create_namespace({"metadata": {"name": "migops-system"}})
            install_crd(api, field_manager="migops-test")
        yield plane


@pytest.fixture
def rapi(rplane: ControlPlane) -> Iterator[ApiClient]:
    with rplane.api_client() as api:
        yield api


@pytest.fixture(autouse=True)
def _no_finalizers_left(rplane: ControlPlane) -> Iterator[None]:
    """After each test (its reconcilers stopped), drop the reconcilers' finalizer from every MigSync, as
    before there was one: nothing runs to honour it, and a later test deletes the CRD."""
    yield
    with rplane.api_client() as api:
        custom = k8s.CustomObjectsApi(api)
        try:
            items = custom.list_cluster_custom_object("migops.io", "v1alpha1", "migsyncs")["items"]
        except k8s.exceptions.ApiException:
            return  # no CRD
        for obj in items:
            meta = obj["metadata"]
            if MIGSYNC_FINALIZER in (meta.get("finalizers") or ()):
                kept = [f for f in meta["finalizers"] if f != MIGSYNC_FINALIZER]
                custom.patch_namespaced_custom_object(
                    "migops.io",
                    "v1alpha1",
                    meta["namespace"],
                    "migsyncs",
                    meta["name"],
                    {"metadata": {"finalizers": kept or None}},
                )


@pytest.fixture
def repo(tmp_path: Path) -> GitRepo:
    return GitRepo(tmp_path / "config-repo")


@pytest.fixture
def gpu_nodes(rapi: ApiClient) -> Iterator[Callable[..., list[str]]]:
    """`gpu_nodes(count, pool=None) -> names`: H100 x8 nodes seeded as `migops local` seeds them
    (GFD labels, the operator's nvidia.com/mig.config=all-disabled), labelled pool=<pool>."""
    made: list[str] = []

    def make(count: int, pool: str | None = None, prefix: str | None = None) -> list[str]:
        prefix = prefix or f"n{uuid.uuid4().hex[:6]}-"
        specs = plan_nodes(count, [catalogue().resolve(H100)], 8, "mixed")
        names = []
        for i, spec in enumerate(specs):
            gfd = dict(spec.gfd_labels)
            if pool:
                gfd["pool"] = pool
            spec = type(spec)(f"{prefix}{i + 1:03d}", spec.gpu, spec.gpus, gfd, spec.operator_labels)
            apply_node(rapi, spec)
            names.append(spec.name)
        made.extend(names)
        return names

    yield make
    core = k8s.CoreV1Api(rapi)
    for name in made:
        try:
            core.delete_node(name)
        except k8s.exceptions.ApiException:
            pass


@pytest.fixture
def make_reconciler(rapi: ApiClient, tmp_path: Path) -> Iterator[Callable[..., Any]]:
    """`make_reconciler(repo_url, path="", ref="main", **kwargs) -> Reconciler` with a MigSync of its
    own (unique name), started; stopped after the test."""
    from migops.api.migsync import SyncSpec, migsync_object
    from migops.reconciler.controller import Reconciler

    made: list[Reconciler] = []
    try:  # every test starts from no MIG ConfigMap (its first sync creates it)
        k8s.CoreV1Api(rapi).delete_namespaced_config_map("default-mig-parted-config", "gpu-operator")
    except k8s.exceptions.ApiException as exc:
        if exc.status != 404:
            raise

    def make(
        url: str, path: str = "", ref: str | None = "main", *, trust: Any = None, name: str | None = None, **kwargs: Any
    ) -> Reconciler:
        from migops.api.migsync import TrustPolicy

        spec = SyncSpec(url, ref, path, 60.0, False, trust or TrustPolicy())
        name = name or f"t-{uuid.uuid4().hex[:8]}"
        ssa.apply(rapi, migsync_object(name, "migops-system", spec), field_manager="migops-test", force=True)
        kwargs.setdefault("cache_dir", tmp_path / "git-cache")
        rec = Reconciler(rapi, name=name, namespace="migops-system", spec=spec, **kwargs)
        made.append(rec)
        return rec.start()

    yield make
    for rec in made:
        rec.stop()

"""Shared fixtures: one real etcd + kube-apiserver for the whole session.

The control plane starts lazily, the first time a test asks for it (tests that do not need a
cluster never pay for it). If the binaries are missing and cannot be built, every cluster
test errors with the build script's output: the suite never skips them.

Fixtures:
  control_plane                         session  migops.local.controlplane.ControlPlane
  admin                                 session  kubernetes.client.ApiClient as system:masters
  kubeconfig_for(user, groups=())       session  -> Path, client-certificate identity
  service_account_kubeconfig(ns, name)  session  -> Path, TokenRequest token for a ServiceAccount
  client_for(kubeconfig_path)           function -> ApiClient, closed after the test
  namespace                             function  name of a fresh namespace
  node                                  function  name of a fresh, unlabelled Node (deleted after)
"""
from __future__ import annotations

import atexit
import re
import signal
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

    from migops.local.controlplane import ControlPlane

ClientFactory = Callable[[Path], "ApiClient"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test that uses the control plane `cluster` (so `-m 'not cluster'` works)."""
    for item in items:
        if "control_plane" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.cluster)


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    from migops.local.binaries import BinariesUnavailable, locate
    from migops.local.controlplane import ControlPlane

    try:
        binaries = locate()
    except BinariesUnavailable as exc:
        pytest.fail(f"cannot run cluster tests: {exc}", pytrace=False)
    plane = ControlPlane(binaries)
    # Layered cleanup: the fixture's teardown (normal end, failures, Ctrl-C), atexit (an
    # interpreter exit that skips teardown), SIGTERM/SIGHUP (CI cancelling the job) and the
    # control plane's watchdog process (pytest SIGKILLed, where nothing in here runs).
    restore = _stop_on_signals(plane.stop)
    atexit.register(plane.stop)
    try:
        plane.start()
        yield plane
    finally:
        plane.stop()
        atexit.unregister(plane.stop)
        restore()


def _stop_on_signals(stop: Callable[[], None]) -> Callable[[], None]:
    previous: dict[int, object] = {}

    def handler(signum: int, frame: FrameType | None) -> None:
        stop()
        signal.signal(signum, previous.get(signum, signal.SIG_DFL))  # type: ignore[arg-type]
        signal.raise_signal(signum)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        previous[sig] = signal.signal(sig, handler)

    def restore() -> None:
        for sig, old in previous.items():
            signal.signal(sig, old)  # type: ignore[arg-type]

    return restore


@pytest.fixture(scope="session")
def admin(control_plane: ControlPlane) -> Iterator[ApiClient]:
    with control_plane.api_client() as api:
        yield api


@pytest.fixture(scope="session")
def kubeconfig_for(control_plane: ControlPlane) -> Callable[..., Path]:
    """`kubeconfig_for(user, groups=())`: a client-certificate kubeconfig, no permissions."""
    return control_plane.kubeconfig_for


@pytest.fixture(scope="session")
def service_account_kubeconfig(control_plane: ControlPlane) -> Callable[[str, str], Path]:
    """`service_account_kubeconfig(namespace, name)`: creates the SA, returns a token kubeconfig."""
    return control_plane.kubeconfig_for_service_account


@pytest.fixture
def client_for(control_plane: ControlPlane) -> Iterator[ClientFactory]:
    """`client_for(kubeconfig_path)`: an ApiClient for that identity, closed after the test."""
    clients = []

    def make(path: Path) -> ApiClient:
        api = control_plane.api_client(path)
        clients.append(api)
        return api

    yield make
    for api in clients:
        api.close()


def _unique(request: pytest.FixtureRequest, prefix: str) -> str:
    # DNS label: lower-case alphanumerics and '-', at most 63 characters, test name for humans.
    stem = re.sub(r"[^a-z0-9-]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    return f"{prefix}-{stem}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def namespace(admin: ApiClient, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace. Deleted afterwards; without a controller-manager it stays Terminating."""
    from kubernetes import client as k8s

    name = _unique(request, "t")
    core = k8s.CoreV1Api(admin)
    core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    yield name
    core.delete_namespace(name)


@pytest.fixture
def node(admin: ApiClient, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh Node object with no labels (nothing runs on it: there is no kubelet)."""
    from kubernetes import client as k8s

    name = _unique(request, "node")
    core = k8s.CoreV1Api(admin)
    core.create_node({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
    yield name
    core.delete_node(name)

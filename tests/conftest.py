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
  real_node                             session  RealNodeCluster: a second control plane serving pods
                                                 and the real node migops-node running them (root)
  without_or_tools                      function  OR-Tools (the extra migops[suggest]) unimportable,
                                                 as in an install without the extra

The session ends with one line per tier (top-level test directory: tests/mig, tests/webhook, ...): its
tests by outcome and the seconds they took, then the total (TierSummary), so a regression in either
shows in every CI log.
"""

from __future__ import annotations

import re
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from last_resort import stopped_on_exit

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

    from migops.local.controlplane import ControlPlane
    from migops.local.realnode import RealNode

ClientFactory = Callable[[Path], "ApiClient"]


# An outcome overrides another of lower rank: a test that passed and then failed its teardown is an error.
_RANK = {"passed": 0, "skipped": 1, "xfailed": 1, "xpassed": 1, "error": 2, "failed": 3}


def _outcome(report: pytest.TestReport) -> str | None:
    """The test's outcome as this phase decides it (pytest's own categories), or None for a phase that
    passed without deciding anything (setup and teardown)."""
    if report.failed:
        return "failed" if report.when == "call" else "error"
    if report.skipped:
        return "xfailed" if hasattr(report, "wasxfail") else "skipped"
    if report.when == "call":
        return "xpassed" if hasattr(report, "wasxfail") else "passed"
    return None


def _tier(nodeid: str) -> str:
    """tests/mig/test_fit.py::test_x -> tests/mig (a test file at the top: its directory)."""
    parts = nodeid.split("::", 1)[0].split("/")
    return "/".join(parts[:-1][:2]) or "."


class TierSummary:
    """Per tier: how many tests had each outcome, and the seconds their setup, call and teardown took."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.tests: dict[str, tuple[str, float]] = {}  # node id -> (outcome, seconds)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        outcome, seconds = self.tests.get(report.nodeid, ("passed", 0.0))
        found = _outcome(report)
        if found is not None and (report.nodeid not in self.tests or _RANK[found] > _RANK[outcome]):
            outcome = found
        self.tests[report.nodeid] = (outcome, seconds + report.duration)

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.tests:
            return
        tiers: dict[str, tuple[Counter[str], float]] = {}
        for nodeid, (outcome, seconds) in sorted(self.tests.items()):
            counts, total = tiers.get(_tier(nodeid), (Counter(), 0.0))
            counts[outcome] += 1
            tiers[_tier(nodeid)] = (counts, total + seconds)
        everything: Counter[str] = sum((c for c, _ in tiers.values()), Counter())
        width = max(len(t) for t in [*tiers, "total"])
        terminalreporter.write_sep("-", "tiers: tests, seconds")
        for name, (counts, seconds) in [*tiers.items(), ("total", (everything, sum(s for _, s in tiers.values())))]:
            outcomes = ", ".join(f"{counts[o]} {o}" for o in _RANK if counts[o])
            line = f"{name:<{width}} {sum(counts.values()):>5} tests {seconds:>8.1f} s  {outcomes}"
            if name == "total":
                line += f"  (session {time.monotonic() - self.started:.1f} s wall)"
            terminalreporter.write_line(line)


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(TierSummary(), "migops-tier-summary")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test that uses the control plane `cluster` (so `-m 'not cluster'` works), and every
    test on the real node `real_node`."""
    for item in items:
        names = getattr(item, "fixturenames", ())
        if "control_plane" in names or "real_node" in names:
            item.add_marker(pytest.mark.cluster)
        if "real_node" in names:
            item.add_marker(pytest.mark.real_node)
    # One real node per machine: tests that start their own run before the session's `real_node`
    # fixture takes the machine's lock (it holds it until the session ends).
    items.sort(key=lambda item: item.get_closest_marker("real_node_exclusive") is None)


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    from migops.local.binaries import BinariesUnavailable, locate
    from migops.local.controlplane import ControlPlane

    try:
        binaries = locate()
    except BinariesUnavailable as exc:
        pytest.fail(f"cannot run cluster tests: {exc}", pytrace=False)
    plane = ControlPlane(binaries)
    # Layered cleanup: the fixture's teardown (normal end, failures, Ctrl-C), stopped_on_exit (an
    # interpreter exit that skips teardown, CI cancelling the job) and the control plane's watchdog
    # process (pytest SIGKILLed, where nothing in here runs).
    try:
        with stopped_on_exit(plane.stop):
            plane.start()
            yield plane
    finally:
        plane.stop()


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


@pytest.fixture
def without_or_tools(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process as an install without the optional extra migops[suggest]: every `ortools` module
    unimportable (a None in sys.modules makes `import` raise ModuleNotFoundError), restored afterwards."""
    import sys

    for name in [m for m in sys.modules if m == "ortools" or m.startswith("ortools.")] + ["ortools"]:
        monkeypatch.setitem(sys.modules, name, None)


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


@dataclass(frozen=True)
class RealNodeCluster:
    """What the `real_node` fixture yields.

    name          the Node's name, `migops-node` (Ready, untainted, labelled as a GPU node)
    plane         its ControlPlane (serves on `plane.url`, the node address; kube-controller-manager
                  and kube-scheduler run): `plane.kubeconfig_for(...)`, `plane.api_client(...)`
    node          the migops.local.realnode.RealNode (`node.layout` paths, `node.ctr(...)`)
    admin         ApiClient as system:masters on that control plane
    kubeconfig    the admin kubeconfig (for `kubectl --kubeconfig`)
    kubectl       path of the kubectl binary matching the API server
    gpu_state_file  the simulated GPUs' state file of this node (under its directory), for an agent on it
    The Node is labelled as a GPU node (GFD and GPU Operator labels, `nvidia.com/gpu` capacity) of
    local_cli.DEFAULT_GPU with 8 GPUs, like `migops local up --real-node`; the GPU Operator's
    ClusterPolicy and MIG ConfigMap are not seeded (migops.local.cluster.seed, agents.seed_mig_config).
    """

    name: str
    plane: ControlPlane
    node: RealNode
    admin: ApiClient
    kubeconfig: Path
    kubectl: Path
    gpu_state_file: Path

    def load_image(self, archive: bytes | Path) -> str:
        """Import an image archive (OCI layout or `docker save` tar; bytes or a path) into the node's
        containerd; pods then use it with `imagePullPolicy: Never` (or IfNotPresent)."""
        return self.node.load_image(archive)


@pytest.fixture(scope="session")
def real_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealNodeCluster]:
    """A control plane that serves pods (its own, not `control_plane`'s) and the real node `migops-node`
    running them: containerd, kubelet and kube-proxy on the host, kube-controller-manager (all controllers
    but node-lifecycle) and kube-scheduler. Started once per session, on first use (about 10 s).

    Needs root and the host packages (`make host-packages`); only one real node runs per machine at a
    time (a host-wide lock; a second fails with a message naming the holder). Images: build an archive
    (migops.local.images.busybox_archive, or a `docker save`) and `real_node.load_image(archive)`; no
    registry is reachable. Teardown stops every process and removes everything the node left
    (migops.local.nodeclean.sweep: mounts, netns, iptables chains, the bridge, cgroups, log links) and
    fails the session if anything remains.
    """
    from migops.local import realnode
    from migops.local.binaries import BinariesUnavailable, locate

    try:
        binaries = locate(node=True)
    except BinariesUnavailable as exc:
        pytest.fail(f"cannot run real-node tests: {exc}", pytrace=False)
    workdir = tmp_path_factory.mktemp("realnode")
    try:
        plane, node = realnode.start_cluster(binaries, workdir)
    except realnode.RealNodeError as exc:
        pytest.fail(f"cannot start the real node: {exc}", pytrace=False)

    def stop() -> None:
        problems = realnode.stop_cluster(plane, node)
        if problems:
            raise RuntimeError("the real node left: " + "; ".join(problems))

    try:
        with stopped_on_exit(stop), plane.api_client() as api:
            from migops.local import cluster
            from migops.local.cli import DEFAULT_GPU
            from migops.mig.catalogue import catalogue

            gpu = catalogue().resolve(DEFAULT_GPU)
            cluster.apply_real_node(api, cluster.plan_node(node.name, gpu, 8, "single"))
            yield RealNodeCluster(
                node.name, plane, node, api, plane.admin_kubeconfig, binaries.kubectl, node.layout.gpu_dir / "gpus.json"
            )
    finally:
        stop()

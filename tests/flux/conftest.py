"""One `migops local up --flux` for the Flux tests (package scope): the very command users run.

It starts etcd, kube-apiserver, the webhook, one simulated agent per node, the loopback git server and
Flux's source-controller and kustomize-controller (built once by hack/flux-binaries.sh: the first run on
a clean machine includes that build). The fixture then shortens the intervals of the GitRepository and
the Kustomization `up` created (2 s instead of 30 s), so each step of a test is seconds. Tests commit
and push to the served repository over HTTP, as a user would (`clone`).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from gitrepo import Clone
from kubernetes import config as kconfig
from kubernetes.client import ApiClient
from local_cli import down_on_exit

from migops import certs
from migops.local import flux, gitserver, kubeconfig, state
from migops.local.process import find_by_argument, find_by_environment

MIGOPS = Path(sys.executable).parent / "migops"
INTERVAL = "2s"


@dataclass
class FluxLocal:
    home: Path
    state: state.LocalState
    api: ApiClient

    @property
    def workdir(self) -> Path:
        return Path(self.state.workdir)

    @property
    def url(self) -> str:
        assert self.state.flux_git
        return self.state.flux_git

    def kubeconfig_for(self, user: str, groups: tuple[str, ...] = ()) -> Path:
        """A client-certificate kubeconfig signed by this cluster's client CA (what ControlPlane.kubeconfig_for
        mints; `up` ran in another process, so its ControlPlane is not at hand)."""
        pki = self.workdir / "pki"
        ca = certs.KeyPair((pki / "client-ca.crt").read_bytes(), (pki / "client-ca.key").read_bytes())
        client = certs.issue_client(ca, user, groups)
        # A ServiceAccount's name has colons: never in a path a kubeconfig list may split.
        path = self.workdir / "users" / f"test-{user.replace(':', '_')}.kubeconfig"
        return kubeconfig.write(
            path, kubeconfig.build(self.state.api_url, (pki / "ca.crt").read_bytes(), user, client=client)
        )

    @property
    def kubectl(self) -> list[str]:
        return [str(Path(self.state.bin_dir) / "kubectl"), f"--kubeconfig={self.state.kubeconfig}"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """These need the real API server too (through `migops local up`), so `-m "not cluster"` leaves them out."""
    for item in items:
        if "flux_local" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.cluster)


@pytest.fixture(scope="package")
def flux_local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FluxLocal]:
    home = tmp_path_factory.mktemp("flux-home")
    env = {**os.environ, "MIGOPS_HOME": str(home)}

    def migops(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(MIGOPS), "local", *args], env=env, capture_output=True, text=True, timeout=timeout)

    # A cold machine builds Flux here (long on 2 cores), as `make test` on a clean clone must.
    try:
        with down_on_exit(home):
            up = migops("up", "--flux", "--nodes", "2", "--gpus-per-node", "2", "--strategy", "mixed", timeout=3600)
            assert up.returncode == 0, f"migops local up --flux failed:\n{up.stdout}\n{up.stderr}"
            current = state.load(home)
            assert current is not None and current.flux_git, up.stdout
            api = kconfig.new_client_from_config(config_file=current.kubeconfig)
            try:
                flux.apply(
                    api,
                    flux.git_repository(flux.REPO, current.flux_git, interval=INTERVAL),
                    flux.kustomization(flux.REPO, flux.REPO, f"./{flux.CONFIG_DIR}", interval=INTERVAL, retry=INTERVAL),
                )
                yield FluxLocal(home, current, api)
            finally:
                api.close()
    finally:
        workdir = state.local_dir(home)
        down = migops("down", timeout=300)
        assert down.returncode == 0, down.stderr
        # Nothing of Flux's survives: both controllers (found by their environment) and the git server.
        assert not find_by_environment(flux.WORKDIR_ENV, str(workdir))
        assert not find_by_argument(gitserver.identifying_arguments(flux.git_root(workdir))[0])


@pytest.fixture
def clone(flux_local: FluxLocal, tmp_path: Path) -> Clone:
    return Clone(flux_local.url, tmp_path / "clone")

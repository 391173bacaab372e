"""One `migops local up --argocd` for the Argo CD tests (package scope): the very command users run.

It starts etcd, kube-apiserver, the webhook, one simulated agent per node, the loopback git server,
redis and Argo CD's repo-server and application-controller (built once by hack/argocd-binaries.sh: the
first run on a clean machine includes that build). Argo CD's own ARGOCD_RECONCILIATION_TIMEOUT is
shortened to 3 s for `up`, so the controller refreshes every Application (git and live state) every few
seconds, as a git webhook would make it. Tests commit and push over HTTP, as a user would (`Clone`).
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
from migops.local import argocd, flux, gitserver, kubeconfig, state
from migops.local.process import find_by_argument, find_by_environment

MIGOPS = Path(sys.executable).parent / "migops"
RESYNC = "3s"


@dataclass
class ArgoLocal:
    home: Path
    state: state.LocalState
    api: ApiClient
    up_seconds: float

    @property
    def workdir(self) -> Path:
        return Path(self.state.workdir)

    @property
    def url(self) -> str:
        assert self.state.argocd_git
        return self.state.argocd_git

    def kubeconfig_for(self, user: str, groups: tuple[str, ...] = ()) -> Path:
        """A client-certificate kubeconfig signed by this cluster's client CA (as tests/flux mints it:
        `up` ran in another process, so its ControlPlane is not at hand)."""
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
        if "argo_local" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.cluster)


# Slow once per package (25-85 s in make test, most of it under the seven tiers' load): a whole `migops
# local up --argocd`, Argo CD's repo-server, application-controller and redis started and synced for real.
@pytest.fixture(scope="package")
def argo_local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ArgoLocal]:
    import time

    home = tmp_path_factory.mktemp("argocd-home")
    env = {**os.environ, "MIGOPS_HOME": str(home), argocd.RESYNC_ENV: RESYNC}

    def migops(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(MIGOPS), "local", *args], env=env, capture_output=True, text=True, timeout=timeout)

    # A cold machine builds Argo CD here (minutes on 2 cores), as `make test` on a clean clone must.
    began = time.monotonic()
    try:
        with down_on_exit(home):
            up = migops("up", "--argocd", "--nodes", "2", "--gpus-per-node", "2", "--strategy", "mixed", timeout=3600)
            seconds = time.monotonic() - began
            assert up.returncode == 0, f"migops local up --argocd failed:\n{up.stdout}\n{up.stderr}"
            print(up.stdout)
            current = state.load(home)
            assert current is not None and current.argocd_git, up.stdout
            api = kconfig.new_client_from_config(config_file=current.kubeconfig)
            try:
                yield ArgoLocal(home, current, api, seconds)
            finally:
                api.close()
    finally:
        workdir = state.local_dir(home)
        down = migops("down", timeout=300)
        assert down.returncode == 0, down.stderr
        # Nothing of Argo CD's survives: redis, repo-server, controller (found by their environment) and
        # the git server.
        assert not find_by_environment(argocd.WORKDIR_ENV, str(workdir))
        assert not find_by_argument(gitserver.identifying_arguments(flux.git_root(workdir))[0])


@pytest.fixture
def clone(argo_local: ArgoLocal, tmp_path: Path) -> Clone:
    return Clone(argo_local.url, tmp_path / "clone")

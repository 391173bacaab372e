"""`migops local up --repo` as a new user runs it: the
webhook and the reconciler run as the manifests' ServiceAccounts, not system:masters, and the stack still
works; a nodes.yaml pinning a node by `kubernetes.io/hostname` selects it (simulated nodes carry the
kubelet's labels); an assignment that matches no node shows as a warning in `migops status`; only the
reconciler may write its applied record."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from gitrepo import CONFIG_YAML, GitRepo
from kubernetes import client as k8s
from kubernetes import config
from kubernetes.client.exceptions import ApiException

from migops.local import identity
from migops.local.process import find_by_argument

MIGOPS = Path(sys.executable).parent / "migops"
ROOT = Path(__file__).resolve().parents[2]
NS = "migops-system"


def _nodes(*pins: tuple[str, str]) -> str:
    body = "".join(
        f"  - nodeSelector: {{matchLabels: {{kubernetes.io/hostname: {host}}}}}\n    config: {config}\n"
        for host, config in pins
    )
    return f"version: v1\nrollout: {{maxUnavailable: '100%'}}\nassignments:\n{body}"


def _until(call: Callable[[], Any], timeout: float = 90.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = call()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.5)


def _condition(api: k8s.ApiClient, kind: str) -> dict[str, Any]:
    obj = k8s.CustomObjectsApi(api).get_namespaced_custom_object("migops.io", "v1alpha1", NS, "migsyncs", "migops")
    return next((c for c in (obj.get("status") or {}).get("conditions") or () if c["type"] == kind), {})


def _who(kubeconfig: Path) -> Any:
    with config.new_client_from_config(config_file=str(kubeconfig)) as api:
        review = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
        return k8s.AuthenticationV1Api(api).create_self_subject_review(review).status.user_info


def _argv(fragment: str) -> list[str]:
    """The command line of the process started with `fragment` (the webhook's workers share its master's)."""
    refs = find_by_argument(fragment)
    assert refs, fragment
    ref = refs[0]
    return [a.decode() for a in Path(f"/proc/{ref.pid}/cmdline").read_bytes().split(b"\0") if a]


@pytest.fixture
def stack(control_plane, tmp_path: Path) -> Iterator[tuple[Path, GitRepo]]:
    """`migops local up --nodes 2 --repo` on a repo that pins gpu-node-1 by hostname; `down` after."""
    repo = GitRepo(tmp_path / "config-repo")
    repo.commit({"config.yaml": CONFIG_YAML, "nodes.yaml": _nodes(("gpu-node-1", "all-3g.40gb"))})
    home = tmp_path / "home"
    env = {**os.environ, "MIGOPS_HOME": str(home)}

    def local(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(MIGOPS), "local", *args], env=env, capture_output=True, text=True, timeout=240, check=False
        )

    try:
        up = local("up", "--nodes", "2", "--strategy", "mixed", "--repo", str(repo.path))
        assert up.returncode == 0, up.stdout + up.stderr
        yield home, repo
    finally:
        down = local("down")
    assert down.returncode == 0, down.stderr


def test_local_components_are_least_privileged_and_the_stack_works(stack: tuple[Path, GitRepo]) -> None:
    home, repo = stack
    workdir = home / "local"
    admin_kubeconfig = workdir / "admin.kubeconfig"
    # Each component runs with its own kubeconfig: its ServiceAccount, no system:masters.
    for fragment, kubeconfig, user in (
        (f"--cache-dir={workdir / 'reconciler-git'}", workdir / "reconciler.kubeconfig", identity.RECONCILER.user),
        (f"--tls-cert={workdir / 'webhook' / 'tls.pem'}", workdir / "webhook.kubeconfig", identity.WEBHOOK.user),
    ):
        argv = _argv(fragment)
        assert f"--kubeconfig={kubeconfig}" in argv or str(kubeconfig) in argv, argv
        assert not any("admin.kubeconfig" in a for a in argv), argv
        who = _who(kubeconfig)
        assert who.username == user and "system:masters" not in (who.groups or []), who
        with config.new_client_from_config(config_file=str(kubeconfig)) as api:
            with pytest.raises(ApiException) as err:  # RBAC applies: no Secrets
                k8s.CoreV1Api(api).list_secret_for_all_namespaces()
            assert err.value.status == 403
    with config.new_client_from_config(config_file=str(admin_kubeconfig)) as api:
        core = k8s.CoreV1Api(api)
        # The kubelet's labels: the node pinned by hostname gets its config; the other one is not touched.
        node = core.read_node("gpu-node-1").metadata.labels
        assert node["kubernetes.io/hostname"] == "gpu-node-1" and node["kubernetes.io/os"] == "linux"
        assert node["kubernetes.io/arch"] and node["beta.kubernetes.io/arch"] == node["kubernetes.io/arch"]
        assert _until(
            lambda: core.read_node("gpu-node-1").metadata.labels.get("nvidia.com/mig.config") == "all-3g.40gb"
        )
        assert _until(lambda: _condition(api, "Ready").get("status") == "True"), _condition(api, "Ready")
        assert core.read_node("gpu-node-2").metadata.labels.get("nvidia.com/mig.config") == "all-disabled"
        assert _condition(api, "AssignmentsMatched")["status"] == "True"
        # The applied record was written by the reconciler; nobody else may write it, not even the admin.
        record = core.read_namespaced_config_map("migops-applied-migops", NS)
        assert record.data["revision"] == repo.git("rev-parse", "HEAD").strip()
        with pytest.raises(ApiException) as err:
            core.patch_namespaced_config_map("migops-applied-migops", NS, {"data": {"revision": "2" * 40}})
        assert err.value.status in (403, 422)
        assert "only ServiceAccount migops-system/migops-reconciler may write it, not admin" in err.value.body
        # A pin on a node that does not exist: Ready, but `migops status` shows the warning.
        repo.commit({"nodes.yaml": _nodes(("gpu-node-1", "all-3g.40gb"), ("gpu-node-9", "all-1g.10gb"))})
        matched = _until(lambda: _condition(api, "AssignmentsMatched").get("status") == "False", timeout=60)
        assert matched, _condition(api, "AssignmentsMatched")
    status = subprocess.run(
        [str(MIGOPS), "status", "--kubeconfig", str(admin_kubeconfig)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    lines = status.stdout.splitlines()
    assert lines[1].split()[:3] == ["migops-system", "migops", "True"], status.stdout
    warning = next((line for line in lines if "warning: AssignmentsMatched (MatchesNoNode)" in line), "")
    assert warning.startswith("  migops: ") and "matches no node" in warning, status.stdout


@pytest.mark.parametrize(
    "shipped, packaged",
    [
        ("reconciler/rbac.yaml", "reconciler-rbac.yaml"),
        ("reconciler/applied-record-policy.yaml", "reconciler-applied-record-policy.yaml"),
        ("webhook/rbac.yaml", "webhook-rbac.yaml"),
    ],
)
def test_the_local_stack_installs_the_manifests_identities(shipped: str, packaged: str) -> None:
    """migops.local.identity applies the manifests themselves: its package data is a link into
    manifests/base (a wheel holds the file), never a copy that could drift."""
    link = ROOT / "local" / "data" / packaged
    assert link.is_symlink() and link.resolve() == (ROOT / "manifests/base" / shipped).resolve()
    assert packaged in identity.RECONCILER.manifests + identity.WEBHOOK.manifests

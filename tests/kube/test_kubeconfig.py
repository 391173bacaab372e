"""migops finds its cluster as kubectl does: --kubeconfig, $KUBECONFIG (merged), ~/.kube/config, in-cluster;
--context picks a context. Each identity is asked of the real API server (SelfSubjectReview), with a
temporary HOME, so the test machine's own kubeconfig never takes part."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes.config.config_exception import ConfigException

from migops.kube.client import api_client, locate


def _whoami(api: k8s.ApiClient) -> str:
    with api:
        review = k8s.AuthenticationV1Api(api).create_self_subject_review(
            {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
        )
    return review.status.user_info.username


def _renamed(path: Path, context: str, user: str, *, current: bool = True) -> dict:
    """The control plane's kubeconfig for one user, its context (and, to test merging, its user entry's
    key) renamed."""
    doc = yaml.safe_load(path.read_text())
    doc["contexts"][0]["name"] = context
    doc["contexts"][0]["context"]["user"] = user
    doc["users"][0]["name"] = user
    if current:
        doc["current-context"] = context
    else:
        doc.pop("current-context")
    return doc


def _write(path: Path, doc: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("KUBECONFIG", "")  # recorded, so the values the tests set are undone after them
    monkeypatch.delenv("KUBECONFIG")
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    return tmp_path / "home"


def test_home_kubeconfig_is_used_without_kubeconfig_env(kubeconfig_for, home: Path) -> None:
    _write(home / ".kube" / "config", _renamed(kubeconfig_for("kc-alice"), "alice", "alice"))
    assert locate().origin == "~/.kube/config"
    assert _whoami(api_client()) == "kc-alice"


def test_kubeconfig_env_is_a_merged_list_first_wins(kubeconfig_for, home: Path, tmp_path: Path) -> None:
    _write(home / ".kube" / "config", _renamed(kubeconfig_for("kc-home"), "home", "home"))
    first = _write(tmp_path / "a" / "config", _renamed(kubeconfig_for("kc-alice"), "alice", "shared"))
    second = _write(tmp_path / "b" / "config", _renamed(kubeconfig_for("kc-bob"), "bob", "bob"))
    # A third file that names the user of the first file's context again: the first definition wins.
    third = _write(tmp_path / "c" / "config", _renamed(kubeconfig_for("kc-carol"), "carol", "shared", current=False))
    missing = tmp_path / "nowhere" / "config"
    os.environ["KUBECONFIG"] = os.pathsep.join(map(str, (missing, first, second, third)))
    assert locate().origin == "$KUBECONFIG" and locate().paths == (first, second, third)
    # current-context: the first file that sets one (kubectl), not the last (the client library's own rule).
    assert _whoami(api_client()) == "kc-alice"
    assert _whoami(api_client(context="bob")) == "kc-bob"
    assert _whoami(api_client(context="carol")) == "kc-alice", "user 'shared' is the first file's"
    # --kubeconfig: that file alone.
    assert _whoami(api_client(second)) == "kc-bob"
    with pytest.raises(ConfigException):
        api_client(second, context="alice")


def test_relative_certificate_paths_are_read_beside_their_file(kubeconfig_for, home: Path, tmp_path: Path) -> None:
    doc = _renamed(kubeconfig_for("kc-files"), "files", "files")
    user = doc["users"][0]["user"]
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    for key in ("client-certificate", "client-key"):
        (folder / f"{key}.pem").write_bytes(base64.b64decode(user.pop(f"{key}-data")))
        user[key] = f"{key}.pem"
    cluster = doc["clusters"][0]["cluster"]
    (folder / "ca.pem").write_bytes(base64.b64decode(cluster.pop("certificate-authority-data")))
    cluster["certificate-authority"] = "ca.pem"
    empty = _write(tmp_path / "first" / "config", {"apiVersion": "v1", "kind": "Config", "preferences": {}})
    os.environ["KUBECONFIG"] = os.pathsep.join((str(empty), str(_write(folder / "config", doc))))
    assert _whoami(api_client()) == "kc-files"


def test_no_kubeconfig_anywhere_falls_to_in_cluster(home: Path, tmp_path: Path) -> None:
    assert locate().origin == "in-cluster"
    os.environ["KUBECONFIG"] = str(tmp_path / "missing")
    assert locate().origin == "in-cluster"
    with pytest.raises(ConfigException, match=r"no kubeconfig .*and not in a pod"):
        api_client()
    with pytest.raises(ConfigException, match="--context x: no kubeconfig"):
        api_client(context="x")
    with pytest.raises(ConfigException, match="--kubeconfig .*: no such file"):
        api_client(tmp_path / "missing")


def _migops(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "migops", *args], env=env, capture_output=True, text=True, timeout=120, check=False
    )


def test_cli_status_reads_home_kubeconfig_and_context(kubeconfig_for, home: Path, tmp_path: Path) -> None:
    """The issue's case: a valid ~/.kube/config, no $KUBECONFIG: `migops status` talks to the cluster.
    The user may not list MigSyncs (no RBAC), so the server's 403 is the proof it got there."""
    doc = _renamed(kubeconfig_for("kc-cli"), "cli", "cli")
    doc["contexts"].append({"name": "nobody", "context": {"cluster": doc["clusters"][0]["name"], "user": "none"}})
    doc["users"].append({"name": "none", "user": {"token": "not-a-token"}})
    _write(home / ".kube" / "config", doc)
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
    out = _migops("status", env=env)
    assert "HTTP 403" in out.stderr and out.returncode == 2, out.stderr
    out = _migops("status", "--context", "nobody", env=env)
    assert "HTTP 401" in out.stderr and out.returncode == 2, out.stderr
    out = _migops("status", "--context", "absent", env=env)
    assert out.returncode == 2 and "absent" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr

"""The real Argo CD (repo-server + application-controller) syncing a MIG config repo through migops's webhook.

All on one `migops local up --argocd` (conftest): commits pushed over HTTP to the loopback git server,
fetched by argocd-repo-server, applied server-side by argocd-application-controller as ServiceAccount
argocd/argocd-application-controller (Argo CD's own install RBAC) into the `in-cluster` destination,
through migops's validating and mutating webhooks.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from gitrepo import CONFIG_YAML
from kubernetes import client as k8s
from kubernetes.client import ApiClient
from polling import until

from migops.kube.names import CONFIG_DIGEST_ANNOTATION, MIG_CONFIG_LABEL
from migops.local import argocd
from migops.local.agents import MIG_CONFIGMAP

NAMESPACE, NAME = MIG_CONFIGMAP
APP = argocd.REPO
CONFIG_FILE = argocd.CONFIG_FILE
# Unplaceable on every GPU: 2 x 3g.40gb + 1 x 1g.10gb needs 9 memory slices of an H100's 8.
UNPLACEABLE = (
    CONFIG_YAML
    + """\
  unplaceable:
    - devices: all
      mig-enabled: true
      mig-devices:
        "3g.40gb": 2
        "1g.10gb": 1
"""
)
UNKNOWN_PROFILE = (
    CONFIG_YAML
    + """\
  typo:
    - devices: all
      mig-enabled: true
      mig-devices:
        "1g.9gb": 7
"""
)
MORE = (
    CONFIG_YAML
    + """\
  all-2g.20gb:
    - devices: all
      mig-enabled: true
      mig-devices:
        "2g.20gb": 3
"""
)
DENIED = 'admission webhook "configmaps.validate.migops.io" denied the request'


def cm_file(text: str, wave: int | None = None) -> str:
    return argocd.configmap_manifest(NAMESPACE, NAME, text, wave=wave)


def configmap(api: ApiClient) -> dict[str, Any]:
    return api.sanitize_for_serialization(k8s.CoreV1Api(api).read_namespaced_config_map(NAME, NAMESPACE))


def node(api: ApiClient, name: str) -> dict[str, Any]:
    return api.sanitize_for_serialization(k8s.CoreV1Api(api).read_node(name))


def managers(obj: dict[str, Any], path: Sequence[str], key: str) -> set[str]:
    """The field managers that own `key` of the map at `path` (server-side apply's managedFields)."""
    found = set()
    for entry in obj["metadata"].get("managedFields") or ():
        fields = entry.get("fieldsV1") or {}
        for part in path:
            fields = fields.get(f"f:{part}") or {}
        if f"f:{key}" in fields:
            found.add(entry["manager"])
    return found


def get_applications(argo_local: Any) -> str:
    out = subprocess.run(
        [*argo_local.kubectl, "get", "application", "-n", argocd.NAMESPACE],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    print(out.stdout)  # shown with -s: the table a user sees
    return out.stdout


def wait_failed(api: ApiClient, name: str, sha: str, *, timeout: float = 120) -> dict[str, Any]:
    """The Application's status once its (automated) sync of `sha` has failed."""

    def failed() -> dict[str, Any] | None:
        s = argocd.get_application(api, name).get("status") or {}
        op = s.get("operationState") or {}
        if (op.get("syncResult") or {}).get("revision") == sha and op.get("phase") in ("Failed", "Error"):
            return s
        return None

    result: dict[str, Any] = until(failed, timeout=timeout, what=f"Application {name} failing {sha[:12]}")
    return result


def push_and_wait(argo_local: Any, clone: Any, files: dict[str, str | None], message: str, app: str = APP) -> str:
    sha = clone.push(files, message)
    argocd.wait_synced(argo_local.api, app, sha)
    return sha


# ------------------------------------------------------------------------------------------- the ConfigMap
def test_a_good_commit_lands_as_git_says_through_the_webhook(argo_local, clone) -> None:
    print(f"migops local up --argocd: {argo_local.up_seconds:.1f}s")
    sha = push_and_wait(argo_local, clone, {CONFIG_FILE: cm_file(CONFIG_YAML)}, "H100 configs")
    cm = configmap(argo_local.api)
    assert cm["data"]["config.yaml"] == CONFIG_YAML
    # Applied server-side by Argo CD's own field manager, through the mutating webhook (its digest).
    assert argocd.ARGOCD_MANAGER in managers(cm, ("data",), "config.yaml")
    assert CONFIG_DIGEST_ANNOTATION in cm["metadata"]["annotations"]
    assert cm["metadata"]["annotations"]["argocd.argoproj.io/tracking-id"].startswith(f"{APP}:")
    status = argocd.get_application(argo_local.api, APP)["status"]
    assert status["sync"] == {**status["sync"], "status": "Synced", "revision": sha}
    assert status["health"]["status"] == "Healthy"
    assert [(r["kind"], r["namespace"], r["name"], r["status"]) for r in status["resources"]] == [
        ("ConfigMap", NAMESPACE, NAME, "Synced")
    ]
    table = get_applications(argo_local)
    assert f"{APP}   Synced        Healthy" in table, table


@pytest.mark.parametrize(
    ("bad", "rule", "path"),
    [
        (UNPLACEABLE, "[placement-infeasible]", "mig-configs.unplaceable[0].mig-devices"),
        (UNKNOWN_PROFILE, "[unknown-profile]", 'mig-configs.typo[0].mig-devices."1g.9gb"'),
    ],
    ids=["unplaceable", "unknown-profile"],
)
def test_a_bad_commit_is_denied_shown_in_the_application_and_the_next_good_one_recovers(
    argo_local, clone, bad: str, rule: str, path: str
) -> None:
    api = argo_local.api
    push_and_wait(argo_local, clone, {CONFIG_FILE: cm_file(CONFIG_YAML)}, "good")
    before = configmap(api)["metadata"]["resourceVersion"]
    get_applications(argo_local)

    pushed = time.monotonic()
    sha = clone.push({CONFIG_FILE: cm_file(bad)}, "bad")
    status = wait_failed(api, APP, sha)
    print(f"commit -> denial shown in the Application: {time.monotonic() - pushed:.1f}s")
    op = status["operationState"]
    message = op["message"]
    print(f"operationState.phase={op['phase']} message: {message}")
    assert DENIED in message and rule in message and path in message, message
    # The per-resource sync result carries the same text.
    (result,) = [r for r in op["syncResult"]["resources"] if r["kind"] == "ConfigMap"]
    print(f"syncResult.resources[ConfigMap]: {result['status']}: {result['message']}")
    assert result["status"] == "SyncFailed" and DENIED in result["message"] and rule in result["message"]
    assert status["sync"]["status"] == "OutOfSync" and status["sync"]["revision"] == sha
    # Nothing of the bad commit was written; the cluster keeps the good one.
    time.sleep(4)
    cm = configmap(api)
    assert cm["data"]["config.yaml"] == CONFIG_YAML and cm["metadata"]["resourceVersion"] == before
    table = get_applications(argo_local)
    assert "OutOfSync" in table, table

    fixed = push_and_wait(argo_local, clone, {CONFIG_FILE: cm_file(MORE)}, "fixed")
    assert configmap(api)["data"]["config.yaml"] == MORE
    assert argocd.get_application(api, APP)["status"]["sync"]["revision"] == fixed
    get_applications(argo_local)


def test_refreshing_an_unchanged_commit_writes_nothing(argo_local, clone) -> None:
    """Argo CD's diff (against the live object the mutating webhook annotated) finds no drift: refresh
    after refresh of the same commit, no write and the Application stays Synced."""
    api = argo_local.api
    sha = push_and_wait(argo_local, clone, {CONFIG_FILE: cm_file(CONFIG_YAML)}, "steady")
    before = configmap(api)["metadata"]["resourceVersion"]
    reconciled = argocd.get_application(api, APP)["status"]["reconciledAt"]
    for _ in range(3):
        argocd.refresh(api, APP, "hard")  # what `argocd app get --hard-refresh` does: manifests regenerated
        until(
            lambda: (
                "argocd.argoproj.io/refresh"
                not in (argocd.get_application(api, APP)["metadata"].get("annotations") or {})
            ),
            timeout=60,
            what="the refresh handled",
        )
    time.sleep(7)  # two more resync periods (3 s)
    after = argocd.get_application(api, APP)["status"]
    assert after["reconciledAt"] != reconciled
    assert after["sync"]["status"] == "Synced" and after["sync"]["revision"] == sha
    assert configmap(api)["metadata"]["resourceVersion"] == before


# ------------------------------------------------------------------------------------------- server-side diff
@pytest.fixture
def ssd_app(argo_local) -> Iterator[str]:
    """A second, manual-sync Application of the same path with Server-Side Diff on."""
    name = "mig-config-ssd"
    argocd.apply(
        argo_local.api,
        argocd.application(name, argo_local.url, argocd.CONFIG_DIR, automated=False, server_side_diff=True),
    )
    yield name
    k8s.CustomObjectsApi(argo_local.api).delete_namespaced_custom_object(
        "argoproj.io", "v1alpha1", argocd.NAMESPACE, "applications", name
    )


def test_server_side_diff_shows_the_denial_before_any_sync(argo_local, clone, ssd_app) -> None:
    api = argo_local.api
    good = push_and_wait(argo_local, clone, {CONFIG_FILE: cm_file(CONFIG_YAML)}, "good")
    until(
        lambda: (argocd.get_application(api, ssd_app).get("status") or {}).get("sync", {}).get("revision") == good,
        timeout=60,
        what="the server-side-diff Application compared at the good commit",
    )
    # Stop the automated Application from syncing the bad commit, so only a diff ever sees it.
    k8s.CustomObjectsApi(api).patch_namespaced_custom_object(
        "argoproj.io", "v1alpha1", argocd.NAMESPACE, "applications", APP, {"spec": {"syncPolicy": {"automated": None}}}
    )
    try:
        sha = clone.push({CONFIG_FILE: cm_file(UNPLACEABLE)}, "bad, diffed only")

        def compared() -> dict[str, Any] | None:
            s = argocd.get_application(api, ssd_app).get("status") or {}
            return s if (s.get("sync") or {}).get("revision") == sha else None

        status = until(compared, timeout=90, what="the server-side diff of the bad commit")
        where = [c for c in status.get("conditions") or () if DENIED in c.get("message", "")]
        print(f"server-side diff: sync={status['sync']['status']} conditions={status.get('conditions')}")
        assert where, status
        assert "[placement-infeasible]" in where[0]["message"]
        assert "operationState" not in status  # never synced
        assert configmap(api)["data"]["config.yaml"] == CONFIG_YAML
    finally:
        argocd.apply(api, argocd.application(APP, argo_local.url, argocd.CONFIG_DIR))
    push_and_wait(argo_local, clone, {CONFIG_FILE: cm_file(CONFIG_YAML)}, "good again")


# ------------------------------------------------------------------------------------------- waves and labels
def test_sync_waves_apply_the_config_before_the_label_naming_it(argo_local, clone) -> None:
    api = argo_local.api
    node1 = argo_local.state.nodes[0].name
    push_and_wait(argo_local, clone, {CONFIG_FILE: cm_file(CONFIG_YAML)}, "base")
    assert "all-2g.20gb" not in configmap(api)["data"]["config.yaml"]
    # One commit adds config all-2g.20gb and assigns it to a node: the ConfigMap in wave -1, the label in 0.
    sha = push_and_wait(
        argo_local,
        clone,
        {
            CONFIG_FILE: cm_file(MORE, wave=-1),
            f"{argocd.CONFIG_DIR}/node-{node1}.yaml": argocd.node_manifest(node1, "all-2g.20gb", wave=0),
        },
        "add all-2g.20gb and assign it",
    )
    n = node(api, node1)
    assert n["metadata"]["labels"][MIG_CONFIG_LABEL] == "all-2g.20gb"
    assert managers(n, ("metadata", "labels"), MIG_CONFIG_LABEL) == {argocd.ARGOCD_MANAGER}
    op = argocd.get_application(api, APP)["status"]["operationState"]
    waves = {r["kind"]: r.get("syncPhase") for r in op["syncResult"]["resources"]}
    print(f"waves {sha[:12]}: {op['syncResult']['resources']}")
    assert set(waves) == {"ConfigMap", "Node"}

    # A label naming a config the ConfigMap lacks: denied by the Node webhook, shown in the Application.
    bad = clone.push({f"{argocd.CONFIG_DIR}/node-{node1}.yaml": argocd.node_manifest(node1, "no-such-config")}, "typo")
    status = wait_failed(api, APP, bad)
    print(f"bad label: {status['operationState']['message']}")
    assert 'admission webhook "nodes.validate.migops.io" denied the request' in status["operationState"]["message"]
    assert node(api, node1)["metadata"]["labels"][MIG_CONFIG_LABEL] == "all-2g.20gb"
    # Leave the node as git's other tests expect: no Node manifest (Prune=false keeps the label).
    push_and_wait(
        argo_local, clone, {f"{argocd.CONFIG_DIR}/node-{node1}.yaml": None, CONFIG_FILE: cm_file(MORE)}, "no label"
    )

"""The real Argo CD (repo-server + application-controller) syncing a MIG config repo through migops's webhook.

All on one `migops local up --argocd` (conftest): commits pushed over HTTP to the loopback git server,
fetched by argocd-repo-server, applied server-side by argocd-application-controller as ServiceAccount
argocd/argocd-application-controller (Argo CD's own install RBAC) into the `in-cluster` destination,
through migops's validating and mutating webhooks.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from gitops_commits import DENIED, MORE, UNKNOWN_PROFILE, UNPLACEABLE
from gitrepo import CONFIG_YAML, nodes_yaml
from kubernetes import client as k8s
from kubernetes.client import ApiClient
from polling import until

from migops.api.names import CONFIG_DIGEST_ANNOTATION, MANAGED_BY_ANNOTATION, MIG_CONFIG_LABEL, RECONCILER_MANAGER
from migops.local import argocd
from migops.local.agents import MIG_CONFIGMAP
from migops.local.ports import free_ports
from migops.webhook.state import DEFAULT_RECONCILER_USER

NAMESPACE, NAME = MIG_CONFIGMAP
APP = argocd.REPO
CONFIG_FILE = argocd.CONFIG_FILE
# Unplaceable on every GPU: 2 x 3g.40gb + 1 x 1g.10gb needs 9 memory slices of an H100's 8.


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


def row(table: str, name: str) -> list[str]:
    """One Application's row of `kubectl get application` (NAME, SYNC STATUS, HEALTH STATUS)."""
    return next(line.split() for line in table.splitlines() if line.split()[:1] == [name])


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
    assert row(get_applications(argo_local), APP) == [APP, "Synced", "Healthy"]


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
    assert row(get_applications(argo_local), APP)[1] == "OutOfSync"

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
        # Argo CD v3.6 then reuses the failed comparison as its diff cache (Server-Side Diff skips a
        # recompute while the revision is unchanged) and shows the refused commit as Synced, though
        # nothing of it was applied: why migops's Applications set ServerSideDiff=false with
        # ServerSideApply=true (which would turn it on).
        until(
            lambda: (
                (argocd.get_application(api, ssd_app).get("status") or {}).get("sync", {}).get("status") == "Synced"
            ),
            timeout=60,
            what="the server-side-diff Application showing the refused commit as Synced",
        )
        flipped = argocd.get_application(api, ssd_app)["status"]
        print(f"server-side diff, next refresh: sync={flipped['sync']} conditions={flipped.get('conditions')}")
        assert flipped["sync"]["revision"] == sha
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
    # Fixed: a config every later commit keeps (the file stays: removing it would leave the tracked
    # Node OutOfSync, "requires pruning", and pruning is off).
    push_and_wait(
        argo_local,
        clone,
        {f"{argocd.CONFIG_DIR}/node-{node1}.yaml": argocd.node_manifest(node1, "all-1g.10gb")},
        "fixed label",
    )
    assert node(api, node1)["metadata"]["labels"][MIG_CONFIG_LABEL] == "all-1g.10gb"


def test_without_waves_argo_cds_kind_order_applies_the_config_first(argo_local, clone) -> None:
    """The same commit shape with no sync-wave annotations: gitops-engine sorts one wave's tasks by kind
    (ConfigMap is in its kind order, Node is not, so it comes last) and applies each kind only after
    the previous kind's applies returned, so the label still meets the new ConfigMap."""
    api = argo_local.api
    node1 = argo_local.state.nodes[0].name
    with_1g20 = (
        MORE
        + """\
  all-1g.20gb:
    - devices: all
      mig-enabled: true
      mig-devices:
        "1g.20gb": 4
"""
    )
    assert "all-1g.20gb" not in configmap(api)["data"]["config.yaml"]
    sha = push_and_wait(
        argo_local,
        clone,
        {
            CONFIG_FILE: cm_file(with_1g20),
            f"{argocd.CONFIG_DIR}/node-{node1}.yaml": argocd.node_manifest(node1, "all-1g.20gb"),
        },
        "add all-1g.20gb and assign it, no waves",
    )
    assert node(api, node1)["metadata"]["labels"][MIG_CONFIG_LABEL] == "all-1g.20gb"
    op = argocd.get_application(api, APP)["status"]["operationState"]
    assert op["syncResult"]["revision"] == sha
    print(f"no waves {sha[:12]}: {[(r['kind'], r['status'], r['message']) for r in op['syncResult']['resources']]}")
    # Back, label first: a config a node is labelled with is not removed in the same commit.
    push_and_wait(
        argo_local,
        clone,
        {f"{argocd.CONFIG_DIR}/node-{node1}.yaml": argocd.node_manifest(node1, "all-1g.10gb")},
        "back",
    )
    push_and_wait(argo_local, clone, {CONFIG_FILE: cm_file(MORE)}, "drop all-1g.20gb")


# ------------------------------------------------------------------------------------------- least privilege
@pytest.mark.parametrize(
    ("account", "verb", "resource", "namespace", "allowed"),
    [
        # install.yaml's Role in argocd and its ClusterRole (everything, for any destination resource)
        (argocd.CONTROLLER, "patch", "applications.argoproj.io", argocd.NAMESPACE, True),
        (argocd.CONTROLLER, "get", "secrets", argocd.NAMESPACE, True),
        (argocd.CONTROLLER, "patch", "configmaps", NAMESPACE, True),
        (argocd.CONTROLLER, "patch", "nodes", "", True),
        # install.yaml binds nothing to the repo-server, and it is given no credentials at all
        (argocd.REPO_SERVER, "get", "configmaps", argocd.NAMESPACE, False),
        (argocd.REPO_SERVER, "get", "secrets", argocd.NAMESPACE, False),
        (argocd.REPO_SERVER, "list", "applications.argoproj.io", argocd.NAMESPACE, False),
    ],
)
def test_each_component_has_argo_cds_own_rbac(
    argo_local, account: str, verb: str, resource: str, namespace: str, allowed: bool
) -> None:
    name, _, group = resource.partition(".")
    review = k8s.AuthorizationV1Api(argo_local.api).create_subject_access_review(
        {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": f"system:serviceaccount:{argocd.NAMESPACE}:{account}",
                "groups": ["system:serviceaccounts", f"system:serviceaccounts:{argocd.NAMESPACE}"],
                "resourceAttributes": {"verb": verb, "resource": name, "group": group, "namespace": namespace},
            },
        }
    )
    assert review.status.allowed is allowed


def test_the_controller_authenticates_as_its_service_account_not_system_masters(argo_local) -> None:
    """The identity the controller runs with (its kubeconfig, a bound token) as the API server sees it."""
    from kubernetes import config as kconfig

    api = kconfig.new_client_from_config(config_file=str(argocd.controller_kubeconfig(argo_local.workdir)))
    try:
        review = k8s.AuthenticationV1Api(api).create_self_subject_review({"apiVersion": "authentication.k8s.io/v1"})
    finally:
        api.close()
    info = review.status.user_info
    assert info.username == f"system:serviceaccount:{argocd.NAMESPACE}:{argocd.CONTROLLER}"
    assert "system:masters" not in (info.groups or [])


# ------------------------------------------------------------------------------------------- with the reconciler
RECONCILER_DIR = "reconciler"  # config.yaml + nodes.yaml: what migops's reconciler reads
MIGSYNC_DIR = "migsync"  # the MigSync object, applied by a second Application
MIGSYNC_APP = "migsync"


def migsync_manifest(url: str) -> str:
    return (
        "apiVersion: migops.io/v1alpha1\nkind: MigSync\nmetadata:\n  name: migops\n  namespace: migops-system\n"
        f"spec:\n  url: {url}\n  ref: main\n  path: {RECONCILER_DIR}\n  interval: 2s\n"
    )


@dataclass
class SideBySide:
    node: str  # the node the reconciler manages
    health: list[tuple[float, str, str]]  # (seconds since start, Application health, message) as they changed


@pytest.fixture
def reconciler_beside(argo_local, clone) -> Iterator[SideBySide]:
    """Argo CD applies the MIG ConfigMap (mig-config/) and, through Application `migsync`, the MigSync
    whose reconciler (migops reconcile, reading the MigSync object) writes the labels from nodes.yaml."""
    from kubernetes import client as k8s_client

    from migops.local import flux
    from migops.local.process import spawn, stop
    from migops.reconciler.status import install_crd

    api = argo_local.api
    install_crd(api, field_manager="test")
    k8s_client.CoreV1Api(api).patch_namespace(
        "migops-system",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "migops-system"}},
        field_manager="test",
        _content_type="application/apply-patch+yaml",
    )
    node2 = argo_local.state.nodes[1].name
    bare = flux.git_root(argo_local.workdir) / f"{argocd.REPO}.git"
    push_and_wait(
        argo_local,
        clone,
        {
            CONFIG_FILE: cm_file(MORE),
            f"{RECONCILER_DIR}/config.yaml": MORE,
            f"{RECONCILER_DIR}/nodes.yaml": nodes_yaml(f"  - config: all-3g.40gb\n    nodes: [{node2}]\n"),
            f"{MIGSYNC_DIR}/migsync.yaml": migsync_manifest(str(bare)),
        },
        "the MigSync and the reconciler's files",
    )
    began = time.monotonic()
    health: list[tuple[float, str, str]] = []
    argocd.apply(api, argocd.application(MIGSYNC_APP, argo_local.url, MIGSYNC_DIR))

    def record() -> str:
        now = app_health(api, MIGSYNC_APP)
        if now[0] and (not health or health[-1][1:] != now):
            health.append((time.monotonic() - began, *now))
        return now[0]

    # No reconciler yet: the MigSync has no status, the Lua check says Progressing.
    until(lambda: record() == "Progressing", timeout=90, what="the MigSync Application Progressing")
    identity = argo_local.kubeconfig_for(DEFAULT_RECONCILER_USER, ("system:masters",))
    from migops.local.reconciler import identifying_arguments

    (port,) = free_ports(1)
    popen, ref = spawn(
        [
            str(Path(sys.executable).parent / "migops"),
            "reconcile",
            "--name=migops",
            "--namespace=migops-system",
            f"--kubeconfig={identity}",
            "--no-leader-elect",
            f"--http-address=127.0.0.1:{port}",
            *identifying_arguments(argo_local.workdir),
            "--log-level=info",
        ],
        argo_local.workdir / "logs" / "reconciler.log",
    )
    try:
        yield SideBySide(node2, health)
        # (the test drives the rest; record() is re-used through the fixture's list)
    finally:
        stop(ref, popen=popen)
        k8s_client.CustomObjectsApi(api).delete_namespaced_custom_object(
            "argoproj.io", "v1alpha1", argocd.NAMESPACE, "applications", MIGSYNC_APP
        )


def app_health(api: ApiClient, name: str) -> tuple[str, str]:
    """The Application's health, with the message the Lua check gave its MigSync (Argo CD shows it per
    resource; the Application's own says only which resource caused it)."""
    status = argocd.get_application(api, name).get("status") or {}
    resource = next((r for r in status.get("resources") or () if r.get("kind") == "MigSync"), {})
    return (status.get("health") or {}).get("status", ""), (resource.get("health") or {}).get("message", "")


def test_migsync_health_in_argo_cd_and_argo_cd_denied_a_git_owned_label(argo_local, clone, reconciler_beside) -> None:
    api = argo_local.api
    node2 = reconciler_beside.node
    seen = reconciler_beside.health
    began = time.monotonic() - (seen[-1][0] if seen else 0)

    def watch(want: str, what: str, timeout: float = 120) -> None:
        def check() -> bool:
            now = app_health(api, MIGSYNC_APP)
            if not seen or seen[-1][1:] != now:
                seen.append((time.monotonic() - began, *now))
            return now[0] == want

        until(check, timeout=timeout, what=what, interval=0.2)

    # The reconciler labels node2 (the agent reconfigures its GPUs): Progressing, then Healthy.
    watch("Healthy", "the MigSync Healthy in Argo CD")
    assert node(api, node2)["metadata"]["labels"][MIG_CONFIG_LABEL] == "all-3g.40gb"
    n = node(api, node2)
    assert managers(n, ("metadata", "labels"), MIG_CONFIG_LABEL) == {RECONCILER_MANAGER}
    assert MANAGED_BY_ANNOTATION in n["metadata"]["annotations"]
    cm = configmap(api)
    assert managers(cm, ("data",), "config.yaml") == {argocd.ARGOCD_MANAGER}

    # A refused commit for the reconciler (an unknown profile in its config.yaml): Degraded.
    clone.push({f"{RECONCILER_DIR}/config.yaml": UNKNOWN_PROFILE}, "the reconciler refuses this")
    watch("Degraded", "the MigSync Degraded in Argo CD")
    message = app_health(api, MIGSYNC_APP)[1]
    # The check's message is the Stalled condition's reason and text (here the reconciler's write of the
    # ConfigMap, refused by the webhook: "ApplyFailed: ... [unknown-profile]").
    assert "[unknown-profile]" in message and message.split(":")[0] in ("ValidationFailed", "ApplyFailed"), message
    clone.push({f"{RECONCILER_DIR}/config.yaml": MORE}, "fixed for the reconciler")
    watch("Healthy", "the MigSync Healthy again")
    # A rollout: reassign node2; Progressing while the agent applies, Healthy after.
    clone.push(
        {f"{RECONCILER_DIR}/nodes.yaml": nodes_yaml(f"  - config: all-2g.20gb\n    nodes: [{node2}]\n")}, "reassign"
    )
    watch("Progressing", "the MigSync Progressing during the rollout", timeout=60)
    watch("Healthy", "the MigSync Healthy after the rollout")
    print("MigSync health in Argo CD (seconds, status, message):")
    for t, status, message in seen:
        print(f"  {t:6.1f}s  {status:<12} {message}")
    statuses = [s for _, s, _ in seen]
    assert "Progressing" in statuses and "Healthy" in statuses and "Degraded" in statuses

    # Argo CD must not write what the reconciler owns: a Node manifest for node2 is denied [git-owned].
    bad = clone.push(
        {f"{argocd.CONFIG_DIR}/node-{node2}.yaml": argocd.node_manifest(node2, "all-1g.10gb")}, "argo labels it"
    )
    status = wait_failed(api, APP, bad)
    message = status["operationState"]["message"]
    print(f"git-owned: {message}")
    assert "[git-owned]" in message and f"{RECONCILER_DIR}/nodes.yaml" in message, message
    assert f"system:serviceaccount:{argocd.NAMESPACE}:{argocd.CONTROLLER}" in message, message
    assert node(api, node2)["metadata"]["labels"][MIG_CONFIG_LABEL] == "all-2g.20gb"
    push_and_wait(argo_local, clone, {f"{argocd.CONFIG_DIR}/node-{node2}.yaml": None}, "leave it to the reconciler")
    get_applications(argo_local)

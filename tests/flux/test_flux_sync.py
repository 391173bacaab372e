"""The real Flux (source-controller + kustomize-controller) syncing a MIG config repo through migops's webhook.

All on one `migops local up --flux` (conftest): commits pushed over HTTP to the loopback git server,
fetched by source-controller, applied by kustomize-controller (server-side dry-run, then apply) as the
least-privilege user flux-kustomize-controller, through migops's validating and mutating webhooks.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from gitops_commits import DENIED, MORE, UNKNOWN_PROFILE, UNPLACEABLE
from gitrepo import CONFIG_YAML, nodes_yaml
from kubernetes import client as k8s
from kubernetes.client import ApiClient
from polling import until

from migops.api.names import CONFIG_DIGEST_ANNOTATION, MANAGED_BY_ANNOTATION, MIG_CONFIG_LABEL, RECONCILER_MANAGER
from migops.local import flux, reconciler
from migops.local.agents import MIG_CONFIGMAP
from migops.local.process import stop
from migops.webhook.state import DEFAULT_RECONCILER_USER

NAMESPACE, NAME = MIG_CONFIGMAP
CONFIG_FILE = f"{flux.CONFIG_DIR}/config.yaml"
# Unplaceable on every GPU: 2 x 3g.40gb + 1 x 1g.10gb needs 9 memory slices of an H100's 8.


def _obj(api: ApiClient, thing: Any) -> dict[str, Any]:
    return api.sanitize_for_serialization(thing)


def configmap(api: ApiClient) -> dict[str, Any]:
    return _obj(api, k8s.CoreV1Api(api).read_namespaced_config_map(NAME, NAMESPACE))


def node(api: ApiClient, name: str) -> dict[str, Any]:
    return _obj(api, k8s.CoreV1Api(api).read_node(name))


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


def push_and_wait(
    flux_local: Any, clone: Any, files: dict[str, str | None], message: str, kustomization: str = flux.REPO
) -> str:
    sha = clone.push(files, message)
    flux.wait_applied(flux_local.api, kustomization, sha)
    return sha


def wait_refused(api: ApiClient, name: str, sha: str) -> dict[str, Any]:
    """The Kustomization's Ready condition once it has tried `sha` and failed (it stays failed)."""

    def refused() -> dict[str, Any] | None:
        s = flux.status(api, name)
        ready = next((c for c in s.get("conditions") or () if c["type"] == "Ready"), {})
        if (
            s.get("lastAttemptedRevision", "").endswith(sha)
            and ready.get("status") == "False"
            and ready.get("reason") != "Progressing"
        ):
            return {**ready, "lastAppliedRevision": s.get("lastAppliedRevision")}
        return None

    return until(refused, timeout=90, what=f"Kustomization {name} refusing {sha[:12]}")


def get_kustomizations(flux_local: Any) -> str:
    out = subprocess.run(
        [*flux_local.kubectl, "get", "kustomization", "-n", flux.NAMESPACE],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    print(out.stdout)  # shown with -s: the table a user sees
    return out.stdout


# ------------------------------------------------------------------------------------------- the ConfigMap
def test_a_good_commit_lands_as_git_says_through_the_webhook(flux_local, clone) -> None:
    sha = push_and_wait(flux_local, clone, {CONFIG_FILE: CONFIG_YAML}, "H100 configs")
    cm = configmap(flux_local.api)
    assert cm["data"]["config.yaml"] == CONFIG_YAML
    # Applied by Flux's own field manager, through the mutating webhook (its digest annotation).
    assert "kustomize-controller" in managers(cm, ("data",), "config.yaml")
    assert CONFIG_DIGEST_ANNOTATION in cm["metadata"]["annotations"]
    assert cm["metadata"]["labels"]["kustomize.toolkit.fluxcd.io/name"] == flux.REPO
    status = flux.status(flux_local.api, flux.REPO)
    assert status["lastAppliedRevision"] == f"main@sha1:{sha}"
    # wait: true is Flux's health check of what it applied; the inventory lists the ConfigMap.
    assert [e["id"] for e in status["inventory"]["entries"]] == [f"{NAMESPACE}_{NAME}__ConfigMap"]
    healthy = next(c for c in status["conditions"] if c["type"] == "Healthy")
    assert healthy["status"] == "True", healthy
    table = get_kustomizations(flux_local)
    assert f"Applied revision: main@sha1:{sha}" in table and "True" in table


@pytest.mark.parametrize(
    ("bad", "rule", "path"),
    [
        (UNPLACEABLE, "[placement-infeasible]", "mig-configs.unplaceable[0].mig-devices"),
        (UNKNOWN_PROFILE, "[unknown-profile]", 'mig-configs.typo[0].mig-devices."1g.9gb"'),
    ],
    ids=["unplaceable", "unknown-profile"],
)
def test_a_bad_commit_is_denied_at_flux_dry_run_reported_and_the_next_good_one_recovers(
    flux_local, clone, bad: str, rule: str, path: str
) -> None:
    api = flux_local.api
    good = push_and_wait(flux_local, clone, {CONFIG_FILE: CONFIG_YAML}, "good")
    before = configmap(api)["metadata"]["resourceVersion"]

    sha = clone.push({CONFIG_FILE: bad}, "bad")
    ready = wait_refused(api, flux.REPO, sha)
    message = ready["message"]
    print(f"Ready=False {ready['reason']}: {message}")
    assert DENIED in message and rule in message and path in message, message
    assert "ConfigMap/gpu-operator/default-mig-parted-config dry-run failed" in message, message
    assert ready["lastAppliedRevision"] == f"main@sha1:{good}"
    # Flux retries (retryInterval) and is denied each time; the cluster keeps the good commit.
    time.sleep(5)
    cm = configmap(api)
    assert cm["data"]["config.yaml"] == CONFIG_YAML and cm["metadata"]["resourceVersion"] == before
    # The table as a person sees it between retries: Ready False with the denial (each retry passes
    # through Unknown, "Reconciliation in progress", which a loaded machine can show for seconds).
    until(
        lambda: "False" in (table := get_kustomizations(flux_local)) and "denied the request" in table,
        timeout=60,
        what="kubectl get kustomizations showing the denial",
    )

    fixed = push_and_wait(flux_local, clone, {CONFIG_FILE: MORE}, "fixed")
    assert configmap(api)["data"]["config.yaml"] == MORE
    assert flux.status(api, flux.REPO)["lastAppliedRevision"] == f"main@sha1:{fixed}"


def test_reconciling_an_unchanged_commit_writes_nothing(flux_local, clone) -> None:
    """Flux's drift detection (a server-side dry-run compared with the live object) against migops's
    mutating webhook (which annotates MIG ConfigMaps): after a sync, reconciliation after
    reconciliation of the same commit makes no write."""
    api = flux_local.api
    push_and_wait(flux_local, clone, {CONFIG_FILE: CONFIG_YAML}, "steady")
    before = configmap(api)["metadata"]["resourceVersion"]
    for i in range(5):
        # What `flux reconcile kustomization` does; Flux acknowledges it in lastHandledReconcileAt once
        # a full reconciliation (dry-run, diff) is done. The 2 s interval runs in between as well.
        flux.request_reconcile(api, "Kustomization", flux.REPO)
        token = k8s.CustomObjectsApi(api).get_namespaced_custom_object(
            "kustomize.toolkit.fluxcd.io",
            "v1",
            flux.NAMESPACE,
            "kustomizations",
            flux.REPO,
        )["metadata"]["annotations"]["reconcile.fluxcd.io/requestedAt"]
        until(
            lambda: flux.status(api, flux.REPO).get("lastHandledReconcileAt") == token,
            timeout=60,
            what=f"reconciliation {i + 1} handled",
        )
    time.sleep(4)  # two more intervals
    assert configmap(api)["metadata"]["resourceVersion"] == before


# ------------------------------------------------------------------------------------------- node labels
NODES_DIR = "nodes"


def node_manifest(name: str, config: str) -> str:
    """A partial Node: only the label Flux owns (server-side apply never touches the rest)."""
    return f"apiVersion: v1\nkind: Node\nmetadata:\n  name: {name}\n  labels:\n    {MIG_CONFIG_LABEL}: {config}\n"


@pytest.fixture
def labels_kustomization(flux_local) -> Iterator[str]:
    """A second Kustomization for ./nodes, after the ConfigMap's (dependsOn): a label is checked
    against the ConfigMap in force, so the config it names must land first."""
    name = "mig-labels"
    flux.apply(
        flux_local.api,
        flux.kustomization(name, flux.REPO, f"./{NODES_DIR}", interval="2s", retry="2s", depends_on=(flux.REPO,)),
    )
    yield name
    objects = k8s.CustomObjectsApi(flux_local.api)
    objects.delete_namespaced_custom_object("kustomize.toolkit.fluxcd.io", "v1", flux.NAMESPACE, "kustomizations", name)

    def gone() -> bool:
        try:
            objects.get_namespaced_custom_object(
                "kustomize.toolkit.fluxcd.io", "v1", flux.NAMESPACE, "kustomizations", name
            )
        except k8s.exceptions.ApiException as exc:
            return exc.status == 404
        return False

    # Flux's finalizer holds it a moment: the next test's apply of the same name must not land on the
    # terminating object (which then vanishes, and the test waits on a 404).
    until(gone, timeout=60, what=f"Kustomization {name} deleted")


def test_node_labels_from_git_and_a_label_naming_no_config_is_denied(flux_local, clone, labels_kustomization) -> None:
    api = flux_local.api
    node1 = flux_local.state.nodes[0].name
    sha = clone.push({CONFIG_FILE: MORE, f"{NODES_DIR}/{node1}.yaml": node_manifest(node1, "all-1g.10gb")}, "label")
    flux.wait_applied(api, flux.REPO, sha)
    flux.wait_applied(api, labels_kustomization, sha)
    n = node(api, node1)
    assert n["metadata"]["labels"][MIG_CONFIG_LABEL] == "all-1g.10gb"
    assert managers(n, ("metadata", "labels"), MIG_CONFIG_LABEL) == {"kustomize-controller"}
    # The simulated agent takes the label as mig-manager would.
    until(
        lambda: node(api, node1)["metadata"]["labels"].get("nvidia.com/mig.config.state") == "success",
        timeout=90,
        what="the agent applying all-1g.10gb",
    )

    bad = clone.push({f"{NODES_DIR}/{node1}.yaml": node_manifest(node1, "no-such-config")}, "bad label")
    ready = wait_refused(api, labels_kustomization, bad)
    print(f"Ready=False {ready['reason']}: {ready['message']}")
    assert 'admission webhook "nodes.validate.migops.io" denied the request' in ready["message"]
    assert "no-such-config" in ready["message"]
    assert node(api, node1)["metadata"]["labels"][MIG_CONFIG_LABEL] == "all-1g.10gb"
    get_kustomizations(flux_local)

    fixed = clone.push({f"{NODES_DIR}/{node1}.yaml": node_manifest(node1, "all-2g.20gb")}, "fixed label")
    flux.wait_applied(api, labels_kustomization, fixed)
    assert node(api, node1)["metadata"]["labels"][MIG_CONFIG_LABEL] == "all-2g.20gb"


# ------------------------------------------------------------------------------------------- with the reconciler
def test_flux_owns_the_configmap_and_the_reconciler_the_labels_side_by_side(
    flux_local, clone, labels_kustomization
) -> None:
    """Flux applies the ConfigMap from mig-config/config.yaml, labelled migops.io/unmanaged=true; migops's
    reconciler follows the same repository and path (config.yaml + nodes.yaml) and writes node labels.
    The reconciler never writes that ConfigMap, and the webhook lets Flux write it while the MigSync
    exists; a commit that adds a config and assigns it is labelled once Flux has applied the config.
    No field has two owners, and nothing is written again while the commit stays."""
    api = flux_local.api
    node2 = flux_local.state.nodes[1].name
    assignment = f"  - config: all-3g.40gb\n    nodes: [{node2}]\n"
    sha = push_and_wait(
        flux_local,
        clone,
        {
            CONFIG_FILE: MORE,
            f"{flux.CONFIG_DIR}/nodes.yaml": nodes_yaml(assignment),
            f"{flux.CONFIG_DIR}/kustomization.yaml": flux.config_kustomization(NAMESPACE, NAME, unmanaged=True),
        },
        "reconciler assignments; Flux keeps the ConfigMap",
    )
    # The reconciler's own identity (as `migops local up --repo` gives it), which the webhook lets write
    # the labels of the nodes it manages.
    identity = flux_local.kubeconfig_for(DEFAULT_RECONCILER_USER, ("system:masters",))
    rec = reconciler.start(
        api,
        flux_local.workdir,
        identity,
        str(flux.git_root(flux_local.workdir) / f"{flux.REPO}.git"),
        path=flux.CONFIG_DIR,
        interval="2s",
    )
    try:
        until(
            lambda: node(api, node2)["metadata"]["labels"].get(MIG_CONFIG_LABEL) == "all-3g.40gb",
            timeout=90,
            what="the reconciler labelling the node",
        )
        # Reassign in git: the reconciler relabels; Flux, whose file did not change, writes nothing.
        cm_rv = configmap(api)["metadata"]["resourceVersion"]
        moved = clone.push(
            {f"{flux.CONFIG_DIR}/nodes.yaml": nodes_yaml(assignment.replace("all-3g.40gb", "all-2g.20gb"))}, "reassign"
        )
        flux.wait_applied(api, flux.REPO, moved)
        until(
            lambda: node(api, node2)["metadata"]["labels"].get(MIG_CONFIG_LABEL) == "all-2g.20gb",
            timeout=90,
            what="the reconciler relabelling the node",
        )
        samples = []
        for _ in range(5):  # several intervals of both
            cm = configmap(api)
            samples.append(
                (cm["metadata"]["resourceVersion"], node(api, node2)["metadata"]["labels"][MIG_CONFIG_LABEL])
            )
            time.sleep(2)
        assert samples == [(cm_rv, "all-2g.20gb")] * 5
        cm = configmap(api)
        assert managers(cm, ("data",), "config.yaml") == {"kustomize-controller"}
        assert RECONCILER_MANAGER not in {e["manager"] for e in cm["metadata"]["managedFields"]}
        n = node(api, node2)
        assert managers(n, ("metadata", "labels"), MIG_CONFIG_LABEL) == {RECONCILER_MANAGER}
        assert "kustomize-controller" not in {e["manager"] for e in n["metadata"]["managedFields"]}
        # The reconciler marks the node it manages; the node Flux labels is not its.
        assert MANAGED_BY_ANNOTATION in n["metadata"]["annotations"]
        assert MANAGED_BY_ANNOTATION not in (
            node(api, flux_local.state.nodes[0].name)["metadata"].get("annotations") or {}
        )

        # A config added and assigned in one commit, while the MigSync exists: Flux writes the
        # ConfigMap (the webhook admits it: unmanaged), the reconciler writes the label once it holds it.
        added = (
            MORE + '  two-2g.20gb:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {"2g.20gb": 2}\n'
        )
        both = clone.push(
            {
                CONFIG_FILE: added,
                f"{flux.CONFIG_DIR}/nodes.yaml": nodes_yaml(assignment.replace("all-3g.40gb", "two-2g.20gb")),
            },
            "a new config, assigned",
        )
        flux.wait_applied(api, flux.REPO, both)
        until(
            lambda: node(api, node2)["metadata"]["labels"].get(MIG_CONFIG_LABEL) == "two-2g.20gb",
            timeout=90,
            what="the reconciler labelling the node with the config Flux applied",
        )
        cm = configmap(api)
        assert cm["data"]["config.yaml"] == added
        assert managers(cm, ("data",), "config.yaml") == {"kustomize-controller"}
        assert RECONCILER_MANAGER not in {e["manager"] for e in cm["metadata"]["managedFields"]}

        # Flux must not write what the reconciler owns: the webhook (git owns a managed node's label)
        # refuses kustomize-controller the label of the reconciler's node at Flux's dry-run, so nothing
        # of that stage is applied; without it, Flux's label of its own node passes.
        node1 = flux_local.state.nodes[0].name
        bad = clone.push(
            {
                f"{NODES_DIR}/{node2}.yaml": node_manifest(node2, "all-1g.10gb"),
                f"{NODES_DIR}/{node1}.yaml": node_manifest(node1, "all-3g.40gb"),
            },
            "flux labels the reconciler's node",
        )
        ready = wait_refused(api, labels_kustomization, bad)
        print(f"Ready=False {ready['reason']}: {ready['message']}")
        message = ready["message"]
        assert f"Node/{node2} dry-run failed" in message and "[git-owned]" in message, message
        assert flux.KUSTOMIZE_USER in message and f"{flux.CONFIG_DIR}/nodes.yaml" in message, message
        assert node(api, node2)["metadata"]["labels"][MIG_CONFIG_LABEL] == "two-2g.20gb"
        assert node(api, node1)["metadata"]["labels"][MIG_CONFIG_LABEL] != "all-3g.40gb"
        fixed = clone.push({f"{NODES_DIR}/{node2}.yaml": None}, "leave that node to the reconciler")
        flux.wait_applied(api, labels_kustomization, fixed)
        assert node(api, node1)["metadata"]["labels"][MIG_CONFIG_LABEL] == "all-3g.40gb"
        assert node(api, node2)["metadata"]["labels"][MIG_CONFIG_LABEL] == "two-2g.20gb"
        assert managers(node(api, node2), ("metadata", "labels"), MIG_CONFIG_LABEL) == {RECONCILER_MANAGER}
        get_kustomizations(flux_local)
        assert sha  # the commit both started from
    finally:
        stop(rec.ref, popen=rec.popen)


# ------------------------------------------------------------------------------------------- least privilege
@pytest.mark.parametrize(
    ("user", "verb", "resource", "namespace", "allowed"),
    [
        (flux.SOURCE_USER, "list", "gitrepositories.source.toolkit.fluxcd.io", flux.NAMESPACE, True),
        (flux.SOURCE_USER, "patch", "gitrepositories.source.toolkit.fluxcd.io", flux.NAMESPACE, True),
        (flux.SOURCE_USER, "list", "gitrepositories.source.toolkit.fluxcd.io", "default", False),
        (flux.SOURCE_USER, "get", "secrets", flux.NAMESPACE, False),
        (flux.SOURCE_USER, "get", "configmaps", NAMESPACE, False),
        (flux.SOURCE_USER, "patch", "kustomizations.kustomize.toolkit.fluxcd.io", flux.NAMESPACE, False),
        (flux.KUSTOMIZE_USER, "patch", "configmaps", NAMESPACE, True),
        (flux.KUSTOMIZE_USER, "patch", "nodes", "", True),
        (flux.KUSTOMIZE_USER, "create", "nodes", "", False),
        (flux.KUSTOMIZE_USER, "delete", "nodes", "", False),
        (flux.KUSTOMIZE_USER, "patch", "configmaps", "default", False),
        (flux.KUSTOMIZE_USER, "get", "secrets", NAMESPACE, False),
        (flux.KUSTOMIZE_USER, "patch", "gitrepositories.source.toolkit.fluxcd.io", flux.NAMESPACE, False),
        (flux.KUSTOMIZE_USER, "patch", "migsyncs.migops.io", "migops-system", False),
    ],
)
def test_each_controller_may_do_only_its_part(
    flux_local, user: str, verb: str, resource: str, namespace: str, allowed: bool
) -> None:
    name, _, group = resource.partition(".")
    review = k8s.AuthorizationV1Api(flux_local.api).create_subject_access_review(
        {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": user,
                "resourceAttributes": {"verb": verb, "resource": name, "group": group, "namespace": namespace},
            },
        }
    )
    assert review.status.allowed is allowed


def test_a_commit_outside_the_granted_scope_is_forbidden_in_flux_status(
    flux_local, clone, labels_kustomization
) -> None:
    """The repository can only carry what flux-kustomize-controller may apply: anything else is the
    API server's Forbidden, shown on the Kustomization, and nothing of that commit is applied."""
    api = flux_local.api
    node1 = flux_local.state.nodes[0].name
    good = clone.push({f"{NODES_DIR}/{node1}.yaml": node_manifest(node1, "all-1g.10gb")}, "label")
    flux.wait_applied(api, labels_kustomization, good)
    sneaky = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: not-mig\n  namespace: default\ndata:\n  a: b\n"
    sha = clone.push({f"{NODES_DIR}/extra.yaml": sneaky}, "something else")
    ready = wait_refused(api, labels_kustomization, sha)
    assert "forbidden" in ready["message"].lower() and "flux-kustomize-controller" in ready["message"], ready
    with pytest.raises(k8s.exceptions.ApiException) as err:
        k8s.CoreV1Api(api).read_namespaced_config_map("not-mig", "default")
    assert err.value.status == 404
    clone.push({f"{NODES_DIR}/extra.yaml": None}, "revert")

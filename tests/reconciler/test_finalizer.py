"""Deleting a MigSync releases its nodes (the reconciler's finalizer), through the
real API server: the annotations that made them git-owned go, their labels stay, the object goes."""

from __future__ import annotations

from gitrepo import CONFIG_YAML, nodes_yaml
from kubernetes import client as k8s
from reconciler_harness import eventually, labels_of, migsync

from migops.api.migsync import GROUP, PLURAL, VERSION
from migops.api.names import MANAGED_BY_ANNOTATION, MIG_CONFIG_LABEL, MIGSYNC_FINALIZER, REVISION_ANNOTATION


def _annotations(api, names: list[str]) -> dict[str, dict[str, str]]:
    core = k8s.CoreV1Api(api)
    return {n: core.read_node(n).metadata.annotations or {} for n in names}


def _gone(api, name: str) -> bool:
    try:
        migsync(api, name)
    except k8s.exceptions.ApiException as exc:
        return exc.status == 404
    return False


def test_deleting_a_migsync_releases_its_nodes(rapi, repo, gpu_nodes, make_reconciler) -> None:
    names = gpu_nodes(2, pool="fin")
    repo.commit(
        {
            "config.yaml": CONFIG_YAML,
            "nodes.yaml": nodes_yaml("  - nodeSelector: {matchLabels: {pool: fin}}\n    config: all-1g.10gb"),
        }
    )
    rec = make_reconciler(repo.url)
    rec.sync()
    assert MIGSYNC_FINALIZER in migsync(rapi, rec.name)["metadata"]["finalizers"]
    owner = f"migops-system/{rec.name}"
    eventually(lambda: all(a.get(MANAGED_BY_ANNOTATION) == owner for a in _annotations(rapi, names).values()))
    assert all(REVISION_ANNOTATION in a for a in _annotations(rapi, names).values())

    k8s.CustomObjectsApi(rapi).delete_namespaced_custom_object(GROUP, VERSION, "migops-system", PLURAL, rec.name)
    assert not _gone(rapi, rec.name)  # held by the finalizer until the nodes are released
    result = eventually(lambda: rec.sync(fetch=False), lambda r: r.outcome == "Released")
    assert result.writes == 3 and names[0] in result.message, result
    for found in _annotations(rapi, names).values():
        assert MANAGED_BY_ANNOTATION not in found and REVISION_ANNOTATION not in found, found
    assert all(labels[MIG_CONFIG_LABEL] == "all-1g.10gb" for labels in labels_of(rapi, names).values())
    eventually(lambda: _gone(rapi, rec.name))
    # Gone: later syncs (the loop, a fetch) manage nothing.
    again = rec.sync()
    assert again.outcome == "Released" and again.writes == 0
    assert all(MANAGED_BY_ANNOTATION not in a for a in _annotations(rapi, names).values())

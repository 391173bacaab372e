"""First sync, a change to one assignment, no-op syncs, ownership of the one label: on a real API server."""

from __future__ import annotations

from gitrepo import CONFIG_YAML, nodes_yaml
from kubernetes import client as k8s
from reconciler_harness import agent_reports, condition, eventually, labels_of, migsync

from migops.api.names import MIG_CONFIG_LABEL


def _pools(a: str, b: str, config_a: str = "all-1g.10gb", config_b: str = "all-3g.40gb") -> str:
    return nodes_yaml(f"""
  - nodeSelector: {{matchLabels: {{pool: {a}}}}}
    config: {config_a}
  - nodeSelector: {{matchLabels: {{pool: {b}}}}}
    config: {config_b}""")


def test_first_sync_then_one_assignment_change_touches_only_those_nodes(rapi, repo, gpu_nodes, make_reconciler) -> None:
    a, b = gpu_nodes(6, pool="a1"), gpu_nodes(6, pool="b1")
    first = repo.commit({"config.yaml": CONFIG_YAML, "nodes.yaml": _pools("a1", "b1")})
    rec = make_reconciler(repo.url)
    result = rec.sync()
    assert result.outcome == "Applied", result.message
    assert result.writes == 13  # the ConfigMap + 12 labels
    cm = k8s.CoreV1Api(rapi).read_namespaced_config_map("default-mig-parted-config", "gpu-operator")
    assert cm.data == {"config.yaml": CONFIG_YAML}
    got = labels_of(rapi, a + b)
    assert {got[n][MIG_CONFIG_LABEL] for n in a} == {"all-1g.10gb"}
    assert {got[n][MIG_CONFIG_LABEL] for n in b} == {"all-3g.40gb"}
    # Only the one label changed hands: GFD's labels stay GFD's, the operator keeps its deploy label.
    node = k8s.CoreV1Api(rapi).read_node(a[0])
    owners = {
        m.manager: m.fields_v1["f:metadata"]["f:labels"]
        for m in node.metadata.managed_fields
        if "f:metadata" in (m.fields_v1 or {}) and "f:labels" in m.fields_v1["f:metadata"]
    }
    assert set(owners["migops-reconciler"]) == {f"f:{MIG_CONFIG_LABEL}"}
    assert f"f:{MIG_CONFIG_LABEL}" not in owners["gpu-operator"]
    assert "f:nvidia.com/gpu.deploy.mig-manager" in owners["gpu-operator"]
    assert "f:nvidia.com/gpu.product" in owners["gpu-feature-discovery"]

    # Nodes are given their config but not done: Ready is Unknown (progressing), nothing applied yet.
    rec.flush_status()
    status = migsync(rapi, rec.name)
    assert condition(status, "Reconciling")["status"] == "True"
    assert "lastAppliedRevision" not in status["status"]
    assert status["status"]["lastAttemptedRevision"] == first

    agent_reports(rapi, CONFIG_YAML, a + b)
    assert eventually(lambda: rec.sync(fetch=False), lambda r: r.outcome == "InSync").writes == 0
    rec.flush_status()
    status = migsync(rapi, rec.name)
    assert condition(status, "Ready")["status"] == "True", condition(status, "Ready")
    assert status["status"]["lastAppliedRevision"] == first
    assert status["status"]["summary"]["inSync"] == "12/12"
    assert {n["name"]: n["revision"] for n in status["status"]["nodes"]}[a[0]] == first

    # A commit that changes pool b only: 6 writes, the ConfigMap untouched.
    before = rec.metrics.writes("configmaps")
    second = repo.commit({"nodes.yaml": _pools("a1", "b1", config_b="five-1g-one-2g")})
    result = rec.sync()
    assert result.outcome == "Applied" and result.writes == 6, result
    assert rec.metrics.writes("configmaps") == before
    got = labels_of(rapi, a + b)
    assert {got[n][MIG_CONFIG_LABEL] for n in b} == {"five-1g-one-2g"}
    assert {got[n][MIG_CONFIG_LABEL] for n in a} == {"all-1g.10gb"}
    agent_reports(rapi, CONFIG_YAML, b)
    assert eventually(lambda: rec.sync(fetch=False), lambda r: r.outcome == "InSync").revision == second
    # Nothing changed: nothing written, however often it syncs.
    for _ in range(3):
        assert rec.sync().writes == 0


def test_mig_manager_nodes_count_once_the_state_left_success_and_came_back(
    rapi, repo, gpu_nodes, make_reconciler
) -> None:
    names = gpu_nodes(2, pool="mm")
    repo.commit(
        {
            "config.yaml": CONFIG_YAML,
            "nodes.yaml": nodes_yaml(
                "  - nodeSelector: {matchLabels: {pool: mm}}\n    config: all-1g.10gb", max_unavailable=1
            ),
        }
    )
    agent_reports(rapi, CONFIG_YAML, names, mig_manager=True)  # success for all-disabled, as mig-manager leaves it
    rec = make_reconciler(repo.url)
    assert rec.sync().writes == 2  # ConfigMap + one node (maxUnavailable 1)
    first = next(n for n, labels in labels_of(rapi, names).items() if labels[MIG_CONFIG_LABEL] == "all-1g.10gb")
    # Still "success" from before: not done, the other node waits.
    assert eventually(lambda: rec.sync(fetch=False), lambda r: r.plan is not None).writes == 0
    agent_reports(rapi, CONFIG_YAML, [first], state="pending", mig_manager=True)
    # The event reaches the state through a sync (it folds in what the informer recorded meanwhile).
    eventually(lambda: rec.sync(fetch=False).writes == 0 and first not in rec.state.nodes.awaiting)
    agent_reports(rapi, CONFIG_YAML, [first], mig_manager=True)
    eventually(lambda: rec.sync(fetch=False).writes == 1)  # done: the next node's turn


def test_the_status_names_the_generation_the_sync_read_not_one_written_while_it_ran(
    rapi, repo, gpu_nodes, make_reconciler, monkeypatch
) -> None:
    """A spec written while a sync runs (a new pin synced by Argo CD mid-sync) is not observed by that
    sync: the status it writes says the generation it read, so a health check stays Progressing (Ready
    for an older generation) instead of calling the new spec Healthy before it was judged."""
    gpu_nodes(2, pool="gen1")
    repo.commit({"config.yaml": CONFIG_YAML, "nodes.yaml": _pools("gen1", "gen2")})
    rec = make_reconciler(repo.url)
    read = migsync(rapi, rec.name)["metadata"]["generation"]
    settings = rec.ports.cluster.settings

    def settings_then_a_new_spec():  # called by the sync once it has read its spec
        k8s.CustomObjectsApi(rapi).patch_namespaced_custom_object(
            "migops.io", "v1alpha1", "migops-system", "migsyncs", rec.name, {"spec": {"interval": "61s"}}
        )
        eventually(lambda: rec.migsync_object()["metadata"]["generation"], lambda g: g == read + 1)
        return settings()

    monkeypatch.setattr(rec.ports.cluster, "settings", settings_then_a_new_spec)
    assert rec.sync().outcome == "Applied"
    monkeypatch.undo()
    rec.flush_status()
    obj = eventually(lambda: migsync(rapi, rec.name), lambda m: "conditions" in m.get("status", {}))
    assert obj["metadata"]["generation"] == read + 1
    assert obj["status"]["observedGeneration"] == read
    assert {c["observedGeneration"] for c in obj["status"]["conditions"]} == {read}  # Ready's too
    rec.sync()
    rec.flush_status()
    obj = eventually(lambda: migsync(rapi, rec.name), lambda m: m["status"]["observedGeneration"] == read + 1)
    assert condition(obj, "Ready")["observedGeneration"] == read + 1

"""What an unlucky operator could meet: each test names what it proves, on a real API server."""

from __future__ import annotations

import time
import uuid

from gitrepo import CONFIG_YAML, nodes_yaml
from kubernetes import client as k8s
from reconciler_harness import agent_reports, condition, events_for, eventually, labels_of, migsync

from migops.api.migsync import CRD_NAME, SyncSpec, migsync_object
from migops.api.names import (
    AGENT_MANAGER,
    DRIFT_ANNOTATION,
    MANAGED_BY_ANNOTATION,
    MIG_CONFIG_LABEL,
    REVISION_ANNOTATION,
    UNMANAGED_LABEL,
)
from migops.cli import main as cli
from migops.kube import ssa
from migops.reconciler.record import read_record
from migops.reconciler.status import install_crd

NS = "migops-system"


def _pool(pool: str, config: str = "all-1g.10gb", rollout: str = "{maxUnavailable: '100%'}", extra: str = "") -> str:
    return (
        f"version: v1\nrollout: {rollout}\n{extra}assignments:\n"
        f"  - nodeSelector: {{matchLabels: {{pool: {pool}}}}}\n    config: {config}\n"
    )


def _annotations(api, name: str) -> dict[str, str]:
    return k8s.CoreV1Api(api).read_node(name).metadata.annotations or {}


def test_managed_nodes_carry_managed_by_and_an_unmanaged_node_is_left_alone(
    rapi, repo, gpu_nodes, make_reconciler
) -> None:
    names = gpu_nodes(3, pool="own")
    revision = repo.commit({"config.yaml": CONFIG_YAML, "nodes.yaml": _pool("own")})
    rec = make_reconciler(repo.url)
    assert rec.sync().outcome == "Applied"
    owner = f"{NS}/{rec.name}"
    for name in names:  # one SSA: the label, the owner and the revision that gave it
        assert _annotations(rapi, name)[MANAGED_BY_ANNOTATION] == owner
        assert _annotations(rapi, name)[REVISION_ANNOTATION] == revision
    agent_reports(rapi, CONFIG_YAML, names)
    eventually(lambda: rec.sync(fetch=False).outcome == "InSync")
    # A person takes one node out of management, then changes its config: nothing is put back.
    core = k8s.CoreV1Api(rapi)
    core.patch_node(names[0], {"metadata": {"labels": {UNMANAGED_LABEL: "true", MIG_CONFIG_LABEL: "all-3g.40gb"}}})
    eventually(lambda: rec.sync(fetch=False) is not None and MANAGED_BY_ANNOTATION not in _annotations(rapi, names[0]))
    for _ in range(3):
        rec.sync(fetch=False)
    assert labels_of(rapi, names)[names[0]][MIG_CONFIG_LABEL] == "all-3g.40gb"  # not reverted
    assert rec.flush_events() and not events_for(rapi, names[0], "DriftReverted")
    assert _annotations(rapi, names[1])[MANAGED_BY_ANNOTATION] == owner
    rec.flush_status()
    status = migsync(rapi, rec.name)["status"]
    assert status["summary"]["inSync"] == "2/2" and names[0] not in {n["name"] for n in status["nodes"]}
    # Back under management: the label is git's again.
    core.patch_node(names[0], {"metadata": {"labels": {UNMANAGED_LABEL: None}}})
    eventually(
        lambda: (
            rec.sync(fetch=False) is not None and labels_of(rapi, names)[names[0]][MIG_CONFIG_LABEL] == "all-1g.10gb"
        )
    )
    assert _annotations(rapi, names[0])[MANAGED_BY_ANNOTATION] == owner


def test_a_drifted_node_is_not_in_sync_in_status_cli_and_rollout(
    rplane, rapi, repo, gpu_nodes, make_reconciler, capsys
) -> None:
    names = gpu_nodes(2, pool="drifted")
    repo.commit({"config.yaml": CONFIG_YAML, "nodes.yaml": _pool("drifted")})
    rec = make_reconciler(repo.url)
    rec.sync()
    agent_reports(rapi, CONFIG_YAML, names)
    eventually(lambda: rec.sync(fetch=False).outcome == "InSync")
    text = "gpu 1: missing 1g.10gb@3"
    ssa.apply(
        rapi,
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": names[0], "annotations": {DRIFT_ANNOTATION: text}}},
        field_manager=AGENT_MANAGER + "-drift",
        force=True,
    )
    result = eventually(lambda: rec.sync(fetch=False), lambda r: r.outcome != "InSync")
    assert result.outcome == "Progressing" and not result.plan.converged
    rec.flush_status()
    status = migsync(rapi, rec.name)["status"]
    entry = next(n for n in status["nodes"] if n["name"] == names[0])
    assert entry["phase"] == "Drifted" and text in entry["message"]
    assert status["summary"]["inSync"] == "1/2" and status["summary"]["drifted"] == 1
    assert condition(migsync(rapi, rec.name), "Ready")["status"] != "True"
    assert cli(["status", rec.name, "--kubeconfig", str(rplane.admin_kubeconfig), "--nodes"]) != 0
    out = capsys.readouterr().out
    assert f"{rec.name}: 1/2 nodes in sync" in out
    assert any(line.startswith(names[0]) and "Drifted" in line and text in line for line in out.splitlines())
    # The agent repaired it: the annotation goes, the node is in sync again.
    ssa.apply(
        rapi,
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": names[0]}},
        field_manager=AGENT_MANAGER + "-drift",
        force=True,
    )
    eventually(lambda: rec.sync(fetch=False).outcome == "InSync")


def test_force_push_or_unreachable_remote_at_start_keeps_enforcing_the_recorded_revision(
    rapi, repo, gpu_nodes, make_reconciler, tmp_path
) -> None:
    names = gpu_nodes(2, pool="fp")
    applied = repo.commit({"config.yaml": CONFIG_YAML, "nodes.yaml": _pool("fp")})
    name = f"t-{uuid.uuid4().hex[:8]}"
    rec = make_reconciler(repo.url, name=name)
    rec.sync()
    agent_reports(rapi, CONFIG_YAML, names)
    eventually(lambda: rec.sync(fetch=False).outcome == "InSync")
    rec.flush_status()
    record = read_record(rapi, NS, name)
    assert record is not None and record.revision == applied and record.config_text == CONFIG_YAML
    assert record.targets[names[0]][0] == "all-1g.10gb"
    rec.stop()
    # History rewritten: the branch now holds one invalid commit and no trace of the applied one.
    repo.git("checkout", "--orphan", "rewritten")
    repo.git("rm", "-rfq", ".")
    bad = repo.commit({"config.yaml": CONFIG_YAML, "nodes.yaml": "version: v1\nassignments: [\n"})
    repo.git("branch", "-f", "main", bad)
    repo.git("checkout", "-q", "main")
    repo.git("branch", "-D", "rewritten")
    repo.git("reflog", "expire", "--expire=now", "--all")
    repo.git("gc", "-q", "--prune=now")
    k8s.CoreV1Api(rapi).patch_node(names[0], {"metadata": {"labels": {MIG_CONFIG_LABEL: "all-3g.40gb"}}})
    fresh = make_reconciler(repo.url, name=name, cache_dir=tmp_path / "empty-cache")  # as a new pod: empty cache
    result = fresh.sync()
    assert result.outcome == "Invalid" and result.revision == applied, result
    assert labels_of(rapi, names)[names[0]][MIG_CONFIG_LABEL] == "all-1g.10gb"  # the hand edit is put back
    agent_reports(rapi, CONFIG_YAML, names[:1])
    eventually(lambda: fresh.sync(fetch=False) is not None and fresh.sync(fetch=False).plan.counts["InSync"] == 2)
    fresh.flush_status()
    status = migsync(rapi, name)
    available = condition(status, "AppliedRevisionAvailable")
    assert available["status"] == "False" and available["reason"] == "RevisionVanished"
    assert applied[:12] in available["message"] and "force-push" in available["message"]
    assert status["status"]["summary"]["inSync"] == "2/2"  # not 0/0: the truth about the nodes
    assert "nothing has been applied" not in condition(status, "Ready")["message"]
    fresh.stop()
    # The remote unreachable at start, with an empty cache: the record is enforced just the same.
    repo.path.rename(repo.path.with_name("gone"))
    k8s.CoreV1Api(rapi).patch_node(names[1], {"metadata": {"labels": {MIG_CONFIG_LABEL: "all-3g.40gb"}}})
    third = make_reconciler(repo.url, name=name, cache_dir=tmp_path / "another-empty-cache")
    assert third.sync().outcome == "Unreachable"
    assert labels_of(rapi, names)[names[1]][MIG_CONFIG_LABEL] == "all-1g.10gb"
    third.flush_status()
    assert condition(migsync(rapi, name), "AppliedRevisionAvailable")["status"] == "Unknown"


def test_assignments_matching_no_node_warn_and_max_defaulted_refuses_the_commit(
    rplane, rapi, repo, gpu_nodes, make_reconciler, tmp_path
) -> None:
    names = gpu_nodes(2, pool="typo")
    repo.commit({"config.yaml": CONFIG_YAML, "nodes.yaml": _pool("typo") + "default: all-disabled\n"})
    rec = make_reconciler(repo.url)
    rec.sync()
    agent_reports(rapi, CONFIG_YAML, names)
    eventually(lambda: rec.sync(fetch=False).outcome == "InSync")
    # A typo in the selector and a node that does not exist, with the guard on: refused, nothing moves.
    typo = (
        _pool("typpo", rollout="{maxUnavailable: '100%', maxDefaulted: 0}", extra="default: all-disabled\n")
        + "  - nodes: [gpu-node-99]\n    config: all-3g.40gb\n"
    )
    guarded = repo.commit({"nodes.yaml": typo})
    result = rec.sync()
    assert result.outcome == "Invalid" and "rollout.maxDefaulted is 0" in result.message, result
    assert {labels_of(rapi, names)[n][MIG_CONFIG_LABEL] for n in names} == {"all-1g.10gb"}
    rec.flush_status()
    ready = condition(migsync(rapi, rec.name), "Ready")
    assert ready["reason"] == "TooManyDefaulted" and guarded[:12] in ready["message"]
    # Without the guard the commit applies, and says loudly what it did.
    repo.commit({"nodes.yaml": typo.replace(", maxDefaulted: 0", "")})
    from migops.reconciler.controller import Reconciler

    preview = Reconciler(
        rapi,
        name=rec.name,
        namespace=NS,
        spec=SyncSpec(repo.url, "main"),
        dry_run=True,
        cache_dir=tmp_path / "diff-cache",
    ).start()
    try:
        found, result = preview.diff(server_side=False)  # what `migops diff` prints
    finally:
        preview.stop()
    assert set(found.defaulted) == set(names)
    assert any("no assignment matches them any more" in line for line in found.lines())
    assert any("default: no assignment matches it any more" in line and names[0] in line for line in found.lines())
    assert any("assignments[0] matches no node" in w for w in result.problems)  # printed as warnings
    assert any("gpu-node-99 does not exist" in w for w in result.problems)
    assert rec.sync().outcome == "Applied"
    rec.flush_status()
    status = migsync(rapi, rec.name)
    matched = condition(status, "AssignmentsMatched")
    assert matched["status"] == "False" and "assignments[0] matches no node" in matched["message"]
    assert "gpu-node-99 does not exist" in matched["message"] and "moves 2 node(s) to default" in matched["message"]
    assert any("matches no node" in w for w in status["status"]["warnings"])
    assert rec.flush_events()
    assert events_for(rapi, rec.name, "MatchesNoNode", NS) and events_for(rapi, rec.name, "MovedToDefault", NS)


def test_thousands_of_unmatched_entries_make_one_event_said_once_and_a_short_condition(
    rapi, repo, gpu_nodes, make_reconciler
) -> None:
    """A nodes.yaml listing many nodes the cluster does not have (yet): one MatchesNoNode Event for them
    all (their count, the first few), not again on later syncs while they stay the same; the condition
    says the same in a few lines. Each listed name was an Event of its own, again on later syncs."""
    names = gpu_nodes(1, pool="few")
    joining = "".join(f"      - joining-{i:04d}\n" for i in range(1200))
    repo.commit(
        {
            "config.yaml": CONFIG_YAML,
            "nodes.yaml": _pool("few") + f"  - config: all-3g.40gb\n    nodes:\n{joining}",
        }
    )
    rec = make_reconciler(repo.url)
    assert rec.sync().outcome == "Applied"
    agent_reports(rapi, CONFIG_YAML, names)
    for fetch in (False, True, False):
        rec.sync(fetch=fetch)
    rec.flush_status()
    assert rec.flush_events()
    (event,) = events_for(rapi, rec.name, "MatchesNoNode", NS)
    assert event.count == 1 and event.message.startswith("1200 entries match no node: ")
    assert "joining-0000 does not exist" in event.message and event.message.endswith("and 1195 more")
    matched = condition(migsync(rapi, rec.name), "AssignmentsMatched")
    assert matched["status"] == "False" and matched["message"] == event.message


def test_a_node_past_its_progress_deadline_stalls_with_its_name_an_event_and_a_metric(
    rapi, repo, gpu_nodes, make_reconciler
) -> None:
    names = gpu_nodes(2, pool="dead")
    repo.commit(
        {
            "config.yaml": CONFIG_YAML,
            "nodes.yaml": _pool("dead", rollout="{maxUnavailable: '100%', progressDeadlineSeconds: 2}"),
        }
    )
    rec = make_reconciler(repo.url)
    assert rec.sync().outcome == "Applied"
    agent_reports(rapi, CONFIG_YAML, names[1:])  # names[0]'s agent is dead: it never reports
    time.sleep(2.5)
    result = eventually(lambda: rec.sync(fetch=False), lambda r: "no progress" in r.message)
    assert names[0] in result.message and names[1] not in result.message
    rec.flush_status()
    stalled = condition(migsync(rapi, rec.name), "Stalled")
    assert stalled["status"] == "True" and stalled["reason"] == "ProgressDeadlineExceeded"
    assert names[0] in stalled["message"] and "progressDeadlineSeconds 2" in stalled["message"]
    assert rec.flush_events()
    (event,) = events_for(rapi, names[0], "ProgressDeadlineExceeded")
    assert event.type == "Warning"
    assert rec.metrics.past_deadline._value.get() == 1
    agent_reports(rapi, CONFIG_YAML, names[:1])
    eventually(lambda: rec.sync(fetch=False).outcome == "InSync")
    assert rec.metrics.past_deadline._value.get() == 0


def test_status_after_a_kill_is_rebuilt_from_the_cluster(rapi, repo, gpu_nodes, make_reconciler) -> None:
    names = gpu_nodes(2, pool="rebuilt")
    revision = repo.commit({"config.yaml": CONFIG_YAML, "nodes.yaml": _pool("rebuilt")})
    name = f"t-{uuid.uuid4().hex[:8]}"
    killed = make_reconciler(repo.url, name=name, write_status=False)  # as if killed before any status write
    killed.sync()
    time.sleep(2)
    agent_reports(rapi, CONFIG_YAML, names)
    killed.stop()
    assert "status" not in migsync(rapi, name)
    fresh = make_reconciler(repo.url, name=name)
    eventually(lambda: fresh.sync(fetch=False).outcome == "InSync")
    fresh.flush_status()
    status = migsync(rapi, name)["status"]
    assert {n["name"]: n.get("revision") for n in status["nodes"]} == {n: revision for n in names}
    assert fresh.flush_events()
    (event,) = events_for(rapi, name, "ReconciliationSucceeded", NS)
    took = float(event.message.rsplit(" in ", 1)[1].rstrip("s"))
    assert took >= 2.0  # counted from when the revision was first adopted, not from the restart


def test_the_migsync_crd_installed_after_start_is_picked_up(rapi, repo, gpu_nodes, tmp_path) -> None:
    from migops.reconciler.controller import Reconciler

    names = gpu_nodes(1, pool="late")
    repo.commit(
        {
            "config.yaml": CONFIG_YAML,
            "nodes.yaml": nodes_yaml("  - nodeSelector: {matchLabels: {pool: late}}\n    config: all-1g.10gb"),
        }
    )
    ext = k8s.ApiextensionsV1Api(rapi)
    ext.delete_custom_resource_definition(CRD_NAME)
    eventually(lambda: CRD_NAME not in {c.metadata.name for c in ext.list_custom_resource_definition().items})
    spec = SyncSpec(repo.url, "main")
    rec = Reconciler(rapi, name="late", namespace=NS, spec=spec, cache_dir=tmp_path / "cache").start()
    try:
        assert rec.migsync.missing
        assert rec.sync().outcome == "Applied"  # works without it; no status to write
        assert labels_of(rapi, names)[names[0]][MIG_CONFIG_LABEL] == "all-1g.10gb"
        # Its Events go on the MIG ConfigMap of the revision this first sync adopted.
        assert rec.flush_events()
        assigned = events_for(rapi, "default-mig-parted-config", "MigConfigAssigned", "gpu-operator")
        assert any(names[0] in e.message for e in assigned), [e.message for e in assigned]
        install_crd(rapi, field_manager="migops-test")
        ssa.apply(rapi, migsync_object("late", NS, spec), field_manager="migops-test", force=True)
        eventually(lambda: rec.migsync_object() is not None, timeout=30)  # the same informer sees it
        agent_reports(rapi, CONFIG_YAML, names)
        eventually(lambda: rec.sync(fetch=False).outcome == "InSync")
        rec.flush_status()
        assert condition(migsync(rapi, "late"), "Ready")["status"] == "True"
    finally:
        rec.stop()
        install_crd(rapi, field_manager="migops-test")

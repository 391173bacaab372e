"""Waves, halts, bad commits, signatures, drift and a vanished remote: nothing unsafe is ever applied."""

from __future__ import annotations

import shutil

from gitrepo import CONFIG_YAML, UNPLACEABLE, SshKey, nodes_yaml
from kubernetes import client as k8s
from reconciler_harness import agent_reports, condition, events_for, eventually, labels_of, migsync

from migops.api.migsync import TrustPolicy
from migops.api.names import MIG_CONFIG_LABEL, RESUME_ANNOTATION
from migops.reconciler.apply import WriteError, Writer


def _pool(pool: str, config: str = "all-1g.10gb", **kw) -> str:
    return nodes_yaml(f"  - nodeSelector: {{matchLabels: {{pool: {pool}}}}}\n    config: {config}", **kw)


def _busy(api, names: list[str], config: str) -> list[str]:
    """Nodes given `config` whose agent has not reported success for it yet."""
    got = labels_of(api, names)
    return [
        n
        for n in names
        if got[n].get(MIG_CONFIG_LABEL) == config and got[n].get("nvidia.com/mig.config.state") != "success"
    ]


def test_waves_respect_max_unavailable_and_a_failure_halts_until_resume(rapi, repo, gpu_nodes, make_reconciler) -> None:
    names = gpu_nodes(7, pool="w")
    repo.commit({"config.yaml": CONFIG_YAML, "nodes.yaml": _pool("w", max_unavailable=2)})
    rec = make_reconciler(repo.url)
    assert rec.sync().writes == 3  # the ConfigMap and the first wave of two
    assert len(_busy(rapi, names, "all-1g.10gb")) == 2
    assert rec.sync(fetch=False).writes == 0  # both slots taken until they report
    first = _busy(rapi, names, "all-1g.10gb")
    agent_reports(rapi, CONFIG_YAML, first[:1])  # one done: one slot frees
    eventually(lambda: rec.sync(fetch=False).writes == 1)
    assert len(_busy(rapi, names, "all-1g.10gb")) == 2
    # A node that fails halts the rollout; the condition names it and says why.
    busy = _busy(rapi, names, "all-1g.10gb")
    agent_reports(rapi, CONFIG_YAML, busy, fail={busy[0]: "NVML: insufficient resources"})
    result = eventually(lambda: rec.sync(fetch=False), lambda r: r.outcome == "Halted")
    assert result.writes == 0
    rec.flush_status()
    stalled = condition(migsync(rapi, rec.name), "Stalled")
    assert stalled["status"] == "True" and stalled["reason"] == "RolloutHalted"
    assert busy[0] in stalled["message"] and "NVML: insufficient resources" in stalled["message"]
    assert rec.sync().writes == 0  # a poll of the same commit does not lift the halt
    # A resume acknowledges the failure: the rollout goes on, two at a time again.
    k8s.CustomObjectsApi(rapi).patch_namespaced_custom_object(
        "migops.io",
        "v1alpha1",
        "migops-system",
        "migsyncs",
        rec.name,
        {"metadata": {"annotations": {RESUME_ANNOTATION: "1"}}},
    )
    eventually(
        lambda: ((rec.migsync_object() or {})["metadata"].get("annotations") or {}).get(RESUME_ANNOTATION) == "1"
    )
    assert rec.sync(fetch=False).writes == 2
    while True:
        agent_reports(rapi, CONFIG_YAML, _busy(rapi, names, "all-1g.10gb"))
        result = eventually(
            lambda: rec.sync(fetch=False), lambda r: r.writes > 0 or r.outcome in ("InSync", "Progressing")
        )
        got = labels_of(rapi, names)
        if (
            all(got[n].get(MIG_CONFIG_LABEL) == "all-1g.10gb" for n in names)
            and len(_busy(rapi, names, "all-1g.10gb")) == 0
        ):
            break
        assert len(_busy(rapi, names, "all-1g.10gb")) <= 2


def test_bad_commits_are_not_applied_and_name_file_and_path(rapi, repo, gpu_nodes, make_reconciler) -> None:
    names = gpu_nodes(3, pool="bad")
    good = repo.commit({"c/config.yaml": CONFIG_YAML, "c/nodes.yaml": _pool("bad")})
    rec = make_reconciler(repo.url, path="c")
    assert rec.sync().outcome == "Applied"
    agent_reports(rapi, CONFIG_YAML, names)
    eventually(lambda: rec.sync(fetch=False).outcome == "InSync")
    writes = rec.metrics.writes("nodes") + rec.metrics.writes("configmaps")
    cases = [
        (
            {"c/config.yaml": UNPLACEABLE, "c/nodes.yaml": _pool("bad", "too-many")},
            "ValidationFailed",
            'c/config.yaml: mig-configs.too-many[0].mig-devices."1g.10gb"',
        ),
        (
            {"c/config.yaml": CONFIG_YAML, "c/nodes.yaml": _pool("bad", "no-such")},
            "ValidationFailed",
            "c/nodes.yaml: assignments[0].config: config 'no-such' is not in c/config.yaml",
        ),
        ({"c/nodes.yaml": "version: v1\nassignments: [\n"}, "ValidationFailed", "c/nodes.yaml: "),
        (
            {"c/nodes.yaml": _pool("bad", strategy="single")},
            "StrategyMismatch",
            "strategy 'single' does not match the cluster's MIG strategy 'mixed'",
        ),
    ]
    for files, reason, where in cases:
        bad = repo.commit(files)
        result = rec.sync()
        assert result.outcome == "Invalid" and result.writes == 0, result
        assert any(where in p for p in result.problems), result.problems
        assert rec.sync(fetch=False).outcome == "Invalid"  # following the cluster does not forget it
        rec.flush_status()
        status = migsync(rapi, rec.name)["status"]
        ready = condition({"status": status}, "Ready")
        assert (ready["status"], ready["reason"]) == ("False", reason)
        assert f"the cluster keeps revision {good[:12]}" in ready["message"]
        assert status["lastAppliedRevision"] == good and status["lastAttemptedRevision"] == bad
        assert any(where in p for p in status["problems"])
        assert rec.metrics.writes("nodes") + rec.metrics.writes("configmaps") == writes
        assert {labels_of(rapi, names)[n][MIG_CONFIG_LABEL] for n in names} == {"all-1g.10gb"}
        repo.git("reset", "-q", "--hard", good)
    assert rec.flush_events() and events_for(rapi, rec.name, "ValidationFailed", "migops-system")


def test_only_commits_signed_by_a_trusted_key_are_applied(rapi, repo, gpu_nodes, make_reconciler, tmp_path) -> None:
    names = gpu_nodes(2, pool="sig")
    alice, mallory = SshKey.make(tmp_path / "keys", "alice"), SshKey.make(tmp_path / "keys", "mallory")
    unsigned = repo.commit({"config.yaml": CONFIG_YAML, "nodes.yaml": _pool("sig")})
    rec = make_reconciler(repo.url, trust=TrustPolicy("head", allowed_signers=alice.allowed_signers))
    result = rec.sync()
    assert result.outcome == "Unverified" and result.writes == 0
    assert f"commit {unsigned[:12]} is not signed" in result.message
    repo.commit({}, "by mallory", key=mallory)
    result = rec.sync()
    assert result.outcome == "Unverified" and "not in the allowed signers" in result.message
    assert {labels_of(rapi, names)[n][MIG_CONFIG_LABEL] for n in names} == {"all-disabled"}
    rec.flush_status()
    assert condition(migsync(rapi, rec.name), "Ready")["reason"] == "VerificationFailed"
    signed = repo.commit({}, "by alice", key=alice)
    result = rec.sync()
    assert result.outcome == "Applied" and result.revision == signed
    assert {labels_of(rapi, names)[n][MIG_CONFIG_LABEL] for n in names} == {"all-1g.10gb"}


def test_drift_is_reverted_with_an_event(rapi, repo, gpu_nodes, make_reconciler) -> None:
    names = gpu_nodes(2, pool="drift")
    repo.commit({"config.yaml": CONFIG_YAML, "nodes.yaml": _pool("drift")})
    rec = make_reconciler(repo.url)
    rec.sync()
    agent_reports(rapi, CONFIG_YAML, names)
    eventually(lambda: rec.sync(fetch=False).outcome == "InSync")
    core = k8s.CoreV1Api(rapi)
    core.patch_node(names[0], {"metadata": {"labels": {MIG_CONFIG_LABEL: "all-3g.40gb"}}})  # as kubectl label would
    core.patch_namespaced_config_map(
        "default-mig-parted-config", "gpu-operator", {"data": {"config.yaml": "version: v1\n"}}
    )
    eventually(lambda: rec.sync(fetch=False).writes > 0, timeout=20)
    eventually(lambda: labels_of(rapi, names)[names[0]][MIG_CONFIG_LABEL] == "all-1g.10gb")
    # The two edits reach the informers as two events: a sync may come between them.
    cm_text = lambda: core.read_namespaced_config_map("default-mig-parted-config", "gpu-operator").data["config.yaml"]  # noqa: E731
    eventually(lambda: rec.sync(fetch=False) is not None and cm_text() == CONFIG_YAML, timeout=20)
    assert rec.flush_events()
    (event,) = events_for(rapi, names[0], "DriftReverted")
    assert event.type == "Warning" and "put back to 'all-1g.10gb'" in event.message
    assert events_for(rapi, "default-mig-parted-config", "DriftReverted", "gpu-operator")


def test_an_unmanaged_configmap_is_never_written_and_holds_new_labels_until_it_holds_the_revision(
    rapi, repo, gpu_nodes, make_reconciler
) -> None:
    """migops.io/unmanaged=true on the MIG ConfigMap (the webhook's escape hatch for its content): the
    reconciler leaves it alone; while its config.yaml is not the revision's no node gets a new label
    (Ready=False ConfigMapUnmanaged), once it is the rollout goes on, and without the label git's content
    is written back."""
    names = gpu_nodes(2, pool="hatch")
    repo.commit({"config.yaml": CONFIG_YAML, "nodes.yaml": _pool("hatch")})
    rec = make_reconciler(repo.url)
    rec.sync()
    agent_reports(rapi, CONFIG_YAML, names)
    eventually(lambda: rec.sync(fetch=False).outcome == "InSync")
    core = k8s.CoreV1Api(rapi)
    cm = ("default-mig-parted-config", "gpu-operator")
    by_hand = CONFIG_YAML + "# tuned by hand\n"
    core.patch_namespaced_config_map(
        *cm, {"metadata": {"labels": {"migops.io/unmanaged": "true"}}, "data": {"config.yaml": by_hand}}
    )
    result = eventually(lambda: rec.sync(fetch=False), lambda r: r.outcome == "Halted", timeout=20)
    assert result.writes == 0 and "migops.io/unmanaged=true" in result.message, result
    repo.commit({"nodes.yaml": _pool("hatch", config="all-3g.40gb")})  # a reassignment: held
    assert rec.sync().writes == 0
    assert {labels_of(rapi, names)[n][MIG_CONFIG_LABEL] for n in names} == {"all-1g.10gb"}
    assert core.read_namespaced_config_map(*cm).data["config.yaml"] == by_hand
    rec.flush_status()
    ready = condition(migsync(rapi, rec.name), "Ready")
    assert ready["status"] == "False" and ready["reason"] == "ConfigMapUnmanaged", ready
    assert "gives no node a new label until it holds the revision's config.yaml" in ready["message"]
    held = events_for(rapi, cm[0], "ConfigMapUnmanaged", cm[1])
    assert [e.type for e in held] == ["Warning", "Warning"], held  # one per revision held, not per sync
    # Whoever owns it now puts the revision's text in: the rollout goes on, the ConfigMap unwritten.
    core.patch_namespaced_config_map(*cm, {"data": {"config.yaml": CONFIG_YAML}})
    version = core.read_namespaced_config_map(*cm).metadata.resource_version
    eventually(lambda: rec.sync(fetch=False).writes > 0, timeout=20)
    assert {labels_of(rapi, names)[n][MIG_CONFIG_LABEL] for n in names} & {"all-3g.40gb"}
    assert core.read_namespaced_config_map(*cm).metadata.resource_version == version
    assert any(e.type == "Normal" for e in events_for(rapi, cm[0], "ConfigMapUnmanaged", cm[1]))
    # Given back to git: a hand edit is reverted as before.
    core.patch_namespaced_config_map(
        *cm, {"metadata": {"labels": {"migops.io/unmanaged": None}}, "data": {"config.yaml": by_hand}}
    )
    text = lambda: core.read_namespaced_config_map(*cm).data["config.yaml"]  # noqa: E731
    eventually(lambda: rec.sync(fetch=False) is not None and text() == CONFIG_YAML, timeout=20)


def test_git_remote_gone_changes_nothing(rapi, repo, gpu_nodes, make_reconciler) -> None:
    names = gpu_nodes(2, pool="gone")
    good = repo.commit({"config.yaml": CONFIG_YAML, "nodes.yaml": _pool("gone")})
    rec = make_reconciler(repo.url)
    rec.sync()
    agent_reports(rapi, CONFIG_YAML, names)
    eventually(lambda: rec.sync(fetch=False).outcome == "InSync")
    writes = rec.metrics.writes("nodes") + rec.metrics.writes("configmaps")
    shutil.rmtree(repo.path)
    result = rec.sync()
    assert result.outcome == "Unreachable" and result.writes == 0
    rec.flush_status()
    status = migsync(rapi, rec.name)["status"]
    ready = condition({"status": status}, "Ready")
    assert ready["status"] == "False" and ready["reason"] == "GitUnreachable"
    assert f"the cluster keeps revision {good[:12]}" in ready["message"]
    assert status["lastAppliedRevision"] == good
    assert rec.metrics.writes("nodes") + rec.metrics.writes("configmaps") == writes
    assert {labels_of(rapi, names)[n][MIG_CONFIG_LABEL] for n in names} == {"all-1g.10gb"}


def test_an_admission_denial_is_reported_with_its_message_and_not_hot_looped(
    rapi, repo, gpu_nodes, make_reconciler
) -> None:
    """Any admission control that refuses a write (here an in-process ValidatingAdmissionPolicy; the
    migops webhook answers the same way): the message reaches status, the write is not retried per sync."""
    adm = k8s.AdmissionregistrationV1Api(rapi)
    adm.create_validating_admission_policy(
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": "no-3g"},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [
                        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["nodes"]}
                    ]
                },
                "validations": [
                    {
                        "expression": "!has(object.metadata.labels) || "
                        "object.metadata.labels[?'nvidia.com/mig.config'].orValue('') != 'all-3g.40gb'",
                        "message": "all-3g.40gb is not allowed on this pool",
                    }
                ],
            },
        }
    )
    adm.create_validating_admission_policy_binding(
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": "no-3g"},
            "spec": {
                "policyName": "no-3g",
                "validationActions": ["Deny"],
                "matchResources": {"objectSelector": {"matchLabels": {"pool": "vap"}}},
            },
        }
    )
    try:
        names = gpu_nodes(2, pool="vap")
        probe = Writer(rapi, dry_run=True)

        def denies() -> bool:  # the API server loads a new policy asynchronously: wait until it is in force
            try:
                probe.label(names[0], "all-3g.40gb")
                return False
            except WriteError as err:
                return err.status == 422

        eventually(denies, timeout=60)
        repo.commit({"config.yaml": CONFIG_YAML, "nodes.yaml": _pool("vap", "all-3g.40gb")})
        rec = make_reconciler(repo.url)
        result = rec.sync()
        assert result.outcome == "ApplyFailed", result
        assert "all-3g.40gb is not allowed on this pool" in result.message and "HTTP 422" in result.message
        errors = rec.metrics.requests.labels("nodes", "error", "422")._value.get()
        for _ in range(3):
            assert rec.sync(fetch=False).writes == 0
        assert rec.metrics.requests.labels("nodes", "error", "422")._value.get() == errors
        rec.flush_status()
        ready = condition(migsync(rapi, rec.name), "Ready")
        assert ready["reason"] == "ApplyFailed" and "all-3g.40gb is not allowed on this pool" in ready["message"]
        assert {labels_of(rapi, names)[n][MIG_CONFIG_LABEL] for n in names} == {"all-disabled"}
    finally:
        adm.delete_validating_admission_policy_binding("no-3g")
        adm.delete_validating_admission_policy("no-3g")


def test_keys_the_deployment_mounts_require_signatures_the_migsync_does_not_ask_for(
    rapi, repo, gpu_nodes, make_reconciler, tmp_path
) -> None:
    """`migops reconcile --allowed-signers F` beside a MigSync (the chart mounts F from a Secret or
    ConfigMap): commits must be signed by those keys even though the MigSync's spec.verify says none."""
    import uuid

    from migops.api.migsync import SyncSpec, migsync_object
    from migops.kube import ssa
    from migops.reconciler.controller import Reconciler

    names = gpu_nodes(2, pool="floor")
    alice = SshKey.make(tmp_path / "keys", "alice")
    unsigned = repo.commit({"config.yaml": CONFIG_YAML, "nodes.yaml": _pool("floor")})
    name = f"t-{uuid.uuid4().hex[:8]}"
    open_spec = SyncSpec(repo.url, "main", "", 60.0, False, TrustPolicy())  # the MigSync asks for nothing
    ssa.apply(rapi, migsync_object(name, "migops-system", open_spec), field_manager="migops-test", force=True)
    rec = Reconciler(
        rapi,
        name=name,
        namespace="migops-system",
        cache_dir=tmp_path / "git-cache",
        trust=TrustPolicy("head", allowed_signers=alice.allowed_signers),
    ).start()
    try:
        eventually(rec.migsync_object)
        assert rec.current_spec().trust.mode == "head"
        result = rec.sync()
        assert result.outcome == "Unverified" and result.writes == 0
        assert f"commit {unsigned[:12]} is not signed" in result.message
        signed = repo.commit({}, "by alice", key=alice)
        result = rec.sync()
        assert result.outcome == "Applied" and result.revision == signed
        assert {labels_of(rapi, names)[n][MIG_CONFIG_LABEL] for n in names} == {"all-1g.10gb"}
    finally:
        rec.stop()


def test_a_trust_floor_adds_its_keys_to_the_migsyncs_own() -> None:
    from migops.api.migsync import SyncSpec
    from migops.reconciler.controller import with_trust_floor

    own = SyncSpec("https://git.example/x", trust=TrustPolicy("head", "bob ssh-ed25519 AAAA", ("-----KEY A-----",)))
    floor = TrustPolicy("head", "alice ssh-ed25519 BBBB", ("-----KEY B-----", "-----KEY A-----"))
    merged = with_trust_floor(own, floor).trust
    assert merged.mode == "head"
    assert merged.allowed_signers.splitlines() == ["bob ssh-ed25519 AAAA", "alice ssh-ed25519 BBBB"]
    assert merged.openpgp_keys == ("-----KEY A-----", "-----KEY B-----")
    assert with_trust_floor(SyncSpec("https://git.example/x"), floor).trust.mode == "head"

"""MigSync spec.suggest: the reconciler publishes `migops suggest`'s proposal for the pending MIG pods
(status.suggestion under its own field manager, the migops_pending_mig_requests gauge, an Event when it
changes) and applies nothing."""

from __future__ import annotations

import uuid

import pytest
from gitrepo import CONFIG_YAML, nodes_yaml
from kubernetes import client as k8s
from reconciler_harness import events_for, labels_of, migsync

from migops.api.migsync import SuggestSpec, SyncSpec, parse_spec
from migops.api.schema import dump


def test_the_spec_opts_in_with_an_interval() -> None:
    spec = parse_spec({"spec": {"url": "file:///r", "suggest": {"enabled": True, "interval": "2m"}}})
    assert spec.suggest.enabled and spec.suggest.interval == 120
    assert parse_spec({"spec": {"url": "file:///r"}}).suggest.enabled is False
    assert dump(SyncSpec("file:///r", suggest=SuggestSpec(True, 30)))["suggest"] == {
        "enabled": True,
        "interval": "30s",
    }
    with pytest.raises(ValueError, match="spec.suggest.interval"):
        parse_spec({"spec": {"url": "file:///r", "suggest": {"enabled": True, "interval": "soon"}}})


def test_the_proposal_is_published_not_applied(rapi, repo, gpu_nodes, make_reconciler) -> None:
    pool = f"p{uuid.uuid4().hex[:6]}"
    names = gpu_nodes(2, pool)
    repo.commit(
        {
            "config.yaml": CONFIG_YAML,
            "nodes.yaml": nodes_yaml(f"  - nodeSelector: {{matchLabels: {{pool: {pool}}}}}\n    config: all-1g.10gb"),
        }
    )
    rec = make_reconciler(repo.url)
    assert rec.sync().ok
    core = k8s.CoreV1Api(rapi)
    ns = f"sg-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": ns}})
    try:
        for i in range(3):
            core.create_namespaced_pod(
                ns,
                {
                    "metadata": {"name": f"train-{i}"},
                    "spec": {
                        "containers": [
                            {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/mig-3g.40gb": "1"}}}
                        ],
                        "nodeSelector": {"pool": pool},
                    },
                },
            )
        before = labels_of(rapi, names)
        found = rec.suggester().publish()
        assert found is not None and found["outcome"] == "proposal" and found["servedPods"] == 3
        status = migsync(rapi, rec.name)["status"]
        assert status["suggestion"]["changes"] == found["changes"] and status["suggestion"]["patch"].startswith(
            "--- a/nodes.yaml"
        )
        assert status.get("conditions")  # the reconciler's own status is still there, beside it
        assert [c["to"] for c in found["changes"]] == ["all-3g.40gb"]  # 2 per GPU x 8 GPUs: one node serves all
        assert rec.metrics.pending_mig.labels("3g.40gb")._value.get() == 3
        assert rec.flush_events()
        assert any(
            "serve 3 of 3 pending MIG pods" in e.message for e in events_for(rapi, rec.name, "MigSuggestionChanged")
        )
        assert labels_of(rapi, names) == before  # nothing applied
        # The same proposal again: no second Event.
        s = rec.suggester()
        s.publish()
        s.publish()
        assert rec.flush_events()
        assert len(events_for(rapi, rec.name, "MigSuggestionChanged")) <= 2
    finally:
        core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)  # no namespace controller runs here
        core.delete_namespace(ns)


def test_without_the_suggest_extra_the_status_names_it(
    rapi, repo, gpu_nodes, make_reconciler, without_or_tools
) -> None:
    """A reconciler installed without migops[suggest] (the image has it): spec.suggest's status says the
    extra is missing, in the status a person reads, not only in a log."""
    pool = f"p{uuid.uuid4().hex[:6]}"
    gpu_nodes(1, pool)
    repo.commit(
        {
            "config.yaml": CONFIG_YAML,
            "nodes.yaml": nodes_yaml(f"  - nodeSelector: {{matchLabels: {{pool: {pool}}}}}\n    config: all-1g.10gb"),
        }
    )
    rec = make_reconciler(repo.url)
    assert rec.sync().ok
    found = rec.suggester().publish()
    assert found is not None and found["outcome"] == "unavailable" and found["revision"] == repo.head()
    assert "pip install 'migops[suggest]'" in found["summary"]
    assert migsync(rapi, rec.name)["status"]["suggestion"]["outcome"] == "unavailable"


def test_the_loop_publishes_it_while_spec_suggest_is_enabled(rapi, repo, gpu_nodes, tmp_path) -> None:
    import threading

    from reconciler_harness import eventually

    from migops.api.migsync import migsync_object
    from migops.kube import ssa
    from migops.reconciler.controller import Reconciler

    pool = f"p{uuid.uuid4().hex[:6]}"
    gpu_nodes(1, pool)
    repo.commit(
        {
            "config.yaml": CONFIG_YAML,
            "nodes.yaml": nodes_yaml(f"  - nodeSelector: {{matchLabels: {{pool: {pool}}}}}\n    config: all-1g.10gb"),
        }
    )
    name = f"t-{uuid.uuid4().hex[:8]}"
    spec = SyncSpec(repo.url, "main", "", 60.0, suggest=SuggestSpec(True, 1.0))
    ssa.apply(rapi, migsync_object(name, "migops-system", spec), field_manager="migops-test", force=True)
    rec = Reconciler(rapi, name=name, namespace="migops-system", spec=spec, cache_dir=tmp_path / "git-cache").start()
    stop = threading.Event()
    loop = threading.Thread(target=rec.run, kwargs={"stop": stop}, daemon=True)
    loop.start()
    try:
        found = eventually(lambda: (migsync(rapi, name).get("status") or {}).get("suggestion"), timeout=60)
        # (Pods other tests of this plane left pending for other pools may be there: served or not, they
        # change nothing here.)
        assert found["outcome"] in ("no-demand", "no-change") and found["revision"] == repo.head()
        assert found["changes"] == []
    finally:
        stop.set()
        rec.stop()
        loop.join(30)

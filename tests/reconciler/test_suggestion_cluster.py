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


_READ = """
import json, resource, sys
from kubernetes import config
from migops.gitops.repo import load_repo
from migops.kube.clusterpolicy import MigSettings
from migops.suggest.live import read_cluster
from migops.suggest.run import suggest

kubeconfig, config_text, nodes_text = sys.argv[1:]
api = config.new_client_from_config(config_file=kubeconfig)
spec = load_repo({"config.yaml": config_text.encode(), "nodes.yaml": nodes_text.encode()}, "", "r")
cluster = read_cluster(api, MigSettings(strategy="mixed"))
out = suggest(spec, cluster)
print(json.dumps({
    "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    "pending": len(out.demands),
    "served": len(out.proposal.placed) if out.proposal else 0,
}))
"""


def _limit_mib() -> float:
    """The reconciler container's memory limit in the manifests (Mi)."""
    from pathlib import Path

    import yaml

    text = (Path(__file__).parents[2] / "manifests/base/reconciler/deployment.yaml").read_text()
    deployment = next(d for d in yaml.safe_load_all(text) if d and d.get("kind") == "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    limit = container["resources"]["limits"]["memory"]
    assert limit.endswith("Mi")
    return float(limit[:-2])


def test_a_flood_of_pending_pods_with_huge_annotations_stays_within_the_reconcilers_limit(
    rplane, rapi, repo, gpu_nodes, make_reconciler, monkeypatch
) -> None:
    """1,000 pending MIG pods carrying 240 KiB annotations each (240 MiB of text, all within the API
    server's limits, by a user who may only create pods in one namespace): spec.suggest lists them in
    pages and keeps what it reads of each, so the proposal's process stays well under the reconciler's
    limit; with the bound on pending pods lowered, the status names it."""
    import json
    import subprocess
    import sys
    from concurrent.futures import ThreadPoolExecutor

    from migops.suggest import live

    pool = f"p{uuid.uuid4().hex[:6]}"
    gpu_nodes(2, pool)
    nodes_text = nodes_yaml(f"  - nodeSelector: {{matchLabels: {{pool: {pool}}}}}\n    config: all-1g.10gb")
    repo.commit({"config.yaml": CONFIG_YAML, "nodes.yaml": nodes_text})
    core = k8s.CoreV1Api(rapi)
    ns = f"flood-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": ns}})
    blob = "x" * (240 * 1024)

    def create(i: int) -> None:
        core.create_namespaced_pod(
            ns,
            {
                "metadata": {"name": f"p{i:04d}", "annotations": {"blob": blob}, "labels": {"batch": str(i // 100)}},
                "spec": {
                    "containers": [
                        {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/mig-3g.40gb": "1"}}}
                    ],
                    "nodeSelector": {"pool": pool},
                },
            },
        )

    try:
        with ThreadPoolExecutor(4) as workers:
            list(workers.map(create, range(1000)))
        done = subprocess.run(
            [sys.executable, "-c", _READ, str(rplane.admin_kubeconfig), CONFIG_YAML, nodes_text],
            capture_output=True,
            text=True,
            timeout=600,
            check=True,
        )
        found = json.loads(done.stdout.strip().splitlines()[-1])
        assert found["pending"] >= 1000 and found["served"] >= 32  # 2 nodes x 8 GPUs x 2 x 3g.40gb
        assert found["peak_mib"] < 0.75 * _limit_mib(), found  # listed whole, the pods alone exceed the limit
        monkeypatch.setattr(live, "MAX_PENDING_PODS", 600)
        rec = make_reconciler(repo.url)
        assert rec.sync().ok
        status = rec.suggester().publish()
        assert status is not None and "capped at 600" in status["capped"], status
        assert migsync(rapi, rec.name)["status"]["suggestion"]["capped"] == status["capped"]
    finally:
        # In batches: one request deleting 240 MiB of pods can outlast the API server's request timeout.
        for batch in range(10):
            core.delete_collection_namespaced_pod(ns, label_selector=f"batch={batch}", grace_period_seconds=0)
        core.delete_namespace(ns)  # no namespace controller runs here: the pods are deleted above

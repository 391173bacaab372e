"""Pure parts, without a cluster: the envelope, warnings, the rules on a hand-made Snapshot, the
mutations' patches, certificate rotation in a directory."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from cryptography import x509
from webhook_helpers import CM_NS, DEFAULT_CONFIG, configmap, review

from migops.certs.rotation import DirectoryStore, certificates, remaining, rotate
from migops.webhook import annotate, configmaps, nodelabels, pods, policies
from migops.webhook.admission import MAX_WARNING, BadReview, merge_warnings, parse_review
from migops.webhook.state import Snapshot, trim_node

H100_NODE = {
    "metadata": {
        "name": "n1",
        "labels": {
            "migops.io/gpu.device-id": "0x233010DE",
            "nvidia.com/gpu.count": "8",
            "nvidia.com/mig.config": "all-balanced",
        },
    }
}
POLICY = {
    "metadata": {"name": "cluster-policy", "creationTimestamp": "2026-01-01T00:00:00Z"},
    "spec": {"mig": {"strategy": "mixed"}},
    "status": {"namespace": CM_NS},
}


def snap(strategy: str = "mixed", nodes=(H100_NODE,), text: str | None = DEFAULT_CONFIG) -> Snapshot:
    policy = {**POLICY, "spec": {"mig": {"strategy": strategy}}}
    cms = [configmap(text)] if text is not None else []
    return Snapshot.build(1, [trim_node(n) for n in nodes], [policy], cms)


def req(body: dict):
    return parse_review(json.loads(json.dumps(body)))


def test_envelope_rejects_with_the_field_named() -> None:
    with pytest.raises(BadReview, match="request.uid"):
        parse_review({**review(configmap("x")), "request": {**review(configmap("x"))["request"], "uid": 7}})
    assert parse_review(review(configmap("x"))).kind == "ConfigMap"


def test_warnings_are_merged_per_rule_and_short() -> None:
    items = [
        ("device-index-out-of-range", f"mig-configs.c{i}", f"GPU index {i + 8} does not exist " + "x" * 200)
        for i in range(12)
    ] + [("zero-count", "p", "short")]
    out = merge_warnings(items)
    assert len(out) == 2 and all(len(w) <= MAX_WARNING for w in out)
    assert "+11 similar" in out[0] and out[1] == "p: short [zero-count]"


def test_configmap_rules_on_a_snapshot() -> None:
    s = snap()
    removed = DEFAULT_CONFIG.replace("  all-balanced:\n", "  gone:\n", 1)
    verdict = configmaps.validate(req(review(configmap(removed), operation="UPDATE", old=configmap(DEFAULT_CONFIG))), s)
    assert not verdict.allowed and "config-in-use" in verdict.rules and "node n1" in verdict.message
    unrelated = configmap("garbage: [", name="other", namespace="default")
    assert configmaps.validate(req(review(unrelated)), s).allowed
    delete = configmaps.validate(req(review(None, operation="DELETE", old=configmap(DEFAULT_CONFIG))), s)
    assert not delete.allowed and delete.code == 403


def test_node_rule_with_unknown_count_checks_the_model() -> None:
    single_mig = {
        "metadata": {
            "name": "n2",
            "labels": {
                "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb",
                "nvidia.com/mig.config": "all-1g.5gb",
            },
        }
    }
    verdict = nodelabels.validate(
        req(review(single_mig, operation="UPDATE", old=H100_NODE, kind="Node")), snap("single")
    )
    assert not verdict.allowed and "H100-SXM5-80GB" in verdict.message
    ok = {
        **single_mig,
        "metadata": {
            **single_mig["metadata"],
            "labels": {**single_mig["metadata"]["labels"], "nvidia.com/mig.config": "all-1g.10gb"},
        },
    }
    assert nodelabels.validate(req(review(ok, operation="UPDATE", old=H100_NODE, kind="Node")), snap("single")).allowed
    missing = nodelabels.validate(req(review(ok, operation="UPDATE", old=H100_NODE, kind="Node")), snap(text=None))
    assert "configmap-missing" in missing.rules


def test_config_reports_are_remembered_per_config_not_per_file() -> None:
    """Editing one config of a file re-validates that one; the others' reports are the remembered
    objects, and every report equals what the MIG core says of the new file afresh."""
    from migops.mig.catalogue import catalogue
    from migops.mig.spec import parse_config
    from migops.mig.validate import validate_against_catalogue, validate_on_node
    from migops.webhook import checks

    checks.forget()
    first = checks.parse(DEFAULT_CONFIG)
    before = checks.on_catalogue(first, first.names())
    edited_text = DEFAULT_CONFIG.replace('"1g.10gb": 7', '"1g.10gb": 8', 1)
    edited = checks.parse(edited_text)
    after = checks.on_catalogue(edited, edited.names())
    changed = {n for n in edited.names() if edited.entries(n) != first.entries(n)}
    assert len(changed) == 1
    fresh = parse_config(edited_text)
    for name in edited.names():
        assert after[name] == validate_against_catalogue(fresh, name)
        assert (after[name] is before[name]) == (name not in changed)
    (name,) = changed
    assert not after[name].valid and before[name].valid  # 8 x 1g.10gb does not fit any GPU
    h100 = [catalogue().resolve("0x233010DE")] * 8
    assert checks.on_node(edited, "all-balanced", h100, "mixed") is checks.on_node(first, "all-balanced", h100, "mixed")
    assert checks.on_node(edited, name, h100, "mixed") == validate_on_node(fresh, name, h100, "mixed")


def test_lru_is_bounded_by_weight() -> None:
    from migops.webhook.cache import LRU

    cache: LRU[str, int] = LRU(10)
    cache.put("a", 1, weight=4)
    cache.put("b", 2, weight=4)
    cache.put("c", 3, weight=4)  # 12 > 10: the least recently used goes
    assert cache.get("a") is None and cache.get("b") == 2 and cache.get("c") == 3
    cache.put("huge", 4, weight=11)  # heavier than the whole cache: not kept, nothing evicted
    assert cache.get("huge") is None and len(cache) == 2
    cache.put("b", 5, weight=2)  # replacing an entry replaces its weight
    cache.put("d", 6, weight=4)
    assert [cache.get(k) for k in "bcd"] == [5, 3, 6]


def test_policy_rules() -> None:
    body = {
        "apiVersion": "nvidia.com/v1",
        "kind": "ClusterPolicy",
        "metadata": {"name": "cp"},
        "spec": {"mig": {"strategy": "single"}, "migManager": {"enabled": True, "repository": "r", "image": "i"}},
    }
    old = {**body, "spec": {"mig": {"strategy": "mixed"}}}
    verdict = policies.validate(
        req(review(body, operation="UPDATE", old=old, kind="ClusterPolicy", group="nvidia.com")), snap()
    )
    assert set(verdict.rules) == {"mig-manager-image", "strategy-mismatch"}


def test_deleting_a_cluster_policy_is_judged_as_what_takes_over() -> None:
    """A DELETE of the ClusterPolicy in force puts the next oldest (or the operator's
    defaults) in force, judged as that switch; deleting one that is not in force changes nothing."""
    newer = {
        "metadata": {"name": "newer", "creationTimestamp": "2026-06-01T00:00:00Z"},
        "spec": {"mig": {"strategy": "single"}},
        "status": {"namespace": CM_NS},
    }
    two = Snapshot.build(1, [trim_node(H100_NODE)], [POLICY, newer], [configmap(DEFAULT_CONFIG)])

    def delete(name: str, state: Snapshot):
        old = {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": name}}
        return policies.validate(req(review(None, operation="DELETE", old=old, group="nvidia.com")), state)

    assert delete("newer", two).allowed  # ignored by the operator while the older one exists
    verdict = delete("cluster-policy", two)  # "newer" (single) takes over; n1 is on all-balanced
    assert not verdict.allowed and verdict.rules == ("strategy-mismatch",), verdict
    assert "deleting ClusterPolicy cluster-policy" in verdict.message and "n1" in verdict.message
    assert set(delete("cluster-policy", snap()).rules) == {"strategy-mismatch"}  # the defaults: single
    assert delete("cluster-policy", snap(nodes=())).allowed


def test_pod_translation_patch_and_idempotence() -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "resources": {
                        "limits": {"nvidia.com/mig-3g.40gb": "1"},
                        "requests": {"nvidia.com/mig-3g.40gb": "1"},
                    },
                }
            ]
        },
    }
    verdict = pods.mutate(req(review(pod, kind="Pod")), snap("single"))
    ops = {(o["op"], o["path"]) for o in verdict.patch}
    assert ("remove", "/spec/containers/0/resources/limits/nvidia.com~1mig-3g.40gb") in ops
    assert ("add", "/spec/nodeSelector") in ops
    translated = {
        **pod,
        "spec": {
            "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
            "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-MIG-3g.40gb"},
        },
    }
    assert pods.mutate(req(review(translated, kind="Pod")), snap("single")).patch == ()
    assert pods.mutate(req(review(pod, kind="Pod")), snap("mixed")).patch == ()
    assert "nvidia.com/mig-1c.3g.40gb" in pods.mig_resources() and "nvidia.com/mig-1g.10gb.me" in pods.mig_resources()


def test_annotations_leave_owned_ones_alone() -> None:
    obj = configmap(DEFAULT_CONFIG)
    first = annotate.mutate(req(review(obj)), snap())
    assert [o["path"] for o in first.patch] == ["/metadata/annotations"]
    mine = {
        **obj,
        "metadata": {
            **obj["metadata"],
            "annotations": {"migops.io/validated-strategy": "x"},
            "managedFields": [
                {
                    "manager": "argocd-controller",
                    "operation": "Apply",
                    "fieldsV1": {"f:metadata": {"f:annotations": {"f:migops.io/validated-strategy": {}}}},
                }
            ],
        },
    }
    patch = annotate.mutate(req(review(mine)), snap()).patch
    assert {o["path"] for o in patch} == {
        "/metadata/annotations/migops.io~1config-digest",
        "/metadata/annotations/migops.io~1validated-gpus",
    }


def test_rotation_in_a_directory(tmp_path) -> None:
    store = DirectoryStore(tmp_path)
    published: list[bytes] = []
    first = rotate(store, dns_names=["svc.ns.svc"], ip_addresses=["127.0.0.1"], publish=published.append)
    assert first.steps[0] == "created CA" and len(published) == 1
    pem = (tmp_path / "tls.pem").read_bytes()
    assert b"PRIVATE KEY" in pem and b"CERTIFICATE" in pem
    assert rotate(store, dns_names=["svc.ns.svc"], ip_addresses=["127.0.0.1"], publish=published.append).steps == []
    # Within the renewal window: a new serving certificate from the same CA, nothing published.
    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=70)
    renewed = rotate(store, dns_names=["svc.ns.svc"], ip_addresses=["127.0.0.1"], publish=published.append, now=later)
    assert renewed.steps == ["issued serving certificate"] and len(published) == 1
    assert remaining(store.load().serving.cert_pem) > dt.timedelta(days=80)
    forced = rotate(store, dns_names=["svc.ns.svc"], ip_addresses=["127.0.0.1"], publish=published.append, force=True)
    assert len(certificates(published[-1])) == 2 and forced.material.ca is not None
    rotate(store, dns_names=["svc.ns.svc"], ip_addresses=["127.0.0.1"], publish=published.append)
    assert len(certificates(published[-1])) == 1
    cert = x509.load_pem_x509_certificate(store.load().serving.cert_pem)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(i) for i in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]


def test_several_workers_count_in_the_shared_directory(tmp_path) -> None:
    """`migops webhook --workers 2` names the directory after importing migops.webhook.server; the
    workers' counters must still be multi-process ones (prometheus_client picks that at its import)."""
    import subprocess
    import sys

    code = (
        "import os, sys; os.environ['MIGOPS_WEBHOOK_TMP'] = sys.argv[1]\n"
        "from migops.webhook import server\n"
        "server.prepare_metrics_dir(2)\n"
        "from migops.webhook import metrics\n"
        "metrics.child(metrics.REQUESTS, 'validate', 'ConfigMap', 'allowed').inc()\n"
        "print(metrics.exposition()[0].decode())\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, check=True)
    assert 'migops_webhook_requests_total{endpoint="validate",kind="ConfigMap",result="allowed"} 1.0' in out.stdout
    assert list(tmp_path.glob("migops-webhook-metrics-*/counter_*.db"))


def test_bad_request_lines_are_rate_limited(caplog) -> None:
    import logging

    from migops.webhook.ratelog import RateLimitedLog

    now = [0.0]
    limited = RateLimitedLog(logging.getLogger("ratelog-test"), per_interval=3, interval=10.0, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="ratelog-test"):
        for i in range(1000):
            limited.warning("bad request %d", i)
        assert [r.getMessage() for r in caplog.records] == ["bad request 0", "bad request 1", "bad request 2"]
        now[0] = 10.0
        limited.warning("bad request %d", 1000)
    assert caplog.records[-1].getMessage() == "bad request 1000 (997 similar lines dropped)"


def test_gpu_counts_and_lists_beyond_any_node_are_a_problem_not_a_billion_gpus() -> None:
    from migops.api.objects import NodeFacts

    huge = {
        "metadata": {
            "name": "n",
            "labels": {"migops.io/gpu.device-id": "0x233010DE", "nvidia.com/gpu.count": "999999999"},
        }
    }
    view = NodeFacts.from_obj(huge)
    assert view.gpus == () and "more than the 16 GPUs" in (view.gpu_problem or "")
    listed = {"metadata": {"name": "n", "annotations": {"migops.io/gpus": ",".join(["0x233010DE"] * 5000)}}}
    assert "more than the 16 GPUs" in (NodeFacts.from_obj(listed).gpu_problem or "")
    labelled = {
        **huge,
        "metadata": {
            **huge["metadata"],
            "labels": {**huge["metadata"]["labels"], "nvidia.com/mig.config": "all-balanced"},
        },
    }
    verdict = nodelabels.validate(req(review(labelled, operation="UPDATE", old=huge, kind="Node")), snap())
    assert verdict.allowed and "geometry not checked" in " ".join(verdict.warnings)

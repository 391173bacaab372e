"""Nodes a dynamic MIG manager owns (migops.kube.owners): one selector, read by the webhook (denies the
config label, naming the owner), the reconciler (skips them, with the reason in status)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "webhook"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from gitrepo import CONFIG_YAML, nodes_yaml
from webhook_helpers import CM_NS, configmap, review

from migops.api.objects import MigSettings
from migops.gitops.desired import resolve
from migops.gitops.repo import load_repo
from migops.kube import owners
from migops.reconciler import status
from migops.reconciler.plan import SKIPPED, WAITING, plan
from migops.webhook import nodelabels
from migops.webhook.admission import parse_review
from migops.webhook.state import Snapshot


def test_selector_syntax_and_owner_names() -> None:
    d = owners.from_text(owners.DEFAULT_SELECTOR)
    assert d.owner({owners.OWNER_LABEL: "hami"}) == "hami"
    assert d.owner({"pool": "a"}) is None
    custom = owners.from_text("pool in (dyn, x), !frozen, tier=gpu, zone!=b")
    assert (
        custom.owner({"pool": "dyn", "tier": "gpu"})
        == "a dynamic MIG manager (nodes matching pool in (dyn, x), !frozen, tier=gpu, zone!=b)"
    )
    assert custom.owner({"pool": "dyn", "tier": "gpu", "frozen": "1"}) is None
    assert custom.owner({"pool": "dyn", "tier": "gpu", "zone": "b"}) is None
    assert owners.from_text("").owner({owners.OWNER_LABEL: "hami"}) is None
    with pytest.raises(owners.SelectorError, match="MIGOPS_DYNAMIC_MIG_SELECTOR"):
        owners.parse("a in b")


def test_configured_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    owners.configured.cache_clear()
    monkeypatch.setenv(owners.ENV, "dyn=yes")
    try:
        assert owners.node_owner({"metadata": {"labels": {"dyn": "yes"}}}) is not None
        assert owners.node_owner({"metadata": {"labels": {owners.OWNER_LABEL: "das"}}}) is None
    finally:
        owners.configured.cache_clear()


NODE_LABELS = {"migops.io/gpu.device-id": "0x233010DE", "nvidia.com/gpu.count": "8"}
POLICY = {
    "metadata": {"name": "cluster-policy", "creationTimestamp": "2026-01-01T00:00:00Z"},
    "spec": {"mig": {"strategy": "mixed"}},
    "status": {"namespace": CM_NS},
}
DEFAULT_CONFIG = (Path(__file__).resolve().parents[2] / "examples" / "nvidia-default-config.yaml").read_text()


def _node(name: str, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {**NODE_LABELS, **labels}}}


def test_webhook_denies_the_config_label_on_an_owned_node_naming_the_owner() -> None:
    snap = Snapshot.build(1, [], [POLICY], [configmap(DEFAULT_CONFIG)])
    owned = _node("n1", **{owners.OWNER_LABEL: "dra-dynamic-mig", "nvidia.com/mig.config": "all-1g.10gb"})
    req = parse_review(json.loads(json.dumps(review(owned, kind="Node"))))
    v = nodelabels.validate(req, snap)
    assert not v.allowed and v.code == 403
    assert "owned by dra-dynamic-mig" in v.message and "dynamic-mig-owner" in v.rules
    free = _node("n2", **{"nvidia.com/mig.config": "all-1g.10gb"})
    assert nodelabels.validate(parse_review(json.loads(json.dumps(review(free, kind="Node")))), snap).allowed
    # Removing the label from an owned node is allowed (it hands the GPUs over).
    bare = _node("n1", **{owners.OWNER_LABEL: "dra-dynamic-mig"})
    rm = parse_review(json.loads(json.dumps(review(bare, kind="Node", operation="UPDATE", old=owned))))
    assert nodelabels.validate(rm, snap).allowed
    # The owner label is part of the cached verdict's key.
    assert nodelabels.cache_key(req) != nodelabels.cache_key(
        parse_review(
            json.loads(
                json.dumps(
                    review(
                        {
                            **owned,
                            "metadata": {
                                **owned["metadata"],
                                "labels": {**NODE_LABELS, "nvidia.com/mig.config": "all-1g.10gb"},
                            },
                        },
                        kind="Node",
                    )
                )
            )
        )
    )


def test_reconciler_skips_owned_nodes_with_the_reason_in_status() -> None:
    spec = load_repo(
        {
            "config.yaml": CONFIG_YAML.encode(),
            "nodes.yaml": nodes_yaml("  - nodeSelector: {matchLabels: {pool: p}}\n    config: all-1g.10gb").encode(),
        },
        "",
        "rev1",
    )
    nodes = {f"n{i}": _node(f"n{i}", pool="p", **{"nvidia.com/mig.config": "all-disabled"}) for i in range(3)}
    nodes["n1"]["metadata"]["labels"][owners.OWNER_LABEL] = "hami"
    d = resolve(spec, nodes, MigSettings(strategy="mixed"))
    p = plan(d, nodes, None)
    assert "n1" not in dict(p.writes)
    (skipped,) = [s for s in p.nodes if s.phase == SKIPPED]
    assert skipped.name == "n1" and "owned by hami" in skipped.message
    assert p.counts[SKIPPED] == 1 and p.counts[WAITING] == 2
    assert status.summary(p).skipped == 1
    assert [e.name for e in status.node_entries(p)][-1] == "n1"

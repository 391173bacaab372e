"""The pure planner: waves, done-ness by digest or by mig-manager's transition, halts, drift, prune."""

from __future__ import annotations

from typing import Any

from gitrepo import CONFIG_YAML, nodes_yaml

from migops.api.objects import MigSettings
from migops.gitops.desired import resolve
from migops.gitops.repo import load_repo
from migops.reconciler.plan import (
    DRIFTED,
    FAILED,
    IN_SYNC,
    PROGRESSING,
    SKIPPED,
    WAITING,
    max_unavailable,
    owns_config_label,
    plan,
    trim_for_reconciler,
    with_config_label,
)


def _desired(max_unavailable: object = 2, prune: bool | None = None, n: int = 6):
    spec = load_repo(
        {
            "config.yaml": CONFIG_YAML.encode(),
            "nodes.yaml": nodes_yaml(
                "  - nodeSelector: {matchLabels: {pool: p}}\n    config: all-1g.10gb",
                max_unavailable=max_unavailable,
                prune=prune,
            ).encode(),
        },
        "",
        "rev1",
    )
    return resolve(spec, {f"n{i}": _node(f"n{i}") for i in range(n)}, MigSettings(strategy="mixed"))


def _node(
    name: str,
    label: str | None = "all-disabled",
    state: str | None = None,
    digest: str | None = None,
    owned: bool = False,
    pool: str | None = "p",
    reason: str | None = None,
) -> dict:
    labels = {"migops.io/gpu.device-id": "0x233010DE", "nvidia.com/gpu.count": "8"}
    if pool:
        labels["pool"] = pool
    if label is not None:
        labels["nvidia.com/mig.config"] = label
    if state is not None:
        labels["nvidia.com/mig.config.state"] = state
    ann = {}
    if digest:
        ann["migops.io/mig.config.digest"] = digest
    if reason:
        ann["migops.io/mig.config.reason"] = reason
    node = {"metadata": {"name": name, "labels": labels, "annotations": ann}}
    return with_config_label(node, label) if owned else node


def test_first_wave_is_bounded_and_ordered() -> None:
    d = _desired(2)
    nodes = {f"n{i}": _node(f"n{i}") for i in range(6)}
    p = plan(d, nodes, None)
    assert p.configmap_changed and p.writes == (("n0", "all-1g.10gb"), ("n1", "all-1g.10gb"))
    assert p.counts == {IN_SYNC: 0, PROGRESSING: 0, WAITING: 6, FAILED: 0, DRIFTED: 0, SKIPPED: 0}


def test_a_node_counts_until_success_for_the_assigned_digest() -> None:
    d = _desired(1)
    digest = d.targets["n0"].digest
    base = {f"n{i}": _node(f"n{i}") for i in range(6)}
    # given, no report yet: busy; success but for older content: busy; success for this digest: done.
    for n0, busy in (
        (_node("n0", "all-1g.10gb", owned=True), True),
        (_node("n0", "all-1g.10gb", "success", "sha256:old", owned=True), True),
        (_node("n0", "all-1g.10gb", "pending", owned=True), True),
        (_node("n0", "all-1g.10gb", "success", digest, owned=True), False),
    ):
        p = plan(d, {**base, "n0": n0}, CONFIG_YAML)
        assert (p.writes == ()) is busy, (n0, p.writes)


def test_mig_manager_nodes_wait_for_the_state_to_leave_success() -> None:
    d = _desired(1)
    n0 = _node("n0", "all-1g.10gb", "success", owned=True)  # no migops annotations: mig-manager
    nodes = {**{f"n{i}": _node(f"n{i}") for i in range(6)}, "n0": n0}
    assert plan(d, nodes, CONFIG_YAML, awaiting=frozenset({"n0"})).writes == ()
    assert plan(d, nodes, CONFIG_YAML).writes == (("n1", "all-1g.10gb"),)


def test_failure_halts_until_acknowledged_and_names_the_node() -> None:
    d = _desired(3)
    nodes = {f"n{i}": _node(f"n{i}") for i in range(6)}
    nodes["n2"] = _node("n2", "all-1g.10gb", "failed", owned=True, reason="NVML: in use")
    p = plan(d, nodes, CONFIG_YAML)
    assert p.writes == () and [h.name for h in p.halted] == ["n2"] and p.halted[0].message == "NVML: in use"
    p = plan(d, nodes, CONFIG_YAML, acknowledged=frozenset({"n2"}))
    assert p.halted == () and len(p.writes) == 3 and p.counts[FAILED] == 1
    # A node that failed on some other config is simply given the new one, first.
    nodes["n2"] = _node("n2", "all-3g.40gb", "failed")
    assert plan(d, nodes, CONFIG_YAML).writes[0] == ("n2", "all-1g.10gb")


def test_drift_unmanaged_nodes_and_prune() -> None:
    d = _desired("100%", prune=True)
    nodes = {f"n{i}": _node(f"n{i}", "all-1g.10gb", "success", d.targets["n0"].digest, owned=True) for i in range(6)}
    nodes["n3"] = _node("n3", "all-3g.40gb", "success", owned=False)  # hand-edited
    nodes["gone"] = _node("gone", "all-1g.10gb", owned=True, pool=None)  # left every assignment
    nodes["other"] = _node("other", "all-3g.40gb", owned=False, pool=None)  # never ours: left alone
    p = plan(d, nodes, CONFIG_YAML, reached={"n3": "all-1g.10gb"})
    assert p.writes == (("n3", "all-1g.10gb"),) and p.drift == frozenset({"n3"})
    assert p.prunes == ("gone",)
    assert not plan(_desired("100%"), nodes, CONFIG_YAML, reached={}).prunes


def test_max_unavailable() -> None:
    assert [max_unavailable(v, 2000) for v in (1, 5, "25%", "100%", "1%")] == [1, 5, 500, 2000, 20]
    assert max_unavailable("10%", 3) == 1  # never 0: a rollout must move


def test_trim_for_reconciler_keeps_what_is_read_and_ownership() -> None:
    node = {
        "metadata": {
            "name": "n",
            "uid": "u",
            "resourceVersion": "7",
            "labels": {"a": "b"},
            "annotations": {"migops.io/mig.config.digest": "d", "big": "x" * 1000},
            "managedFields": [
                {
                    "manager": "migops-reconciler",
                    "operation": "Apply",
                    "fieldsV1": {"f:metadata": {"f:labels": {"f:nvidia.com/mig.config": {}}}},
                }
            ],
        },
        "status": {"images": ["..."] * 50},
    }
    t = trim_for_reconciler(node)
    ours = [
        {
            "manager": "migops-reconciler",
            "operation": "Apply",
            "time": None,
            "fieldsV1": {"f:metadata": {"f:labels": {"f:nvidia.com/mig.config": {}}}},
        }
    ]
    assert t == {
        "metadata": {
            "name": "n",
            "uid": "u",
            "resourceVersion": "7",
            "labels": {"a": "b"},
            "annotations": {"migops.io/mig.config.digest": "d"},
            "managedFields": ours,
        }
    }
    assert owns_config_label(t)
    # Another manager's entry, or ours without the label, is not kept: not ours.
    node["metadata"]["managedFields"] = [
        {
            "manager": "kubectl-label",
            "operation": "Update",
            "fieldsV1": {"f:metadata": {"f:labels": {"f:nvidia.com/mig.config": {}}}},
        }
    ]
    assert not owns_config_label(trim_for_reconciler(node))
    assert trim_for_reconciler(node)["metadata"]["managedFields"] == []


def test_a_drifted_node_is_not_in_sync_and_takes_a_slot() -> None:
    d = _desired(1, n=2)
    digest = d.targets["n0"].digest
    nodes = {n: _node(n, "all-1g.10gb", "success", digest, owned=True) for n in ("n0", "n1")}
    nodes["n0"]["metadata"]["annotations"]["migops.io/mig.drift"] = "gpu 1: missing 1g.10gb@3"
    p = plan(d, nodes, CONFIG_YAML)
    drifted = next(s for s in p.nodes if s.name == "n0")
    assert drifted.phase == DRIFTED and "gpu 1: missing 1g.10gb@3" in drifted.message
    assert p.counts[IN_SYNC] == 1 and not p.converged and p.unavailable == 1


def test_managed_by_is_written_on_assigned_nodes_and_released_from_unmanaged_ones() -> None:
    d = _desired(6, n=3)
    digest = d.targets["n0"].digest
    nodes = {n: _node(n, "all-1g.10gb", "success", digest, owned=True) for n in ("n0", "n1", "n2")}
    nodes["n1"]["metadata"]["annotations"]["migops.io/managed-by"] = "ns/ms"
    nodes["n2"]["metadata"]["annotations"]["migops.io/managed-by"] = "ns/ms"
    nodes["n2"]["metadata"]["labels"]["migops.io/unmanaged"] = "true"
    p = plan(d, nodes, CONFIG_YAML, owner="ns/ms")
    assert p.annotate == (("n0", "all-1g.10gb"),)  # its label is right, the annotation is missing
    assert p.releases == ("n2",) and p.writes == ()  # n2: left alone but for the annotation
    assert [s.name for s in p.nodes] == ["n0", "n1"]


def test_resolving_is_redone_only_when_a_node_changes_what_it_reads() -> None:
    from migops.reconciler.changes import node_change
    from migops.reconciler.memo import ResolveMemo

    def event(kind: str, labels: dict[str, str], annotations: dict[str, str]) -> list[tuple[int, Any]]:
        return [(1, node_change(kind, {"metadata": {"name": "n0", "labels": labels, "annotations": annotations}}))]

    settings = MigSettings(strategy="mixed")
    memo = ResolveMemo().observed(event("ADDED", {"pool": "p", "nvidia.com/mig.config": "a"}, {}))
    memo = memo.put(memo.key("rev1", "", settings), "resolved")  # type: ignore[arg-type]
    # A rollout's events: the config and state labels, the agent's digest: the answer stands.
    memo = memo.observed(
        event(
            "MODIFIED",
            {"pool": "p", "nvidia.com/mig.config": "b", "nvidia.com/mig.config.state": "pending"},
            {"migops.io/mig.config.digest": "sha256:x"},
        )
    )
    assert memo.get(memo.key("rev1", "", settings)) == "resolved"
    # A label a selector may read, the GPUs, a node gone: resolved again.
    for kind, labels, notes in (
        ("MODIFIED", {"pool": "q"}, {}),
        ("MODIFIED", {"pool": "q"}, {"migops.io/gpus": "0x233010DE"}),
        ("DELETED", {}, {}),
    ):
        memo = memo.put(memo.key("rev1", "", settings), "resolved")  # type: ignore[arg-type]
        memo = memo.observed(event(kind, labels, notes))
        assert memo.get(memo.key("rev1", "", settings)) is None

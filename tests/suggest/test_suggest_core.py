"""The decision core: demand and nodes in, a proposal out -- the hard rules, the objective's order,
the policy, unservable demand named with its reason, determinism."""

from __future__ import annotations

import pytest
from gitrepo import CONFIG_YAML, nodes_yaml
from suggest_fixtures import ONE_G, node, pod, repo

from migops.api.objects import MigSettings
from migops.gitops.repo import RepoError
from migops.suggest.run import Cluster, suggest

MIXED = MigSettings(strategy="mixed")
POOL = "  - nodeSelector: {matchLabels: {pool: ml}}\n    config: all-1g.10gb"

# GPU 0 keeps seven 1g.10gb, GPU 1 takes two 3g.40gb: one GPU reconfigured instead of two.
SPLIT = (
    CONFIG_YAML
    + """\
  half-3g:
    - devices: [0]
      mig-enabled: true
      mig-devices:
        "1g.10gb": 7
    - devices: [1]
      mig-enabled: true
      mig-devices:
        "3g.40gb": 2
"""
)


def run(nodes: list[dict], pods: list[dict], spec=None, settings: MigSettings = MIXED):
    return suggest(spec or repo(), Cluster({n["metadata"]["name"]: n for n in nodes}, pods, settings))


def moves(out) -> dict[str, str]:
    return {c.node: c.config for c in out.proposal.changes}


def test_an_instance_a_running_pod_uses_is_never_destroyed() -> None:
    nodes = [node("n1", [ONE_G], pool="ml"), node("n2", [ONE_G], pool="ml")]
    pods = [pod("run", "nvidia.com/mig-1g.10gb", node="n1"), pod("a"), pod("b"), pod("c")]
    out = run(nodes, pods)
    assert moves(out) == {"n2": "all-3g.40gb"}  # n1 would lose the running pod's instance
    assert sorted(p.demand.name for p in out.proposal.placed) == ["a", "b"]
    assert [u.demand.name for u in out.proposal.unserved] == ["c"]
    assert out.proposal.optimal
    # Alone, the busy node is left as it is and the pods are named with the reason.
    alone = run(nodes[:1], pods)
    assert alone.proposal.changes == ()
    assert {u.demand.name for u in alone.proposal.unserved} == {"a", "b", "c"}
    assert all("in use" in u.reason for u in alone.proposal.unserved), alone.proposal.unserved


def test_a_node_without_a_published_layout_and_pods_on_it_is_not_changed() -> None:
    busy = node("n1", [ONE_G], pool="ml")
    del busy["metadata"]["annotations"]["migops.io/mig.layout"]
    out = run([busy], [pod("run", "nvidia.com/mig-1g.10gb", node="n1"), pod("a")])
    assert out.proposal.changes == ()
    free = node("n1", [ONE_G], pool="ml")
    del free["metadata"]["annotations"]["migops.io/mig.layout"]
    assert moves(run([free], [pod("a")])) == {"n1": "all-3g.40gb"}


def test_higher_priority_is_served_first() -> None:
    pods = [pod("low1", priority=0), pod("low2", priority=0), pod("high", "nvidia.com/mig-2g.20gb", priority=100)]
    # One node: all-3g.40gb serves two low pods, five-1g-one-2g the high one; priority decides.
    out = run([node("n1", [ONE_G], pool="ml")], pods)
    assert moves(out) == {"n1": "five-1g-one-2g"}
    assert [p.demand.name for p in out.proposal.placed] == ["high"]
    assert {u.demand.name for u in out.proposal.unserved} == {"low1", "low2"}


def test_fewest_gpus_then_fewest_nodes() -> None:
    spec = repo(config=SPLIT)
    two = [ONE_G, ONE_G]
    out = run([node("n1", two, pool="ml"), node("n2", two, pool="ml")], [pod("a"), pod("b")], spec)
    # half-3g reconfigures one GPU of one node; all-3g.40gb would touch two.
    assert moves(out) == {"n1": "half-3g"}
    assert [c.option.gpus for c in out.proposal.changes] == [(1,)]
    assert out.proposal.changes[0].option.kept == 0 and out.proposal.changes[0].option.created == 2
    # Demand already served as things are: nothing changes at all.
    ready = run([node("n1", two, pool="ml")], [pod("x", "nvidia.com/mig-1g.10gb")], spec)
    assert ready.proposal.changes == () and len(ready.proposal.placed) == 1
    assert not ready.changed


def test_unservable_demand_is_named_with_why() -> None:
    pods = [
        pod("a100-only", "nvidia.com/mig-3g.20gb"),  # an A100-40GB profile on an H100-only cluster
        pod("nowhere", selector={"pool": "other"}),
        pod("ok"),
    ]
    out = run([node("n1", [ONE_G], pool="ml")], pods)
    why = {u.demand.name: u.reason for u in out.proposal.unserved}
    assert "no GPU model" in why["a100-only"] and "3g.20gb" in why["a100-only"]
    assert "matches no GPU node" in why["nowhere"]
    assert [p.demand.name for p in out.proposal.placed] == ["ok"]


def test_the_policy_limits_configs_and_nodes() -> None:
    policy = "suggest:\n  maxNodes: 1\n  pools:\n    - nodeSelector: {matchLabels: {pool: ml}}\n      configs: [five-1g-one-2g]\n"
    spec = repo(nodes_yaml(POOL, extra=policy))
    nodes = [node("n1", [ONE_G], pool="ml"), node("n2", [ONE_G], pool="ml")]
    out = run(nodes, [pod("a"), pod("b", "nvidia.com/mig-2g.20gb"), pod("c", "nvidia.com/mig-2g.20gb")], spec)
    why = {u.demand.name: u.reason for u in out.proposal.unserved}
    assert "policy" in why["a"] and "forbids" in why["a"]  # all-3g.40gb is not in the pool's list
    assert len(out.proposal.changes) == 1  # maxNodes: 1, though two nodes would serve both 2g pods
    assert set(moves(out).values()) == {"five-1g-one-2g"}
    assert (
        len(out.proposal.placed) == 1
        and "at most 1 nodes" in why[({"b", "c"} - {p.demand.name for p in out.proposal.placed}).pop()]
    )


def test_a_node_no_pool_matches_is_never_changed() -> None:
    policy = "suggest:\n  pools:\n    - nodes: [n2]\n      configs: [all-3g.40gb]\n"
    spec = repo(nodes_yaml(POOL, extra=policy))
    out = run([node("n1", [ONE_G], pool="ml"), node("n2", [ONE_G], pool="ml")], [pod("a")], spec)
    assert moves(out) == {"n2": "all-3g.40gb"}


def test_the_single_strategy_reads_the_product_selector() -> None:
    single = MigSettings(strategy="single")
    n = node("n1", [ONE_G], pool="ml")
    n["metadata"]["labels"] = {
        k: v for k, v in n["metadata"]["labels"].items() if not k.startswith("nvidia.com/mig-")
    } | {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb"}
    n["status"]["allocatable"] = {"nvidia.com/gpu": "7"}
    want = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-MIG-3g.40gb"}
    pods = [pod("a", "nvidia.com/gpu", selector=want), pod("whole", "nvidia.com/gpu")]  # a whole GPU: no MIG demand
    out = run([n], pods, repo(nodes_yaml(POOL, strategy="single")), single)
    assert [d.name for d in out.demands] == ["a"]
    assert moves(out) == {"n1": "all-3g.40gb"}
    assert [p.profile for p in out.proposal.placed] == ["3g.40gb"]
    # A running pod under single: every instance counts as used; the node stays.
    busy = run([n], [*pods, pod("run", "nvidia.com/gpu", node="n1")], repo(nodes_yaml(POOL, strategy="single")), single)
    assert busy.proposal.changes == ()


def test_no_pending_mig_demand_proposes_nothing() -> None:
    going = pod("going")
    going["metadata"]["deletionTimestamp"] = "2026-12-01T20:00:00Z"  # being deleted: no longer waiting
    pods = [pod("run", "nvidia.com/mig-1g.10gb", node="n1"), pod("cpu", "cpu"), going]
    out = run([node("n1", [ONE_G], pool="ml")], pods)
    assert out.proposal is None and not out.changed and out.patch() == ""


def test_same_input_same_proposal() -> None:
    nodes = [node(f"n{i}", [ONE_G, ONE_G], pool="ml") for i in range(6)]
    pods = [pod(f"p{i}", ("nvidia.com/mig-3g.40gb", "nvidia.com/mig-2g.20gb")[i % 2]) for i in range(9)]
    first = run(nodes, pods)
    for _ in range(2):
        again = run(list(reversed(nodes)), list(reversed(pods)))
        assert again.proposal.changes == first.proposal.changes
        assert again.proposal.placed == first.proposal.placed
        assert again.nodes_text == first.nodes_text


def test_a_repo_that_does_not_validate_is_refused() -> None:
    spec = repo(nodes_yaml("  - nodes: [n1]\n    config: all-3g.40gb", strategy="single"))
    with pytest.raises(RepoError) as exc:
        run([node("n1", [ONE_G], pool="ml")], [pod("a")], spec)
    assert [p.problem.rule for p in exc.value.problems] == ["strategy-mismatch"]


def test_the_suggest_policy_is_checked_like_the_rest_of_nodes_yaml() -> None:
    bad = {
        "suggest:\n  maxNodes: 0\n": ("suggest.maxNodes", "invalid-maxnodes"),
        "suggest:\n  newConfig: true\n": ("suggest.newConfig", "unexpected-field"),
        "suggest:\n  maxPodsPerNamespace: 0\n": ("suggest.maxPodsPerNamespace", "invalid-maxpodspernamespace"),
        "suggest:\n  claimsWithoutPods: 1\n": ("suggest.claimsWithoutPods", "invalid-claimswithoutpods"),
        "suggest:\n  trustedPriorityNamespaces: kube-system\n": (
            "suggest.trustedPriorityNamespaces",
            "invalid-trustedprioritynamespaces",
        ),
        "suggest:\n  pools:\n    - configs: [nope]\n      nodes: [n1]\n": (
            "suggest.pools[0].configs[0]",
            "config-not-found",
        ),
        "suggest:\n  pools:\n    - configs: [all-3g.40gb]\n": ("suggest.pools[0]", "one-target"),
        "suggest:\n  pools:\n    - configs: [all-3g.40gb]\n      nodeSelector: {matchLabels: {'bad key!': x}}\n": (
            "suggest.pools[0].nodeSelector.matchLabels",
            "schema-pattern",
        ),
    }
    for extra, (path, rule) in bad.items():
        with pytest.raises(RepoError) as exc:
            repo(nodes_yaml(POOL, extra=extra))
        found = [(p.problem.path, p.problem.rule) for p in exc.value.problems if p.severity == "error"]
        assert (path, rule) in found or any(r == rule and p.startswith(path) for p, r in found), (extra, found)


def test_a_whole_gpu_in_use_is_never_switched_to_mig() -> None:
    # GPU 0 whole (MIG off), GPU 1 in 1g.10gb; a pod holds a whole GPU: enabling MIG on GPU 0 would end it.
    n = node("n1", [[], ONE_G], pool="ml")
    n["status"]["allocatable"]["nvidia.com/gpu"] = "1"
    pods = [pod("whole", "nvidia.com/gpu", node="n1"), pod("a")]
    out = run([n], pods)
    assert out.proposal.changes == ()
    assert "whole GPUs" in out.proposal.unserved[0].reason, out.proposal.unserved
    assert moves(run([n], pods[1:])) == {"n1": "all-3g.40gb"}  # without it, the change is fine

"""Each unserved pod's reason names the rule that actually stops it, checked by brute force on random
small clusters: the pod alone is servable by the options the policy allows exactly when the rule is
no-room; else it becomes servable once the forbidden configs are allowed (policy), or only once the
unsafe ones are too (in-use); else the earlier rules (profile, selector, taints, resources) hold as
stated. Counts included: a pod needing 2 x 2g.20gb is not told that a config offering one would do."""

from __future__ import annotations

import random

from gitrepo import CONFIG_YAML, nodes_yaml
from suggest_fixtures import ONE_G, node, pod, repo

from migops.api.objects import MigSettings
from migops.gitops.desired import FitCache
from migops.suggest.model import Demand, NodeSupply, Rule
from migops.suggest.options import node_options
from migops.suggest.run import Cluster, suggest

MIXED = MigSettings(strategy="mixed")
TWO_2G = (
    CONFIG_YAML + '  one-2g:\n    - devices: all\n      mig-enabled: true\n      mig-devices:\n        "2g.20gb": 1\n'
)
PROFILES = ("nvidia.com/mig-1g.10gb", "nvidia.com/mig-2g.20gb", "nvidia.com/mig-3g.40gb", "nvidia.com/mig-3g.20gb")
TAINT = {"key": "gpu", "value": "x", "effect": "NoSchedule"}


def _cluster(rnd: random.Random) -> tuple[list[dict], list[dict], str]:
    nodes, pods = [], []
    for i in range(rnd.randint(1, 3)):
        n = node(f"n{i}", [ONE_G], pool=rnd.choice(("a", "b")))
        if rnd.random() < 0.3:
            n["spec"] = {"taints": [TAINT]}
        n["status"]["allocatable"] |= {"cpu": "64"}
        nodes.append(n)
        if rnd.random() < 0.4:
            pods.append(pod(f"run{i}", "nvidia.com/mig-1g.10gb", node=f"n{i}"))
    for j in range(rnd.randint(1, 8)):
        p = pod(f"p{j}", rnd.choice(PROFILES), rnd.choice((1, 1, 2, 3)), priority=rnd.choice((0, 5)))
        if rnd.random() < 0.4:
            p["spec"]["nodeSelector"] = {"pool": rnd.choice(("a", "b", "c"))}
        if rnd.random() < 0.5:
            p["spec"]["tolerations"] = [{"key": "gpu", "operator": "Exists"}]
        if rnd.random() < 0.1:
            p["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "100"}
        pods.append(p)
    policy = ""
    if rnd.random() < 0.5:
        policy = (
            "suggest:\n  pools:\n    - nodeSelector: {matchLabels: {pool: a}}\n      configs: [all-1g.10gb, one-2g]\n"
        )
    return nodes, pods, policy


def _serves(d: Demand, n: NodeSupply, free, labels) -> bool:
    return n.admits(d) and d.matches(labels) and any(free.get(p, 0) >= d.count for p in d.keys)


def _check(out, spec) -> int:
    cache, checked = FitCache(), 0
    policy = spec.nodes.suggest
    for u in out.proposal.unserved:
        d, allowed, forbidden, unsafe = u.demand, False, False, False
        for n in out.nodes:
            options, refused = node_options(n, spec, "mixed", spec.config.names(), cache)
            may = policy.allowed(n.name, n.labels)
            for o in options:
                ok = _serves(d, n, o.free, o.labels)
                if not o.changed or may is None or o.config in may:
                    allowed |= ok
                else:
                    forbidden |= ok
            unsafe |= any(r.in_use and _serves(d, n, r.offers, r.labels) for r in refused)
        assert allowed == (u.rule is Rule.NO_ROOM), (u, allowed)
        if not allowed:
            assert forbidden == (u.rule is Rule.POLICY), (u, forbidden)
        if not allowed and not forbidden:
            assert unsafe == (u.rule is Rule.IN_USE), (u, unsafe)
        if u.rule in (Rule.NO_CONFIG, Rule.IN_USE) and d.count > 1:
            assert f"{d.count} x" in u.reason or u.rule is Rule.IN_USE
        checked += 1
    return checked


def test_every_reason_is_the_rule_that_stops_the_pod() -> None:
    rnd = random.Random(43)
    seen: set[Rule] = set()
    checked = 0
    for _ in range(60):
        nodes, pods, policy = _cluster(rnd)
        spec = repo(
            nodes_yaml("  - nodeSelector: {matchLabels: {gpu: h100}}\n    config: all-1g.10gb", extra=policy), TWO_2G
        )
        out = suggest(spec, Cluster({n["metadata"]["name"]: n for n in nodes}, pods, MIXED))
        if out.proposal is not None:
            checked += _check(out, spec)
            seen |= {u.rule for u in out.proposal.unserved}
    assert checked > 100
    assert seen >= {
        Rule.NO_PROFILE,
        Rule.NODE_SELECTOR,
        Rule.TAINTS,
        Rule.RESOURCES,
        Rule.POLICY,
        Rule.IN_USE,
        Rule.NO_ROOM,
    }, seen


def test_two_devices_a_config_offers_one_of_is_no_config_not_in_use() -> None:
    """A pod needing 2 x 2g.20gb beside a running 1g.10gb pod: one-2g (one 2g.20gb) would destroy the
    instance in use, but it would not serve the pod anyway: no config offers two."""
    n = node("n1", [ONE_G], pool="a")
    spec = repo(nodes_yaml("  - nodes: [n1]\n    config: all-1g.10gb"), TWO_2G)
    pods = [pod("run", "nvidia.com/mig-1g.10gb", node="n1"), pod("two", "nvidia.com/mig-2g.20gb", 2)]
    out = suggest(spec, Cluster({"n1": n}, pods, MIXED))
    (u,) = out.proposal.unserved
    assert u.rule is Rule.NO_CONFIG and "2 x 2g.20gb" in u.reason, u


def test_a_selector_matching_only_under_an_unsafe_config_is_told_in_use() -> None:
    """Under single, a pod selects the product label of a geometry (…-MIG-3g.40gb) that only an unsafe
    change would bring: the change is what stops it, not its selector."""
    single = MigSettings(strategy="single")
    n = node("n1", [ONE_G], pool="a")
    n["metadata"]["labels"] = {k: v for k, v in n["metadata"]["labels"].items() if not k.startswith("nvidia.com/mig-")}
    n["metadata"]["labels"]["nvidia.com/gpu.product"] = "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb"
    n["status"]["allocatable"] = {"nvidia.com/gpu": "7"}
    want = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-MIG-3g.40gb"}
    pods = [pod("run", "nvidia.com/gpu", node="n1"), pod("a", "nvidia.com/gpu", selector=want)]
    spec = repo(nodes_yaml("  - nodes: [n1]\n    config: all-1g.10gb", strategy="single"))
    out = suggest(spec, Cluster({"n1": n}, pods, single))
    (u,) = out.proposal.unserved
    assert u.rule is Rule.IN_USE and "matches no GPU node" not in u.reason, u

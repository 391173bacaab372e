"""What the scheduler reads beside labels (taints, CPU and memory), DRA allocations as instances in use,
demand counted as the policy trusts it, and nodes grouped whatever labels no pod reads."""

from __future__ import annotations

from gitrepo import nodes_yaml
from suggest_fixtures import ONE_G, node, pod, repo

from migops.api.objects import MigSettings
from migops.mig import dra
from migops.mig.catalogue import catalogue
from migops.suggest.model import Rule
from migops.suggest.run import Cluster, suggest

MIXED = MigSettings(strategy="mixed")
POOL = "  - nodeSelector: {matchLabels: {pool: ml}}\n    config: all-1g.10gb"
THREE_G = [{"profile": "3g.40gb", "start": s, "size": 4, "compute": [3]} for s in (0, 4)]
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


def run(nodes: list[dict], pods: list[dict], spec=None, claims: list[dict] = ()):
    cluster = Cluster({n["metadata"]["name"]: n for n in nodes}, pods, MIXED, list(claims))
    return suggest(spec or repo(), cluster)


def moves(out) -> dict[str, str]:
    return {c.node: c.config for c in out.proposal.changes}


def rules(out) -> dict[str, Rule]:
    return {u.demand.name: u.rule for u in out.proposal.unserved}


def tainted(name: str, *taints: dict) -> dict:
    n = node(name, [ONE_G], pool="ml")
    n["spec"] = {"taints": list(taints)}
    return n


def tolerating(p: dict, *tolerations: dict) -> dict:
    p["spec"]["tolerations"] = list(tolerations)
    return p


def test_a_pod_goes_only_where_it_tolerates_the_taints() -> None:
    nodes = [tainted("n1", GPU_TAINT), tainted("n2", {"key": "spot", "effect": "PreferNoSchedule"})]
    out = run(nodes, [pod("a")])
    assert moves(out) == {"n2": "all-3g.40gb"}  # PreferNoSchedule only scores
    alone = run(nodes[:1], [pod("a"), tolerating(pod("b"), {"key": "nvidia.com/gpu", "operator": "Exists"})])
    assert moves(alone) == {"n1": "all-3g.40gb"} and [p.demand.name for p in alone.proposal.placed] == ["b"]
    assert rules(alone) == {"a": Rule.TAINTS}
    assert "nvidia.com/gpu=present:NoSchedule" in alone.proposal.unserved[0].reason
    everything = tolerating(pod("c"), {"operator": "Exists"})  # an empty key with Exists tolerates all
    assert [p.demand.name for p in run(nodes[:1], [everything]).proposal.placed] == ["c"]


def test_a_pod_asking_for_more_cpu_or_memory_than_any_node_has_is_named() -> None:
    n = node("n1", [ONE_G], pool="ml")
    n["status"]["allocatable"] |= {"cpu": "96", "memory": "1Ti"}
    big = pod("big")
    big["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "200", "memory": "1Gi"}
    fits = pod("fits")
    fits["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "95500m", "memory": "512Gi"}
    out = run([n], [big, fits])
    assert [p.demand.name for p in out.proposal.placed] == ["fits"]
    assert rules(out) == {"big": Rule.RESOURCES} and "200 CPU" in out.proposal.unserved[0].reason


def _allocated(name: str, node_name: str, profile: str, start: int, minor: int = 0) -> dict:
    gi = next(g for g in catalogue().resolve("0x233010DE").profiles if g.name == profile)
    device = dra.device_name(minor, gi, start)
    return {
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {"devices": {"requests": [{"name": "mig", "exactly": {"deviceClassName": "mig.nvidia.com"}}]}},
        "status": {
            "allocation": {
                "devices": {"results": [{"driver": dra.DRIVER, "pool": node_name, "device": device, "request": "mig"}]}
            }
        },
    }


def test_an_instance_an_allocated_claim_holds_is_never_destroyed() -> None:
    """A running pod holds the 3g.40gb at slice 4 through an allocated ResourceClaim; pending 1g.10gb
    pods would have the node all-1g.10gb: refused, the instance is in use."""
    n = node("n1", [THREE_G], config="all-3g.40gb", pool="ml")
    spec = repo(nodes_yaml("  - nodes: [n1]\n    config: all-3g.40gb"))
    pods = [pod(f"p{i}", "nvidia.com/mig-1g.10gb") for i in range(4)]
    free = run([n], pods, spec)
    assert set(moves(free)) == {"n1"} and len(free.proposal.placed) == 4  # without the claim, it changes
    held = run([n], pods, spec, [_allocated("held", "n1", "3g.40gb", 4)])
    assert held.proposal.changes == ()
    assert set(rules(held).values()) == {Rule.IN_USE}
    assert "3g.40gb instance at slice 4" in held.proposal.unserved[0].reason
    # The claim holds one of the two 3g.40gb: a pending 3g.40gb pod gets the other, not the held one.
    out = run([n], [pod("a"), pod("b")], spec, [_allocated("held", "n1", "3g.40gb", 4)])
    assert [p.demand.name for p in out.proposal.placed] == ["a"] and rules(out) == {"b": Rule.NO_ROOM}


def test_a_system_priority_counts_only_where_the_policy_trusts_it() -> None:
    """An unprivileged namespace's pod claiming system-node-critical's priority counts as 0 (and is
    named); kube-system's counts as it is."""
    nodes = [node("n1", [ONE_G], pool="ml")]
    rogue = pod("rogue", "nvidia.com/mig-7g.80gb", priority=2_000_001_000)
    spec = repo(config=_with_all_7g())
    pods = [rogue, *(pod(f"p{i}", priority=10) for i in range(2))]
    out = run(nodes, pods, spec)
    assert moves(out) == {"n1": "all-3g.40gb"}, out.proposal
    assert [n.ref for n in out.notes] == ["ml/rogue"] and "counted as 0" in out.notes[0].reason
    rogue["metadata"]["namespace"] = "kube-system"
    assert moves(run(nodes, pods, spec)) == {"n1": "all-7g.80gb"}


def test_a_namespace_counts_at_most_its_cap() -> None:
    spec = repo(nodes_yaml(POOL, extra="suggest:\n  maxPodsPerNamespace: 2\n"))
    pods = [pod(f"p{i}", priority=i) for i in range(4)] + [pod("other", namespace="team-b")]
    out = run([node("n1", [ONE_G], pool="ml"), node("n2", [ONE_G], pool="ml")], pods, spec)
    assert sorted(d.ref for d in out.demands) == ["ml/p2", "ml/p3", "team-b/other"]
    assert sorted(n.ref for n in out.notes) == ["ml/p0", "ml/p1"]


def _with_all_7g() -> str:
    from gitrepo import CONFIG_YAML

    return (
        CONFIG_YAML
        + '  all-7g.80gb:\n    - devices: all\n      mig-enabled: true\n      mig-devices:\n        "7g.80gb": 1\n'
    )


def test_hostnames_and_zones_no_pod_reads_do_not_split_nodes() -> None:
    """Every real node carries its own hostname: nodes alike but for labels no pending pod reads are one
    group to the solver; a pod that selects a hostname sets that node apart."""
    from migops.gitops.desired import FitCache, resolve
    from migops.suggest.options import node_options
    from migops.suggest.problem import build
    from migops.suggest.run import _read

    nodes = []
    for i in range(40):
        n = node(f"gpu-{i:02d}", [ONE_G, ONE_G], pool="ml")
        n["metadata"]["labels"] |= {
            "kubernetes.io/hostname": f"gpu-{i:02d}",
            "topology.kubernetes.io/zone": f"z{i % 3}",
        }
        nodes.append(n)
    pods = [pod(f"p{i}") for i in range(30)]
    spec, cache = repo(), FitCache()
    cluster = Cluster({n["metadata"]["name"]: n for n in nodes}, pods, MIXED)

    def groups(pods: list[dict]) -> int:
        read = _read(spec, Cluster(cluster.nodes, pods, MIXED), resolve(spec, cluster.nodes, MIXED, cache), ())
        options = {n.name: list(node_options(n, spec, "mixed", spec.config.names(), cache)[0]) for n in read.supply}
        return len(build(read.supply, options, read.demands).groups)

    assert groups(pods) == 1
    pinned = pod("pinned", selector={"kubernetes.io/hostname": "gpu-07"})
    assert groups([*pods, pinned]) == 2
    out = run(nodes, [*pods, pinned])
    assert out.proposal.optimal and len(out.proposal.placed) == 31
    assert len(out.proposal.changes) == 8 and "gpu-07" in moves(out)  # 4 pods per node (2 GPUs x 2)

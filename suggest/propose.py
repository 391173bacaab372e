"""From facts to a proposal: each node's options within the policy, demand no option can serve (and
why), then the solver. The one entry point the CLI and the reconciler call."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from migops.gitops.desired import FitCache
from migops.gitops.repo import RepoSpec
from migops.mig.gfd import mig_resources, resource_name
from migops.mig.strategy import Strategy
from migops.mig.text import listed
from migops.suggest.model import Demand, NodeSupply, Option, Proposal, Refused, Rule
from migops.suggest.options import node_options
from migops.suggest.problem import classes_of
from migops.suggest.scheduling import CPU, MEMORY, tolerated
from migops.suggest.solve import Limits, solve

_SHOWN = 3


def propose(
    spec: RepoSpec,
    nodes: Sequence[NodeSupply],
    demands: Sequence[Demand],
    strategy: Strategy | None,
    limits: Limits | None = None,
    cache: FitCache | None = None,
) -> Proposal:
    """The proposal for `demands` on `nodes` within nodes.yaml's `suggest` policy."""
    started = time.monotonic()
    cache = cache or FitCache()
    policy = spec.nodes.suggest
    limits = limits or Limits(max_nodes=policy.max_nodes)
    every = spec.config.names()
    seen = _Seen({}, {}, [])
    for node in nodes:
        options, no = node_options(node, spec, strategy, every, cache)
        seen.refused.extend(no)
        may = policy.allowed(node.name, node.labels)
        seen.allowed[node.name] = [o for o in options if not o.changed or may is None or o.config in may]
        seen.forbidden[node.name] = [o for o in options if o.changed and may is not None and o.config not in may]
    new_configs: dict[str, str] = {}
    if policy.new_configs:
        new_configs = _new_options(spec, nodes, demands, strategy, cache, seen.allowed, seen.refused)
    unservable = {d: why for pods in classes_of(demands) if (why := why_unservable(pods[0], nodes, seen)) for d in pods}
    proposal = solve(nodes, seen.allowed, demands, limits, unservable, started)
    used = {c.config: new_configs[c.config] for c in proposal.changes if c.option.new}
    return dataclasses.replace(proposal, seconds=time.monotonic() - started, new_configs=used)


@dataclass(frozen=True)
class _Seen:
    """Every node's options: those the policy allows, those it forbids, and the configs refused."""

    allowed: dict[str, list[Option]]
    forbidden: dict[str, list[Option]]
    refused: list[Refused]


def _new_options(
    spec: RepoSpec,
    nodes: Sequence[NodeSupply],
    demands: Sequence[Demand],
    strategy: Strategy | None,
    cache: FitCache,
    allowed: dict[str, list[Option]],
    refused: list[Refused],
) -> dict[str, str]:
    """`suggest.newConfigs`: a `suggest-<profile>` config for each pending profile no allowed option
    offers, added to the nodes' options (marked new) where the policy lets the node change at all."""
    from migops.api.migsync import CONFIG_FILE, NODES_FILE
    from migops.gitops.repo import RepoError, load_repo
    from migops.suggest.newconfigs import add_configs, candidates

    offered = {p for opts in allowed.values() for o in opts for p, n in o.free.items() if n > 0}
    found = candidates(nodes, demands, offered, spec.config.names())
    if not found:
        return {}
    try:
        text = add_configs(spec.config_text, found)
        files = {spec.file(CONFIG_FILE): text.encode(), spec.file(NODES_FILE): spec.nodes_text.encode()}
        grown = load_repo(files, spec.path, spec.revision)
    except (ValueError, RepoError):
        return {}  # config.yaml cannot take them in place: proposals keep to the existing configs
    for node in nodes:
        if spec.nodes.suggest.allowed(node.name, node.labels) == ():
            continue  # no pool matches it: never changed
        options, no = node_options(node, grown, strategy, sorted(found), cache)
        refused.extend(no)
        allowed[node.name] += [dataclasses.replace(o, new=True) for o in options if o.changed]
    return found


def _offers(d: Demand, free: Mapping[str, int]) -> bool:
    return any(free.get(p, 0) >= d.count for p in d.keys)


def why_unservable(d: Demand, nodes: Sequence[NodeSupply], seen: _Seen) -> tuple[Rule, str] | None:
    """Why no option at all can serve `d`, the first rule that stops it (docs/suggest.md); None when some
    allowed option can. Each rule is judged over every config a node could take, allowed or not, safe or
    not, so that a later rule is never told when an earlier one stops the pod."""
    if any(n.admits(d) and d.matches(o.labels) and _offers(d, o.free) for n in nodes for o in seen.allowed[n.name]):
        return None
    wanted = ", ".join(sorted(d.profiles))
    catalogue = mig_resources()
    models = {g for n in nodes for g in n.gpus.gpus}
    if not any(resource_name(p) in catalogue and set(catalogue[resource_name(p)][1]) & models for p in d.profiles):
        names = sorted({g.name for g in models})
        return (
            Rule.NO_PROFILE,
            f"no GPU model of the cluster's nodes has a {wanted} profile (they are: {', '.join(names) or 'none'})",
        )
    labels = {n.name: [*(o.labels for o in seen.allowed[n.name] + seen.forbidden[n.name])] for n in nodes}
    for r in seen.refused:
        if r.labels:
            labels[r.node].append(r.labels)
    selected = [n for n in nodes if any(d.matches(lb) for lb in labels[n.name])]
    if not selected:
        return Rule.NODE_SELECTOR, "its node selector matches no GPU node (under any config)"
    welcome = [n for n in selected if tolerated_by(d, n)]
    if not welcome:
        return Rule.TAINTS, f"it does not tolerate the taints of the GPU nodes it selects ({_taints(selected)})"
    able = {n.name for n in welcome if n.admits(d)}
    if not able:
        return Rule.RESOURCES, f"it asks for {_requests(d)}, more than any GPU node it may run on has allocatable"
    return _unsafe_or_forbidden(d, nodes, seen, able)


def _unsafe_or_forbidden(d: Demand, nodes: Sequence[NodeSupply], seen: _Seen, able: set[str]) -> tuple[Rule, str]:
    need = f"{d.count} x " if d.count > 1 else ""
    wanted = ", ".join(sorted(d.profiles))
    blocked = sorted(
        f"{o.config} on {n.name}"
        for n in nodes
        if n.name in able
        for o in seen.forbidden[n.name]
        if d.matches(o.labels) and _offers(d, o.free)
    )
    if blocked:
        return Rule.POLICY, f"the suggest policy in nodes.yaml forbids what would serve it ({listed(blocked, _SHOWN)})"
    unsafe = [r for r in seen.refused if r.in_use and r.node in able and d.matches(r.labels) and _offers(d, r.offers)]
    if unsafe:
        shown = listed([f"{r.config} on {r.node}" for r in unsafe], _SHOWN)
        return (
            Rule.IN_USE,
            f"the configs that would serve it would remove MIG devices in use ({shown}): {unsafe[0].reason}",
        )
    return Rule.NO_CONFIG, f"no config of config.yaml offers {need}{wanted} on a node it may run on"


def tolerated_by(d: Demand, node: NodeSupply) -> bool:
    return tolerated(node.taints, d.tolerations)


def _taints(nodes: Sequence[NodeSupply]) -> str:
    found = sorted({f"{t.key}{'=' + t.value if t.value else ''}:{t.effect}" for n in nodes for t in n.taints})
    return listed(found, _SHOWN)


def _requests(d: Demand) -> str:
    asked = dict(d.requests)
    parts = []
    if CPU in asked:
        parts.append(f"{asked[CPU] / 1000:g} CPU")
    if MEMORY in asked:
        parts.append(f"{asked[MEMORY] / 2**30:.3g} GiB of memory")
    return " and ".join(parts) or "resources"

"""From facts to a proposal: each node's options within the policy, demand no option can serve (and
why), then the solver. The one entry point the CLI and the reconciler call."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence

from migops.gitops.desired import FitCache
from migops.gitops.repo import RepoSpec
from migops.mig.gfd import mig_resources, resource_name
from migops.mig.strategy import Strategy
from migops.mig.text import listed
from migops.suggest.model import Demand, NodeFacts, Option, Proposal, Refused
from migops.suggest.options import node_options
from migops.suggest.solve import Limits, solve

_SHOWN = 3


def propose(
    spec: RepoSpec,
    nodes: Sequence[NodeFacts],
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
    allowed: dict[str, list[Option]] = {}
    forbidden: dict[str, list[Option]] = {}
    refused: list[Refused] = []
    for node in nodes:
        options, no = node_options(node, spec, strategy, every, cache)
        refused.extend(no)
        may = policy.allowed(node.name, node.labels)
        allowed[node.name] = [o for o in options if not o.changed or may is None or o.config in may]
        forbidden[node.name] = [o for o in options if o.changed and may is not None and o.config not in may]
    new_configs: dict[str, str] = {}
    if policy.new_configs:
        new_configs = _new_options(spec, nodes, demands, strategy, cache, allowed, refused)
    unservable = {d: why for d in demands if (why := _why_unservable(d, nodes, allowed, forbidden, refused))}
    # The time limit is the whole proposal's: what the options took comes off the solver's share.
    left = max(0.5, limits.time_limit - (time.monotonic() - started))
    proposal = solve(nodes, allowed, demands, dataclasses.replace(limits, time_limit=left), unservable)
    used = {c.config: new_configs[c.config] for c in proposal.changes if c.option.new}
    return dataclasses.replace(proposal, seconds=time.monotonic() - started, new_configs=used)


def _new_options(
    spec: RepoSpec,
    nodes: Sequence[NodeFacts],
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


def _offers(d: Demand, o: Option) -> bool:
    return d.matches(o.labels) and any(o.free.get(p, 0) >= d.count for p in d.keys)


def _why_unservable(
    d: Demand,
    nodes: Sequence[NodeFacts],
    allowed: dict[str, list[Option]],
    forbidden: dict[str, list[Option]],
    refused: Sequence[Refused],
) -> str:
    """Why no option at all can serve `d` (profile on no GPU model, selector matching no GPU node, the
    policy or an in-use instance in the way); "" when some option can."""
    if any(_offers(d, o) for n in nodes for o in allowed[n.name]):
        return ""
    wanted = ", ".join(sorted(d.profiles))
    catalogue = mig_resources()
    models = {g for n in nodes for g in n.gpus.gpus}
    if not any(resource_name(p) in catalogue and set(catalogue[resource_name(p)][1]) & models for p in d.profiles):
        names = sorted({g.name for g in models})
        return f"no GPU model of the cluster's nodes has a {wanted} profile (they are: {', '.join(names) or 'none'})"
    if not any(d.matches(o.labels) for n in nodes for o in allowed[n.name] + forbidden[n.name]):
        return "its node selector matches no GPU node (under any config)"
    blocked = sorted({f"{o.config} on {n.name}" for n in nodes for o in forbidden[n.name] if _offers(d, o)})
    if blocked:
        return f"the suggest policy in nodes.yaml forbids what would serve it ({listed(blocked, _SHOWN)})"
    unsafe = [r for r in refused if r.in_use and r.offers & d.keys]
    if unsafe:
        shown = listed([f"{r.config} on {r.node}" for r in unsafe], _SHOWN)
        return f"the configs that would serve it would remove MIG devices in use ({shown}): {unsafe[0].reason}"
    need = f"{d.count} x " if d.count > 1 else ""
    return f"no config of config.yaml offers {need}{wanted} on a node it may run on"

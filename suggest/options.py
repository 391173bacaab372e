"""What each node could become: every config it may take, judged by the MIG core and planned by the agent.

A config is an option for a node only when `migops.mig.fit` accepts it on the node's GPUs under the
cluster's strategy (the verdict the webhook and the reconciler give), and when the agent's own planner
(`migops.agent.plan.plan_gpu`, the diff apply it runs) keeps every GPU instance a running pod uses. What
a node offers once configured is `Fit.advertisement()`: GFD's resources and labels, as the MIG core
predicts them. No MIG rule is worked out here.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Mapping, Sequence
from functools import lru_cache

from migops.agent.backend import GpuInstance, GpuState
from migops.agent.plan import Desired, GpuPlan, desired_from_result, mig_device_names, plan_gpu
from migops.gitops.desired import FitCache
from migops.gitops.repo import RepoSpec
from migops.mig.catalogue import GpuModel
from migops.mig.fit import Fit
from migops.mig.gfd import GPU_PRODUCT_LABEL, GPU_RESOURCE, MIG_RESOURCE_PREFIX, Advertisement
from migops.mig.strategy import Strategy
from migops.mig.validate import GpuResult
from migops.suggest.model import WHOLE_GPU, NodeSupply, Option, Refused, profile_key

_SINGLE_MIG = "-MIG-"
_GFD_PREFIXES = (f"{GPU_RESOURCE}.", MIG_RESOURCE_PREFIX)  # the labels GFD rewrites with the geometry


def devices(resources: Mapping[str, int], labels: Mapping[str, str], strategy: Strategy | None) -> Counter[str]:
    """MIG devices by profile key from what a node advertises: `nvidia.com/mig-<profile>` under mixed;
    under single, `nvidia.com/gpu` of the profile in `gpu.product` (`<model>-MIG-<profile>`)."""
    out: Counter[str] = Counter()
    if strategy == "single":
        product = labels.get(GPU_PRODUCT_LABEL, "")
        if _SINGLE_MIG in product and not product.endswith("-MIG-INVALID"):
            out[product.split(_SINGLE_MIG, 1)[1]] = int(resources.get(GPU_RESOURCE, 0))
        return out
    for name, count in resources.items():
        if name.startswith(MIG_RESOURCE_PREFIX) and count > 0:
            out[name[len(MIG_RESOURCE_PREFIX) :]] = int(count)
    return out


def labels_after(labels: Mapping[str, str], advertisement: Advertisement) -> dict[str, str]:
    """The node's labels once the geometry is applied: GFD's geometry labels replaced by the new ones."""
    kept = {k: v for k, v in labels.items() if not k.startswith(_GFD_PREFIXES)}
    return {**kept, **advertisement.labels}


def _busy(
    model: GpuModel,
    index: int,
    inst: GpuInstance,
    used: frozenset[str],
    claimed: frozenset[tuple[int | None, str, int]],
    single: bool,
) -> bool:
    if (index, inst.profile, inst.start) in claimed or (None, inst.profile, inst.start) in claimed:
        return True  # an allocated DRA claim names this very device
    if single and used:
        return True
    names = {profile_key(d) for d in mig_device_names(model, inst)} or {profile_key(inst.profile)}
    return bool(names & used)


def protect(node: NodeSupply, strategy: Strategy | None) -> tuple[GpuState, ...] | None:
    """The node's GPU states with every instance a running pod may use marked busy (a pid), so the agent's
    planner keeps it where the target allows and names it in `GpuPlan.busy` when a plan would destroy it.
    An allocated DRA claim names its device; which instance a device-plugin pod holds is the plugin's
    secret, so every instance of a profile in use counts as used (under single, every instance once any
    is): never less safe than the truth."""
    if node.states is None:
        return None
    used = frozenset(k for k, n in node.used.items() if n > 0)
    claimed = frozenset(node.claimed)
    return tuple(
        _protected(model, state, used, claimed, strategy == "single")
        for model, state in zip(node.gpus.gpus, node.states)
    )


@lru_cache(maxsize=1 << 14)
def _protected(
    model: GpuModel,
    state: GpuState,
    used: frozenset[str],
    claimed: frozenset[tuple[int | None, str, int]],
    single: bool,
) -> GpuState:
    """One GPU's state with its busy instances marked, memoised: nodes alike get the very same value
    (what lets `_plans` remember a node's plans by identity)."""
    instances = []
    for inst in state.instances:
        busy = _busy(model, state.index, inst, used, claimed, single)
        instances.append(dataclasses.replace(inst, pids=inst.pids or ((0,) if busy else ())))
    return dataclasses.replace(state, instances=tuple(instances))


@lru_cache(maxsize=1 << 14)
def _plan(state: GpuState, desired: Desired) -> GpuPlan:
    """The agent's plan, memoised: a thousand nodes in the same layout ask the same question."""
    return plan_gpu(state, desired)


def _free(offered: Counter[str], node: NodeSupply) -> dict[str, int]:
    """What pending demand may use: what the option offers less what running pods and claims hold."""
    held = Counter(node.used)
    held.update(profile_key(p) for _, p, _ in node.claimed)
    return {k: n - held.get(k, 0) for k, n in sorted(offered.items()) if n - held.get(k, 0) > 0}


_ADVERTISED: dict[int, tuple[Fit, Advertisement | None]] = {}


def _advertisement(f: Fit) -> Advertisement | None:
    """`Fit.advertisement()`, once per verdict (a FitCache hands the same verdict to every node alike)."""
    found = _ADVERTISED.get(id(f))
    if found is None or found[0] is not f:
        if len(_ADVERTISED) > 4096:
            _ADVERTISED.clear()
        found = _ADVERTISED[id(f)] = (f, f.advertisement())
    return found[1]


def _keep(node: NodeSupply, spec: RepoSpec, strategy: Strategy | None, cache: FitCache) -> Option:
    """The option that leaves nodes.yaml as it is."""
    if node.assigned is not None:
        adv = _advertisement(cache.fit(spec, node.assigned, node.gpus, strategy))
        if adv is not None:
            after = labels_after(node.labels, adv)
            return Option(node.assigned, False, False, _free(devices(adv.resources, after, strategy), node), after)
    # No assignment, or GPUs not known exactly: what the node has now is all that is known.
    return Option(node.assigned, False, False, _free(Counter(node.allocatable), node), dict(node.labels))


def node_options(
    node: NodeSupply,
    spec: RepoSpec,
    strategy: Strategy | None,
    configs: Sequence[str],
    cache: FitCache,
) -> tuple[tuple[Option, ...], tuple[Refused, ...]]:
    """The node's options, first the one that leaves nodes.yaml as it is, then `configs` (in that order)
    it can take safely; and the configs it cannot, with the reason."""
    options: list[Option] = [_keep(node, spec, strategy, cache)]
    refused: list[Refused] = []
    states = protect(node, strategy)
    for config in configs:
        if config == node.assigned:
            continue
        found = _option(node, spec, strategy, config, cache, states)
        if isinstance(found, Refused):
            refused.append(found)
        else:
            options.append(found)
    return tuple(options), tuple(refused)


def _option(
    node: NodeSupply,
    spec: RepoSpec,
    strategy: Strategy | None,
    config: str,
    cache: FitCache,
    states: tuple[GpuState, ...] | None,
) -> Option | Refused:
    f = cache.fit(spec, config, node.gpus, strategy)
    if not f.valid:
        return Refused(node.name, config, f"does not fit: {f.errors[0]}" if f.errors else "does not fit")
    adv = _advertisement(f)
    if adv is None:
        return Refused(node.name, config, "the node's GPU count is unknown (no migops.io/gpus, GFD under single)")
    if adv.invalid_reason:
        return Refused(node.name, config, f"GFD would publish -MIG-INVALID: {adv.invalid_reason}")
    after = labels_after(node.labels, adv)
    free = _free(devices(adv.resources, after, strategy), node)
    if states is None:
        if any(n > 0 for n in node.used.values()) or node.claimed:
            why = (
                "pods use MIG devices and the node publishes no layout (migops.io/mig.layout): "
                "cannot prove they are kept"
            )
            return Refused(node.name, config, why, free, True, after)
        gpus = tuple(range(len(node.gpus.gpus)))  # unknown layout: count every GPU as reconfigured
        return Option(config, True, False, free, after, gpus)
    plans = _plans_of(f, states, node.used.get(WHOLE_GPU, 0) > 0)
    if isinstance(plans, tuple):
        why, busy = plans
        return Refused(node.name, config, why, free, busy, after)
    touched = [p.index for p in plans if p.touches]
    kept = sum(len(p.keep) for p in plans if p.touches)
    destroyed = sum(len(p.must_go) for p in plans if p.touches)
    created = sum(1 for p in plans if p.touches for s in p.steps if s.op == "create_gi")
    return Option(config, True, False, free, after, tuple(touched), kept, destroyed, created)


_PLANNED: dict[tuple[object, ...], tuple[tuple[object, ...], list[GpuPlan] | tuple[str, bool]]] = {}


def _plans_of(f: Fit, states: tuple[GpuState, ...], whole: bool) -> list[GpuPlan] | tuple[str, bool]:
    """`_plans`, once per (verdict, GPU states) by identity: a thousand nodes in one layout share both."""
    held = (f, *states)
    key = (*map(id, held), whole)
    found = _PLANNED.get(key)
    # The entry holds what its key names, so no id in a key is reused while the entry lives.
    if found is None or any(a is not b for a, b in zip(found[0], held)):
        if len(_PLANNED) > 4096:
            _PLANNED.clear()
        found = _PLANNED[key] = (held, _plans(states, f.report.gpus, whole))
    return found[1]


def _plans(states: Sequence[GpuState], results: Sequence[GpuResult], whole: bool) -> list[GpuPlan] | tuple[str, bool]:
    """The agent's plan for each GPU; (why, in use) when one cannot be made or would end running work.
    `whole`: running pods hold whole GPUs on the node."""
    plans = []
    for state, result in zip(states, results):
        plan = _plan(state, desired_from_result(result))
        if plan.error:
            return plan.error, False
        if plan.mode_change and not state.mig_enabled and whole:
            # Which GPU a whole-GPU pod holds is the device plugin's secret too: none may change mode.
            return f"it would turn MIG on for GPU {state.index}, and running pods use whole GPUs on this node", True
        if plan.busy:
            inst = plan.busy[0]
            return (
                f"it would destroy the {inst.profile} instance at slice {inst.start} on GPU {state.index}, "
                "which a running pod uses",
                True,
            )
        plans.append(plan)
    return plans

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

from migops.agent.backend import GpuState
from migops.agent.plan import Desired, GpuPlan, desired_from_result, mig_device_names, plan_gpu
from migops.gitops.desired import FitCache
from migops.gitops.repo import RepoSpec
from migops.mig.gfd import GPU_PRODUCT_LABEL, GPU_RESOURCE, MIG_RESOURCE_PREFIX, Advertisement
from migops.mig.strategy import Strategy
from migops.suggest.model import WHOLE_GPU, NodeFacts, Option, Refused

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


def protect(node: NodeFacts, strategy: Strategy | None) -> tuple[GpuState, ...] | None:
    """The node's GPU states with every instance a running pod may use marked busy (a pid), so the agent's
    planner names it in `GpuPlan.busy` when a plan would destroy it. Which instance a pod holds is the
    device plugin's secret: every instance of a profile in use counts as used (under single, every
    instance once any is), which is never less safe than the truth."""
    if node.states is None:
        return None
    used = {k for k, n in node.used.items() if n > 0}
    if not used:
        return node.states
    out = []
    for model, state in zip(node.gpus.gpus, node.states):
        instances = []
        for inst in state.instances:
            names = {d.replace("+", ".") for d in mig_device_names(model, inst)} or {inst.profile.replace("+", ".")}
            busy = strategy == "single" or bool(names & used)
            instances.append(dataclasses.replace(inst, pids=inst.pids or ((0,) if busy else ())))
        out.append(dataclasses.replace(state, instances=tuple(instances)))
    return tuple(out)


@lru_cache(maxsize=1 << 14)
def _plan(state: GpuState, desired: Desired) -> GpuPlan:
    """The agent's plan, memoised: a thousand nodes in the same layout ask the same question."""
    return plan_gpu(state, desired)


def _free(offered: Counter[str], node: NodeFacts) -> dict[str, int]:
    return {k: n - node.used.get(k, 0) for k, n in sorted(offered.items()) if n - node.used.get(k, 0) > 0}


def node_options(
    node: NodeFacts,
    spec: RepoSpec,
    strategy: Strategy | None,
    configs: Sequence[str],
    cache: FitCache,
) -> tuple[tuple[Option, ...], tuple[Refused, ...]]:
    """The node's options, first the one that leaves nodes.yaml as it is, then `configs` (in that order)
    it can take safely; and the configs it cannot, with the reason."""
    options: list[Option] = []
    refused: list[Refused] = []
    if node.assigned is None:
        keep = Option(None, False, False, _free(Counter(node.allocatable), node), dict(node.labels))
    else:
        f = cache.fit(spec, node.assigned, node.gpus, strategy)
        adv = f.advertisement()
        if adv is None:  # not exact GPUs: what the node has now is all that is known
            keep = Option(node.assigned, False, False, _free(Counter(node.allocatable), node), dict(node.labels))
        else:
            after = labels_after(node.labels, adv)
            keep = Option(node.assigned, False, False, _free(devices(adv.resources, after, strategy), node), after)
    options.append(keep)
    states = protect(node, strategy)
    for config in configs:
        if config == node.assigned:
            continue
        f = cache.fit(spec, config, node.gpus, strategy)
        if not f.valid:
            refused.append(Refused(node.name, config, f"does not fit: {f.errors[0]}" if f.errors else "does not fit"))
            continue
        adv = f.advertisement()
        if adv is None:
            refused.append(
                Refused(node.name, config, "the node's GPU count is unknown (no migops.io/gpus, GFD under single)")
            )
            continue
        if adv.invalid_reason:
            refused.append(Refused(node.name, config, f"GFD would publish -MIG-INVALID: {adv.invalid_reason}"))
            continue
        after = labels_after(node.labels, adv)
        offers = frozenset(devices(adv.resources, after, strategy))
        if states is None:
            if any(n > 0 for n in node.used.values()):
                refused.append(
                    Refused(
                        node.name,
                        config,
                        "pods use MIG devices and the node publishes no layout (migops.io/mig.layout): "
                        "cannot prove they are kept",
                        offers,
                        True,
                    )
                )
                continue
            gpus = tuple(range(len(node.gpus.gpus)))  # unknown layout: count every GPU as reconfigured
            options.append(
                Option(config, True, False, _free(devices(adv.resources, after, strategy), node), after, gpus)
            )
            continue
        touched: list[int] = []
        kept = destroyed = created = 0
        why, busy = "", False
        for state, result in zip(states, f.report.gpus):
            plan = _plan(state, desired_from_result(result))
            if plan.error:
                why = plan.error
                break
            if plan.mode_change and not state.mig_enabled and node.used.get(WHOLE_GPU, 0) > 0:
                # Which GPU a whole-GPU pod holds is the device plugin's secret too: none may change mode.
                busy = True
                why = f"it would turn MIG on for GPU {state.index}, and running pods use whole GPUs on this node"
                break
            if plan.busy:
                busy, inst = True, plan.busy[0]
                why = f"it would destroy the {inst.profile} instance at slice {inst.start} on GPU {state.index}, which a running pod uses"
                break
            if plan.touches:
                touched.append(state.index)
                kept += len(plan.keep)
                destroyed += len(plan.must_go)
                created += sum(1 for s in plan.steps if s.op == "create_gi")
        if why:
            refused.append(Refused(node.name, config, why, offers, in_use=busy))
            continue
        free = _free(devices(adv.resources, after, strategy), node)
        options.append(Option(config, True, False, free, after, tuple(touched), kept, destroyed, created))
    return tuple(options), tuple(refused)

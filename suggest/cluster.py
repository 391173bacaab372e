"""The cluster as `migops suggest` reads it: pending pods as Demand, GPU nodes as NodeFacts.

Objects are the API's JSON (dicts, camelCase), as `kubectl get -o json` shows them, so the same
functions read a live cluster and a test's objects. Demand (docs/suggest.md):

- mixed: a pod's `nvidia.com/mig-<profile>` limits (or requests);
- single: `nvidia.com/gpu` with a MIG product selector (`nvidia.com/gpu.product: <model>-MIG-<profile>`
  in the nodeSelector or a required nodeAffinity term), which is how the webhook's translation and GFD
  say it.

What running pods hold (the MIG devices bound to a node) is read from the same pods.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from migops.agent.backend import ComputeInstance, GpuInstance, GpuState
from migops.api import objects
from migops.api.names import LAYOUT_ANNOTATION
from migops.api.objects import LabelSelector, Requirement, node_gpus
from migops.mig.catalogue import UnknownGpuError
from migops.mig.gfd import GPU_PRODUCT_LABEL, GPU_RESOURCE, MIG_RESOURCE_PREFIX
from migops.mig.strategy import Strategy
from migops.suggest.model import WHOLE_GPU, Demand, NodeFacts
from migops.suggest.options import devices

_SINGLE_MIG = "-MIG-"
_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
_DONE = ("Succeeded", "Failed")


@dataclass(frozen=True)
class Skipped:
    """A pending pod that asks for MIG devices but cannot be read as demand, and why."""

    ref: str
    reason: str


def _ref(pod: Mapping[str, Any]) -> str:
    return f"{objects.meta(pod).get('namespace', 'default')}/{objects.meta(pod).get('name', '')}"


def _quantity(value: object) -> int:
    """Extended resources are whole numbers ("2"); anything else counts as 0."""
    text = str(value)
    return int(text) if text.isdigit() else 0


def pod_resources(pod: Mapping[str, Any]) -> Counter[str]:
    """GPU resources the pod needs: the larger of its app containers' sum and any one init container."""
    spec = pod.get("spec") or {}

    def of(container: Mapping[str, Any]) -> Counter[str]:
        res = container.get("resources") or {}
        limits, requests = res.get("limits") or {}, res.get("requests") or {}
        names = {k for k in (*limits, *requests) if k == GPU_RESOURCE or k.startswith(MIG_RESOURCE_PREFIX)}
        return Counter({k: max(_quantity(limits.get(k, 0)), _quantity(requests.get(k, 0))) for k in names})

    total: Counter[str] = Counter()
    for c in spec.get("containers") or ():
        total.update(of(c))
    for c in spec.get("initContainers") or ():
        for k, n in of(c).items():
            total[k] = max(total[k], n)
    return +total


def _terms(pod: Mapping[str, Any]) -> tuple[list[LabelSelector], str]:
    """The pod's node constraint as ORed selectors; a reason instead when it uses what suggest cannot read."""
    spec = pod.get("spec") or {}
    base = tuple(sorted((str(k), str(v)) for k, v in (spec.get("nodeSelector") or {}).items()))
    required = (
        ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution")
    ) or {}
    terms = required.get("nodeSelectorTerms") or []
    if not terms:
        return ([LabelSelector(base)] if base else []), ""
    out = []
    for term in terms:
        if term.get("matchFields"):
            return [], "its nodeAffinity uses matchFields (suggest reads label expressions only)"
        reqs = []
        for e in term.get("matchExpressions") or ():
            if e.get("operator") not in _OPERATORS:
                return (
                    [],
                    f"its nodeAffinity uses operator {e.get('operator')!r} (suggest reads In, NotIn, Exists, DoesNotExist)",
                )
            reqs.append(
                Requirement(str(e.get("key")), str(e["operator"]), tuple(str(v) for v in e.get("values") or ()))
            )
        out.append(LabelSelector(base, tuple(reqs)))
    return out, ""


def _single_profiles(selectors: Iterable[LabelSelector]) -> frozenset[str]:
    """Under single: the MIG profiles the pod's product selector names (`<model>-MIG-<profile>`)."""
    found: set[str] = set()
    for s in selectors:
        values = [v for k, v in s.match_labels if k == GPU_PRODUCT_LABEL]
        values += [
            v for r in s.match_expressions if r.key == GPU_PRODUCT_LABEL and r.operator == "In" for v in r.values
        ]
        found.update(v.split(_SINGLE_MIG, 1)[1] for v in values if _SINGLE_MIG in v)
    return frozenset(found)


def is_pending(pod: Mapping[str, Any]) -> bool:
    """Waiting to be scheduled: not bound, not finished, not being deleted."""
    if objects.meta(pod).get("deletionTimestamp"):
        return False
    return (
        not (pod.get("spec") or {}).get("nodeName") and (pod.get("status") or {}).get("phase", "Pending") == "Pending"
    )


def read_demand(pods: Iterable[Mapping[str, Any]], strategy: Strategy | None) -> tuple[list[Demand], list[Skipped]]:
    """Pending pods that ask for MIG devices, as Demand; those that ask but cannot be read, with why."""
    demands: list[Demand] = []
    skipped: list[Skipped] = []
    for pod in pods:
        if not is_pending(pod):
            continue
        wants = pod_resources(pod)
        mig = {k[len(MIG_RESOURCE_PREFIX) :]: n for k, n in wants.items() if k.startswith(MIG_RESOURCE_PREFIX)}
        selectors, why = _terms(pod)
        if strategy == "single":
            profiles = _single_profiles(selectors) if wants.get(GPU_RESOURCE) else frozenset()
            if mig:
                skipped.append(
                    Skipped(
                        _ref(pod),
                        "it asks for nvidia.com/mig-* resources, which the single strategy does not advertise",
                    )
                )
                continue
            if not profiles:
                continue  # whole GPUs, not MIG demand
            count = wants[GPU_RESOURCE]
        else:
            if not mig:
                continue
            if len(mig) > 1:
                skipped.append(
                    Skipped(_ref(pod), f"it asks for several MIG profiles at once ({', '.join(sorted(mig))})")
                )
                continue
            ((profile, count),) = mig.items()
            profiles = frozenset({profile})
        if why:
            skipped.append(Skipped(_ref(pod), why))
            continue
        meta = objects.meta(pod)
        demands.append(
            Demand(
                str(meta.get("namespace", "default")),
                str(meta.get("name", "")),
                profiles,
                count,
                int((pod.get("spec") or {}).get("priority") or 0),
                tuple(selectors),
            )
        )
    return demands, skipped


def read_claims(
    claims: Iterable[Mapping[str, Any]],
    templates: Iterable[Mapping[str, Any]],
    classes: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
) -> list[Demand]:
    """DRA demand as Demand values: pending ResourceClaims, and pending pods' claim templates whose claim
    does not exist yet, whose CEL selectors pick MIG devices (mig.dra evaluates them as the scheduler
    would). A claim's node constraint is its pod's nodeSelector, when it came from a template."""
    from migops.mig import dra

    def name(obj: Mapping[str, Any]) -> str:
        return str(objects.meta(obj).get("name") or "")

    by_class = {name(c): c for c in classes}
    by_template = {(str(objects.meta(t).get("namespace") or ""), name(t)): t for t in templates}
    return [
        Demand(
            d.namespace,
            d.name,
            d.profiles,
            d.count,
            d.priority,
            (LabelSelector(d.node_selector),) if d.node_selector else (),
            d.kind,
        )
        for d in dra.pending_demand(claims, by_class, pods=pods, templates=by_template)
    ]


def states_from_layout(value: str | None, count: int) -> tuple[GpuState, ...] | None:
    """The agent's `migops.io/mig.layout` (docs/interfaces.md) as GPU states; None when absent or not
    one entry per GPU (then nothing is known about what is in use)."""
    if not value:
        return None
    try:
        doc = json.loads(value)
        states = []
        for gpu in doc:
            instances = tuple(
                GpuInstance(
                    j,
                    str(i["profile"]),
                    int(i["start"]),
                    int(i["size"]),
                    tuple(ComputeInstance(c, int(s)) for c, s in enumerate(i.get("compute") or ())),
                )
                for j, i in enumerate(gpu.get("instances") or ())
            )
            enabled = bool(gpu.get("mig_enabled", bool(instances)))
            states.append(GpuState(int(gpu["gpu"]), enabled, enabled, instances))
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    if len(states) != count or [s.index for s in states] != list(range(count)):
        return None
    return tuple(states)


def used_devices(
    pods: Iterable[Mapping[str, Any]], nodes: Mapping[str, Mapping[str, Any]], strategy: Strategy | None
) -> dict[str, Counter[str]]:
    """Node -> MIG devices (by profile key) that pods bound to it hold."""
    used: dict[str, Counter[str]] = defaultdict(Counter)
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if not node or node not in nodes or (pod.get("status") or {}).get("phase") in _DONE:
            continue
        wants = pod_resources(pod)
        labels = objects.meta(nodes[node]).get("labels") or {}
        mig = devices(dict(wants), labels, strategy)
        used[node].update(mig)
        if wants.get(GPU_RESOURCE) and not (strategy == "single" and mig):
            used[node][WHOLE_GPU] += wants[GPU_RESOURCE]  # nvidia.com/gpu as whole GPUs
    return used


def read_nodes(
    nodes: Mapping[str, Mapping[str, Any]],
    assigned: Mapping[str, str],
    used: Mapping[str, Counter[str]],
    strategy: Strategy | None,
) -> tuple[list[NodeFacts], list[Skipped]]:
    """GPU nodes as facts; nodes whose GPUs the catalogue does not know, with why."""
    out: list[NodeFacts] = []
    skipped: list[Skipped] = []
    for name, node in sorted(nodes.items()):
        try:
            gpus = node_gpus(node)
        except UnknownGpuError as exc:
            skipped.append(Skipped(name, f"its GPU is not in the catalogue: {exc}"))
            continue
        if gpus is None or not any(g.mig_capable for g in gpus.gpus):
            continue
        meta = objects.meta(node)
        labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
        notes = meta.get("annotations") or {}
        states = states_from_layout(notes.get(LAYOUT_ANNOTATION), len(gpus.gpus)) if gpus.exact else None
        allocatable = {k: _quantity(v) for k, v in ((node.get("status") or {}).get("allocatable") or {}).items()}
        out.append(
            NodeFacts(
                name,
                labels,
                gpus,
                states,
                assigned.get(name),
                dict(used.get(name, {})),
                dict(devices(allocatable, labels, strategy)),
            )
        )
    return out, skipped

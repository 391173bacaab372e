"""The cluster as `migops suggest` reads it: pending pods as Demand, GPU nodes as NodeSupply.

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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from migops.agent.backend import ComputeInstance, GpuInstance, GpuState
from migops.api import objects
from migops.api.names import AGENT_ANNOTATIONS, LAYOUT_ANNOTATION, MANAGED_BY_ANNOTATION, REVISION_ANNOTATION
from migops.api.objects import LabelSelector, Requirement, node_gpus
from migops.mig.catalogue import UnknownGpuError
from migops.mig.gfd import GPU_PRODUCT_LABEL, GPU_RESOURCE, MIG_RESOURCE_PREFIX
from migops.mig.strategy import Strategy
from migops.suggest.claims import claimed_instance
from migops.suggest.model import WHOLE_GPU, Demand, NodeSupply
from migops.suggest.options import devices
from migops.suggest.scheduling import node_allocatable, pod_requests, read_taints, read_tolerations

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


def _wanted(pod: Mapping[str, Any], strategy: Strategy | None) -> tuple[frozenset[str], int, str]:
    """(profiles, count, why not) of a pending pod: () when it asks for no MIG device (a whole GPU, or
    nothing at all), a reason when it asks in a way suggest cannot read."""
    wants = pod_resources(pod)
    mig = {k[len(MIG_RESOURCE_PREFIX) :]: n for k, n in wants.items() if k.startswith(MIG_RESOURCE_PREFIX)}
    selectors, why = _terms(pod)
    if strategy == "single":
        if mig:
            return (
                frozenset(),
                0,
                "it asks for nvidia.com/mig-* resources, which the single strategy does not advertise",
            )
        profiles = _single_profiles(selectors) if wants.get(GPU_RESOURCE) else frozenset()
        return profiles, wants[GPU_RESOURCE] if profiles else 0, why if profiles else ""
    if not mig:
        return frozenset(), 0, ""
    if len(mig) > 1:
        return frozenset(), 0, f"it asks for several MIG profiles at once ({', '.join(sorted(mig))})"
    ((profile, count),) = mig.items()
    return frozenset({profile}), count, why


def read_demand(pods: Iterable[Mapping[str, Any]], strategy: Strategy | None) -> tuple[list[Demand], list[Skipped]]:
    """Pending pods that ask for MIG devices, as Demand; those that ask but cannot be read, with why."""
    demands: list[Demand] = []
    skipped: list[Skipped] = []
    for pod in pods:
        if not is_pending(pod):
            continue
        profiles, count, why = _wanted(pod, strategy)
        if why:
            skipped.append(Skipped(_ref(pod), why))
            continue
        if not profiles:
            continue  # no MIG demand
        meta, spec = objects.meta(pod), pod.get("spec") or {}
        demands.append(
            Demand(
                str(meta.get("namespace", "default")),
                str(meta.get("name", "")),
                profiles,
                count,
                int(spec.get("priority") or 0),
                tuple(_terms(pod)[0]),
                "Pod",
                read_tolerations(pod),
                pod_requests(pod),
            )
        )
    return demands, skipped


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
    claimed: Mapping[str, Sequence[str]] | None = None,
) -> tuple[list[NodeSupply], list[Skipped]]:
    """GPU nodes as what they supply; nodes whose GPUs the catalogue does not know, with why."""
    out: list[NodeSupply] = []
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
            NodeSupply(
                name,
                labels,
                gpus,
                states,
                assigned.get(name),
                dict(used.get(name, {})),
                dict(devices(allocatable, labels, strategy)),
                read_taints(node),
                node_allocatable(node),
                tuple(i for dev in (claimed or {}).get(name, ()) if (i := claimed_instance(dev, gpus)) is not None),
            )
        )
    return out, skipped


# What suggest reads of a pod and of a node: the rest (annotations, managedFields, status conditions, ...)
# is dropped as each object arrives, so what is kept does not grow with what users put on their objects.
_POD_SPEC = ("nodeName", "nodeSelector", "tolerations", "priority", "resourceClaims")
_RESOURCES = ("cpu", "memory", GPU_RESOURCE)
MAX_POD_BYTES = 4096  # a pending pod whose scheduling constraints are larger is named, not read


def _container(c: Mapping[str, Any]) -> dict[str, Any]:
    res = c.get("resources") or {}

    def kept(part: Mapping[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in part.items() if k in _RESOURCES or str(k).startswith(MIG_RESOURCE_PREFIX)}

    return {"resources": {"limits": kept(res.get("limits") or {}), "requests": kept(res.get("requests") or {})}}


def trim_pod(pod: Mapping[str, Any]) -> dict[str, Any]:
    """The pod as suggest reads it (still a Pod's shape: every reader here reads it as it reads a Pod)."""
    meta, spec, status = objects.meta(pod), pod.get("spec") or {}, pod.get("status") or {}
    node_affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    out_spec: dict[str, Any] = {k: spec[k] for k in _POD_SPEC if k in spec}
    out_spec["containers"] = [_container(c) for c in spec.get("containers") or ()]
    out_spec["initContainers"] = [_container(c) for c in spec.get("initContainers") or ()]
    if required:
        out_spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}
    return {
        "metadata": {k: meta[k] for k in ("name", "namespace", "deletionTimestamp") if k in meta},
        "spec": out_spec,
        "status": {k: status[k] for k in ("phase", "resourceClaimStatuses") if k in status},
    }


_NODE_ANNOTATIONS = (*AGENT_ANNOTATIONS, MANAGED_BY_ANNOTATION, REVISION_ANNOTATION)


def trim_node(node: Mapping[str, Any]) -> dict[str, Any]:
    """The node as suggest and the resolver read it: name, labels, the agent's and the reconciler's
    annotations, taints, allocatable."""
    meta = objects.meta(node)
    notes = meta.get("annotations") or {}
    return {
        "metadata": {
            "name": meta.get("name"),
            "labels": meta.get("labels") or {},
            "annotations": {k: notes[k] for k in _NODE_ANNOTATIONS if k in notes},
        },
        "spec": {"taints": (node.get("spec") or {}).get("taints") or []},
        "status": {"allocatable": (node.get("status") or {}).get("allocatable") or {}},
    }

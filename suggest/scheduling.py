"""What the kube-scheduler reads beside labels, as `migops suggest` reads it: taints and tolerations, and
the CPU and memory a pod requests against what a node has allocatable.

Objects are the API's JSON (dicts, camelCase). Pure: no client, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from kubernetes.utils.quantity import parse_quantity

# Taint effects that keep a pod off a node (PreferNoSchedule only scores).
BLOCKING = frozenset(("NoSchedule", "NoExecute"))
CPU, MEMORY = "cpu", "memory"


@dataclass(frozen=True, order=True)
class Taint:
    key: str
    value: str = ""
    effect: str = ""


@dataclass(frozen=True, order=True)
class Toleration:
    """A pod's toleration, as the scheduler matches it (an empty key with Exists tolerates every taint;
    an empty effect matches every effect)."""

    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    def tolerates(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if not self.key:
            return self.operator == "Exists"
        if self.key != taint.key:
            return False
        return self.operator == "Exists" or self.value == taint.value


def tolerated(taints: Iterable[Taint], tolerations: Iterable[Toleration]) -> bool:
    """Every taint that keeps pods off the node is tolerated."""
    held = tuple(tolerations)
    return all(any(t.tolerates(taint) for t in held) for taint in taints if taint.effect in BLOCKING)


def read_taints(node: Mapping[str, Any]) -> tuple[Taint, ...]:
    """The node's taints that keep pods off it (spec.taints), sorted."""
    raw = (node.get("spec") or {}).get("taints") or ()
    found = {
        Taint(str(t.get("key") or ""), str(t.get("value") or ""), str(t.get("effect") or ""))
        for t in raw
        if isinstance(t, Mapping)
    }
    return tuple(sorted(t for t in found if t.effect in BLOCKING))


def read_tolerations(pod: Mapping[str, Any]) -> tuple[Toleration, ...]:
    raw = (pod.get("spec") or {}).get("tolerations") or ()
    found = {
        Toleration(
            str(t.get("key") or ""),
            str(t.get("operator") or "Equal"),
            str(t.get("value") or ""),
            str(t.get("effect") or ""),
        )
        for t in raw
        if isinstance(t, Mapping)
    }
    return tuple(sorted(found))


def quantity(value: object) -> Decimal | None:
    """A Kubernetes quantity ("500m", "4Gi"); None when it is not one."""
    try:
        return Decimal(parse_quantity(str(value)))
    except (ValueError, TypeError, ArithmeticError):
        return None


def _milli(resources: Mapping[str, Any], name: str) -> int:
    """CPU in millicores, memory in bytes (whole units), 0 when absent or unreadable."""
    q = quantity(resources.get(name, 0))
    if q is None:
        return 0
    return int(q * 1000) if name == CPU else int(q)


def pod_requests(pod: Mapping[str, Any]) -> tuple[tuple[str, int], ...]:
    """CPU (millicores) and memory (bytes) the pod requests as the scheduler sums them: its containers'
    requests (limits when a request is absent), or its largest init container when that is more."""
    spec = pod.get("spec") or {}

    def of(container: Mapping[str, Any]) -> dict[str, int]:
        res = container.get("resources") or {}
        asked = {**(res.get("limits") or {}), **(res.get("requests") or {})}
        return {name: _milli(asked, name) for name in (CPU, MEMORY)}

    total = {CPU: 0, MEMORY: 0}
    for c in spec.get("containers") or ():
        for name, n in of(c).items():
            total[name] += n
    for c in spec.get("initContainers") or ():
        for name, n in of(c).items():
            total[name] = max(total[name], n)
    return tuple((name, n) for name, n in sorted(total.items()) if n > 0)


def node_allocatable(node: Mapping[str, Any]) -> tuple[tuple[str, int], ...]:
    """CPU (millicores) and memory (bytes) the node has allocatable; a resource it does not state is absent
    (then nothing is known against it)."""
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    return tuple((name, _milli(allocatable, name)) for name in (CPU, MEMORY) if name in allocatable)


def fits(requests: Iterable[tuple[str, int]], allocatable: Iterable[tuple[str, int]]) -> bool:
    """The requests fit in what the node has allocatable (resources the node does not state are not held
    against it)."""
    has = dict(allocatable)
    return all(n <= has[name] for name, n in requests if name in has)

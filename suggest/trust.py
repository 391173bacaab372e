"""Demand that cannot be inflated: pending requests count as the `suggest` policy trusts them.

- A priority in the system range (above 1,000,000,000: `system-cluster-critical`,
  `system-node-critical`) counts as it is only in `suggest.trustedPriorityNamespaces` (kube-system by
  default); elsewhere it counts as 0, the default priority, and the request is named.
- `suggest.maxPodsPerNamespace` caps what one namespace counts: its highest priorities first, then by
  name; the rest is named, not counted.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from migops.gitops.repo import SuggestPolicy
from migops.suggest.model import Demand

HIGHEST_USER_PRIORITY = 1_000_000_000  # Kubernetes' HighestUserDefinablePriority: above it, system classes


@dataclass(frozen=True)
class Note:
    """A request counted otherwise than it asks, or not counted, and why."""

    ref: str
    reason: str


def trusted(demands: Sequence[Demand], policy: SuggestPolicy) -> tuple[list[Demand], list[Note]]:
    """The demand as the policy counts it, with a note for each request it changed or left out."""
    notes: list[Note] = []
    out: list[Demand] = []
    for d in demands:
        if d.priority > HIGHEST_USER_PRIORITY and d.namespace not in policy.trusted_priority_namespaces:
            notes.append(
                Note(
                    d.ref,
                    f"its priority {d.priority} is a system priority and its namespace is not trusted with one "
                    "(suggest.trustedPriorityNamespaces): counted as 0",
                )
            )
            d = dataclasses.replace(d, priority=0)
        out.append(d)
    if policy.max_pods_per_namespace is None:
        return out, notes
    by: dict[str, list[Demand]] = defaultdict(list)
    for d in out:
        by[d.namespace].append(d)
    kept: list[Demand] = []
    for namespace, items in sorted(by.items()):
        items.sort(key=lambda d: (-d.priority, d.name))
        kept += items[: policy.max_pods_per_namespace]
        notes += [
            Note(
                d.ref,
                f"namespace {namespace} has more than {policy.max_pods_per_namespace} pending requests "
                "(suggest.maxPodsPerNamespace): not counted",
            )
            for d in items[policy.max_pods_per_namespace :]
        ]
    return kept, notes

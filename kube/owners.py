"""Nodes whose MIG geometry another manager owns: NVIDIA's DRA driver in DynamicMIG mode, HAMi, the
Dynamic Accelerator Slicer (DAS). They create and destroy instances themselves (DynamicMIG destroys
partitions it did not create), so migops stays off those nodes: the reconciler skips them (status says
why), the webhook denies `nvidia.com/mig.config` on them naming the owner, and the agent refuses to
reconfigure there. The one definition all three read.

Which nodes: a label selector in kubectl's syntax (`key`, `key=value`, `key!=value`, `!key`,
`key in (a,b)`, `key notin (a,b)`, comma-separated and ANDed), from the environment variable
MIGOPS_DYNAMIC_MIG_SELECTOR, default `migops.io/mig-owner` (the node carries the label, its value names
the owner: `dra-dynamic-mig`, `hami`, `das`). None of these managers labels the nodes it runs on in a way
migops could rely on, so the operator marks them, or points the selector at a label of their own (for
instance the one that enables the DRA driver's DynamicMIG DaemonSet on a node pool). An empty value
turns the check off.

The GPU Operator's DRA stack (a GPUCluster, GPU Operator 26.7+) marks its nodes itself: it runs NVIDIA's
DRA driver, and no MIG Manager, where it labels a node `nvidia.com/gpu.deploy.dra-driver` (any value but
"false" or empty; the ClusterPolicy stack removes the label). Those nodes are owned by the DRA stack
whatever the selector says; labelling one `nvidia.com/gpu.deploy.dra-driver=false` takes the DRA driver
off it and hands it back.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache

from migops.api.names import DEPLOY_DRA_DRIVER_LABEL, OWNER_LABEL
from migops.api.objects import LabelSelector, Requirement

ENV = "MIGOPS_DYNAMIC_MIG_SELECTOR"
DEFAULT_SELECTOR = OWNER_LABEL
DRA_STACK = f"the GPU Operator's DRA stack (GPUCluster; {DEPLOY_DRA_DRIVER_LABEL})"


class SelectorError(ValueError):
    """A selector that does not parse; names the part."""


_SET = re.compile(r"^\s*([A-Za-z0-9./_-]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")
_EQ = re.compile(r"^\s*([A-Za-z0-9./_-]+)\s*(==|=|!=)\s*([A-Za-z0-9._-]*)\s*$")
_KEY = re.compile(r"^\s*(!?)\s*([A-Za-z0-9./_-]+)\s*$")


def _split(text: str) -> list[str]:
    """Split on commas outside parentheses."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return parts


def parse(text: str) -> LabelSelector | None:
    """A kubectl-style label selector; None for an empty one (the check is off)."""
    if not text.strip():
        return None
    labels: list[tuple[str, str]] = []
    reqs: list[Requirement] = []
    for part in _split(text):
        if m := _SET.match(part):
            values = tuple(v.strip() for v in m[3].split(",") if v.strip())
            reqs.append(Requirement(m[1], "In" if m[2] == "in" else "NotIn", values))
        elif m := _EQ.match(part):
            if m[2] == "!=":
                reqs.append(Requirement(m[1], "NotIn", (m[3],)))
            else:
                labels.append((m[1], m[3]))
        elif m := _KEY.match(part):
            reqs.append(Requirement(m[2], "DoesNotExist" if m[1] else "Exists"))
        else:
            raise SelectorError(f"{ENV}: cannot read {part.strip()!r} as a label selector requirement")
    return LabelSelector(tuple(labels), tuple(reqs))


@dataclass(frozen=True)
class DynamicOwners:
    """The configured selector and how its matches are named."""

    text: str
    selector: LabelSelector | None

    def owner(self, labels: Mapping[str, str]) -> str | None:
        """Who owns the node's MIG geometry, or None when migops does."""
        if labels.get(DEPLOY_DRA_DRIVER_LABEL) not in (None, "", "false"):
            return DRA_STACK
        if self.selector is None or not self.selector.matches(labels):
            return None
        named = labels.get(OWNER_LABEL)
        return named if named else f"a dynamic MIG manager (nodes matching {self.text})"


def why(owner: str) -> str:
    """What the owner does on its nodes and how a node is taken from it, for messages."""
    if owner == DRA_STACK:
        return (
            "it runs NVIDIA's DRA driver there, which allocates the MIG devices, and no MIG Manager; a second "
            f"manager would fight it (label the node {DEPLOY_DRA_DRIVER_LABEL}=false to take the DRA driver off it)"
        )
    return (
        "it creates and destroys instances itself; a second manager would fight it "
        f"(take the node from {owner} first: {ENV})"
    )


def from_text(text: str) -> DynamicOwners:
    return DynamicOwners(text.strip(), parse(text))


@lru_cache(maxsize=1)
def configured() -> DynamicOwners:
    """The selector in force for this process (MIGOPS_DYNAMIC_MIG_SELECTOR, read once)."""
    return from_text(os.environ.get(ENV, DEFAULT_SELECTOR))


def node_owner(obj: Mapping[str, object], owners: DynamicOwners | None = None) -> str | None:
    """The dynamic owner of a Node object (its labels), or None."""
    meta = obj.get("metadata")
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    found = {str(k): str(v) for k, v in labels.items()} if isinstance(labels, Mapping) else {}
    return (owners or configured()).owner(found)

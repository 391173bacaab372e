"""The values of a suggestion: demand, what each node supplies, what a node could become, and the proposal."""

from __future__ import annotations

import enum
import functools
from collections.abc import Mapping
from dataclasses import dataclass, field

from migops.agent.backend import GpuState
from migops.api.objects import LabelSelector
from migops.mig.gfd import NodeGpus
from migops.suggest.scheduling import Taint, Toleration, fits, tolerated

WHOLE_GPU = "(whole GPU)"  # NodeSupply.used key: whole GPUs (nvidia.com/gpu, not MIG devices) pods hold


def profile_key(profile: str) -> str:
    """A MIG device profile as resource names and labels spell it ('+' becomes '.', as mig-parted and
    the device plugin write it): the key demand and capacity are matched on."""
    return profile.replace("+", ".")


@dataclass(frozen=True)
class Demand:
    """One pending request: a pod (or a DRA ResourceClaim) that needs `count` MIG devices of one of
    `profiles`, all on one node.

    `profiles` are MIG device profiles as GFD names them (`3g.40gb`, `1c.3g.40gb`, `1g.10gb+me`), usually
    one; several mean any one of them will do (a claim whose selectors accept more than one). All
    `count` devices are of the one profile chosen. `node_selectors` are ORed terms (nodeAffinity's
    nodeSelectorTerms, each ANDed with the pod's nodeSelector), matched against the node's labels as they
    will be once its config is applied (GFD's labels change with the geometry); () matches any node.
    Higher `priority` is served first (the pod's spec.priority, as the policy trusts it). `tolerations`
    are held against the node's taints, `requests` (cpu in millicores, memory in bytes) against what the
    node has allocatable, as the scheduler does."""

    namespace: str
    name: str
    profiles: frozenset[str]
    count: int = 1
    priority: int = 0
    node_selectors: tuple[LabelSelector, ...] = ()
    kind: str = "Pod"
    tolerations: tuple[Toleration, ...] = ()
    requests: tuple[tuple[str, int], ...] = ()

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"

    @functools.cached_property
    def keys(self) -> frozenset[str]:
        return frozenset(profile_key(p) for p in self.profiles)

    @property
    def label_keys(self) -> frozenset[str]:
        """The node labels its selectors read: nodes that differ only in others are alike to it."""
        return frozenset(
            [k for s in self.node_selectors for k, _ in s.match_labels]
            + [r.key for s in self.node_selectors for r in s.match_expressions]
        )

    def matches(self, labels: Mapping[str, str]) -> bool:
        return not self.node_selectors or any(s.matches(labels) for s in self.node_selectors)


@dataclass(frozen=True)
class NodeSupply:
    """One GPU node as the cluster shows it: what it has, what is in use, what keeps pods off it."""

    name: str
    labels: Mapping[str, str]
    gpus: NodeGpus
    # The GPUs as the agent publishes them (migops.io/mig.layout); None when no layout is published
    # (a node run by NVIDIA's mig-manager): then nothing in use can be proven kept.
    states: tuple[GpuState, ...] | None
    assigned: str | None  # the config nodes.yaml gives it now (None: no assignment, left as it is)
    # profile key -> MIG devices running pods hold; WHOLE_GPU -> whole GPUs they hold
    used: Mapping[str, int] = field(default_factory=dict)
    allocatable: Mapping[str, int] = field(default_factory=dict)  # profile key -> MIG devices it has now
    taints: tuple[Taint, ...] = ()  # the taints that keep pods off it (NoSchedule, NoExecute)
    capacity: tuple[tuple[str, int], ...] = ()  # cpu (millicores) and memory (bytes) allocatable, when stated
    # Instances allocated DRA ResourceClaims hold, as (GPU index or None: any GPU, profile, start): kept
    # exactly (the claim names the device), and not offered to pending demand.
    claimed: tuple[tuple[int | None, str, int], ...] = ()

    def admits(self, d: Demand) -> bool:
        """The scheduler would let the pod onto this node whatever its labels: taints tolerated, its CPU
        and memory within what the node has allocatable."""
        return tolerated(self.taints, d.tolerations) and fits(d.requests, self.capacity)


@dataclass(frozen=True)
class Option:
    """What one node could become: a config of config.yaml (or its assignment left as it is)."""

    config: str | None  # None: no config given (the node stays as it is)
    changed: bool  # nodes.yaml changes for this node
    new: bool  # a config the proposal adds to config.yaml
    free: Mapping[str, int]  # profile key -> MIG devices pending pods could use (running pods' excluded)
    labels: Mapping[str, str]  # the node's labels once applied (GFD's follow the geometry)
    gpus: tuple[int, ...] = ()  # GPUs this change reconfigures
    kept: int = 0  # GPU instances that stay as they are on the GPUs it reconfigures
    destroyed: int = 0
    created: int = 0


@dataclass(frozen=True)
class Refused:
    """A config a node cannot take, and why (for the text of unservable demand)."""

    node: str
    config: str
    reason: str
    # What it would offer (profile key -> devices free for pending demand) and the node's labels under it,
    # when it fits but is unsafe.
    offers: Mapping[str, int] = field(default_factory=dict)
    in_use: bool = False  # refused because it would destroy instances in use (or cannot prove it would not)
    labels: Mapping[str, str] = field(default_factory=dict)


class Rule(enum.Enum):
    """What stops a pending request from being served, in the order they are told."""

    NO_PROFILE = "no-profile"  # no GPU model of the cluster has the profile
    NODE_SELECTOR = "node-selector"  # its selector matches no GPU node under any config
    TAINTS = "taints"  # every GPU node it selects has a taint it does not tolerate
    RESOURCES = "resources"  # it asks for more CPU or memory than any GPU node it may run on has
    POLICY = "policy"  # only configs the suggest policy forbids would serve it
    IN_USE = "in-use"  # only changes that destroy instances in use would serve it
    NO_CONFIG = "no-config"  # no config offers it on a node it may run on
    NO_ROOM = "no-room"  # it could be served, but higher-priority demand or maxNodes took the room


@dataclass(frozen=True)
class NodeChange:
    node: str
    current: str | None  # its config in nodes.yaml now
    option: Option

    @property
    def config(self) -> str:
        assert self.option.config is not None
        return self.option.config


@dataclass(frozen=True)
class Placed:
    demand: Demand
    node: str
    profile: str


@dataclass(frozen=True)
class Unserved:
    demand: Demand
    reason: str
    rule: Rule


@dataclass(frozen=True)
class Stage:
    """One objective of the lexicographic order, as solved: its value and the proven bound."""

    name: str
    value: int
    bound: int
    optimal: bool
    # The wall-clock safety net stopped this stage before its work limit: a rerun on a busier or idler
    # machine may end elsewhere (the work limit alone makes runs repeat).
    wall_clock_cut: bool = False

    @property
    def gap(self) -> int:
        return abs(self.bound - self.value)


@dataclass(frozen=True)
class Proposal:
    """The suggestion: which nodes take which config, who is then served, who is not and why."""

    changes: tuple[NodeChange, ...]
    placed: tuple[Placed, ...]
    unserved: tuple[Unserved, ...]
    stages: tuple[Stage, ...] = ()
    seconds: float = 0.0
    new_configs: Mapping[str, str] = field(default_factory=dict)  # name -> config.yaml text of the entry

    @property
    def optimal(self) -> bool:
        return all(s.optimal for s in self.stages)

    @property
    def demand(self) -> int:
        return len(self.placed) + len(self.unserved)

    @property
    def gpus(self) -> int:
        return sum(len(c.option.gpus) for c in self.changes)

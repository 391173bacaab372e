"""One suggestion from start to end, for the CLI and the reconciler: the repo meets the cluster
(`gitops.desired.resolve`, the reconciler's own verdict), pending pods become demand, the solver
proposes, and the proposal is written into nodes.yaml's text and checked by the same loader and
resolver before anyone sees it."""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from migops.api import objects
from migops.api.migsync import CONFIG_FILE, NODES_FILE
from migops.api.objects import MigSettings
from migops.gitops.desired import DesiredState, FitCache, resolve
from migops.gitops.repo import RepoError, RepoProblem, RepoSpec, load_repo
from migops.mig.strategy import Strategy
from migops.suggest.claims import claimed_devices, read_claims
from migops.suggest.cluster import MAX_POD_BYTES, Skipped, read_demand, read_nodes, used_devices
from migops.suggest.edit import edit_nodes, rewrite
from migops.suggest.model import Demand, NodeSupply, Proposal
from migops.suggest.newconfigs import add_configs
from migops.suggest.propose import propose
from migops.suggest.solve import Limits
from migops.suggest.trust import Note, trusted


class NotWritable(Exception):
    """The proposal could not be written into nodes.yaml so that the loader and the resolver read it as
    proposed: nothing is shown as a proposal."""


@dataclass(frozen=True)
class Outcome:
    """What `migops suggest` found: the demand, the proposal and nodes.yaml as it would become."""

    spec: RepoSpec
    strategy: Strategy | None
    demands: tuple[Demand, ...]
    skipped: tuple[Skipped, ...]  # pods (or nodes) that could not be read, with why
    nodes: tuple[NodeSupply, ...]
    proposal: Proposal | None  # None: no pending MIG demand
    nodes_text: str  # nodes.yaml once the proposal is applied (the text as it is when nothing changes)
    warnings: tuple[RepoProblem, ...] = ()
    comments_lost: bool = False  # the text could not be edited in place and was written anew
    config_text: str | None = None  # config.yaml with the new configs the proposal uses; None: unchanged
    notes: tuple[Note, ...] = ()  # requests the policy counts otherwise than they ask, or not at all
    capped: str = ""  # the bound on pending pods read, when it was hit

    @property
    def changed(self) -> bool:
        return self.nodes_text != self.spec.nodes_text or self.config_text is not None

    def files(self) -> dict[str, str]:
        """Repository path -> new text, for each file the proposal changes."""
        out = {}
        if self.config_text is not None:
            out[self.spec.file(CONFIG_FILE)] = self.config_text
        if self.nodes_text != self.spec.nodes_text:
            out[self.spec.file(NODES_FILE)] = self.nodes_text
        return out

    def patch(self) -> str:
        """A unified diff `git apply` takes at the repository's root."""
        before = {self.spec.file(CONFIG_FILE): self.spec.config_text, self.spec.file(NODES_FILE): self.spec.nodes_text}
        out = []
        for name, text in self.files().items():
            lines = difflib.unified_diff(
                before[name].splitlines(keepends=True), text.splitlines(keepends=True), f"a/{name}", f"b/{name}"
            )
            # A last line without its newline is marked as git marks it (else the next line would join it).
            out += [line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines]
        return "".join(out)


@dataclass(frozen=True)
class Cluster:
    """The objects read: nodes by name, the pods that matter (pending and running), the MIG settings
    (ClusterPolicy), and DRA's ResourceClaims, ResourceClaimTemplates and DeviceClasses
    (resource.k8s.io/v1; empty without DRA). `not_read`: pending GPU pods and claims past the bound on
    what one proposal reads (`max_pending`); `too_large`: pending pods whose constraints were too large
    to read."""

    nodes: Mapping[str, Mapping[str, Any]]
    pods: Sequence[Mapping[str, Any]]
    settings: MigSettings = field(default_factory=MigSettings)
    claims: Sequence[Mapping[str, Any]] = ()
    claim_templates: Sequence[Mapping[str, Any]] = ()
    device_classes: Sequence[Mapping[str, Any]] = ()
    not_read: int = 0
    too_large: tuple[str, ...] = ()
    max_pending: int = 0

    @classmethod
    def from_items(cls, items: Iterable[Mapping[str, Any]], settings: MigSettings | None = None) -> Cluster:
        """From a List as `kubectl get nodes,pods -A -o json` prints it (ClusterPolicies, ResourceClaims,
        ResourceClaimTemplates and DeviceClasses in it count)."""
        from migops.api.objects import settings_from_policies

        items = list(items)

        def kind(name: str) -> list[Mapping[str, Any]]:
            return [i for i in items if i.get("kind") == name]

        nodes = {str(objects.meta(i).get("name")): i for i in kind("Node")}
        return cls(
            nodes,
            kind("Pod"),
            settings or settings_from_policies(kind("ClusterPolicy")),
            kind("ResourceClaim"),
            kind("ResourceClaimTemplate"),
            kind("DeviceClass"),
        )

    @property
    def capped(self) -> str:
        if not self.not_read:
            return ""
        return (
            f"pending MIG demand capped at {self.max_pending} pods and {self.max_pending} claims per proposal: "
            f"{self.not_read} more were not read"
        )


@dataclass(frozen=True)
class _Read:
    demands: list[Demand]
    skipped: list[Skipped]
    notes: list[Note]
    supply: list[NodeSupply]


def _read(spec: RepoSpec, cluster: Cluster, desired: DesiredState, demand: Sequence[Demand]) -> _Read:
    """The cluster as demand (as the policy counts it) and supply."""
    strategy, policy = desired.strategy, spec.nodes.suggest
    demands, skipped = read_demand(cluster.pods, strategy)
    skipped += [
        Skipped(ref, f"its scheduling constraints exceed {MAX_POD_BYTES} bytes: not read") for ref in cluster.too_large
    ]
    demands += read_claims(
        cluster.claims, cluster.claim_templates, cluster.device_classes, cluster.pods, policy.claims_without_pods
    )
    demands, notes = trusted([*demands, *demand], policy)
    used = used_devices(cluster.pods, cluster.nodes, strategy)
    assigned = {n: t.config for n, t in desired.targets.items()}
    supply, unknown = read_nodes(cluster.nodes, assigned, used, strategy, claimed_devices(cluster.claims))
    return _Read(demands, skipped + unknown, notes, supply)


def suggest(
    spec: RepoSpec,
    cluster: Cluster,
    limits: Limits | None = None,
    cache: FitCache | None = None,
    demand: Sequence[Demand] = (),
) -> Outcome:
    """Raises RepoError when the repo does not validate against this cluster (nothing is proposed), and
    NotWritable when the proposal cannot be written so that it reads as proposed. `demand`: more pending
    requests beside the cluster's pods and claims."""
    cache = cache or FitCache()
    desired = resolve(spec, cluster.nodes, cluster.settings, cache)
    read = _read(spec, cluster, desired, demand)
    base = Outcome(
        spec,
        desired.strategy,
        tuple(read.demands),
        tuple(read.skipped),
        tuple(read.supply),
        None,
        spec.nodes_text,
        desired.warnings,
        notes=tuple(read.notes),
        capped=cluster.capped,
    )
    if not read.demands:
        return base
    limits = limits or Limits(max_nodes=spec.nodes.suggest.max_nodes)
    proposal = propose(spec, read.supply, read.demands, desired.strategy, limits, cache)
    changes = {c.node: c.config for c in proposal.changes}
    config = add_configs(spec.config_text, proposal.new_configs) if proposal.new_configs else None
    text, lost = _written(spec, config, cluster, changes, cache)
    return dataclasses.replace(base, proposal=proposal, nodes_text=text, comments_lost=lost, config_text=config)


def _written(
    spec: RepoSpec, config: str | None, cluster: Cluster, changes: Mapping[str, str], cache: FitCache
) -> tuple[str, bool]:
    """nodes.yaml with the changes, and whether its comments were lost on the way."""
    if not changes:
        return spec.nodes_text, False
    text = edit_nodes(spec.nodes_text, changes)
    if _holds(spec, config, text, cluster, changes, cache):
        return text, False
    text = rewrite(spec.nodes_text, changes)
    if _holds(spec, config, text, cluster, changes, cache):
        return text, True
    moved = ", ".join(f"{n} -> {c}" for n, c in sorted(changes.items()))
    raise NotWritable(f"the proposal ({moved}) could not be written into nodes.yaml so that it resolves as proposed")


def _holds(
    spec: RepoSpec, config: str | None, text: str, cluster: Cluster, changes: Mapping[str, str], cache: FitCache
) -> bool:
    """The edited files load, validate on this cluster, move exactly the proposed nodes, and leave every
    other node's config as it was."""
    config = spec.config_text if config is None else config
    files = {spec.file(CONFIG_FILE): config.encode(), spec.file(NODES_FILE): text.encode()}
    try:
        before = resolve(spec, cluster.nodes, cluster.settings, cache).targets
        after = resolve(load_repo(files, spec.path, spec.revision), cluster.nodes, cluster.settings, cache).targets
    except RepoError:
        return False
    for name in set(before) | set(after):
        want = changes.get(name, before[name].config if name in before else None)
        if (after[name].config if name in after else None) != want:
            return False
    return True

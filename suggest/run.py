"""One suggestion from start to end, for the CLI and the reconciler: the repo meets the cluster
(`gitops.desired.resolve`, the reconciler's own verdict), pending pods become demand, the solver
proposes, and the proposal is written into nodes.yaml's text and checked by the same loader and
resolver before anyone sees it."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from migops.api import objects
from migops.api.migsync import CONFIG_FILE, NODES_FILE
from migops.api.objects import MigSettings
from migops.gitops.desired import FitCache, resolve
from migops.gitops.repo import RepoError, RepoProblem, RepoSpec, load_repo
from migops.mig.strategy import Strategy
from migops.suggest.cluster import Skipped, read_claims, read_demand, read_nodes, used_devices
from migops.suggest.edit import edit_nodes, rewrite
from migops.suggest.model import Demand, NodeFacts, Proposal
from migops.suggest.newconfigs import add_configs
from migops.suggest.propose import propose
from migops.suggest.solve import Limits


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
    nodes: tuple[NodeFacts, ...]
    proposal: Proposal | None  # None: no pending MIG demand
    nodes_text: str  # nodes.yaml once the proposal is applied (the text as it is when nothing changes)
    warnings: tuple[RepoProblem, ...] = ()
    comments_lost: bool = False  # the text could not be edited in place and was written anew
    config_text: str | None = None  # config.yaml with the new configs the proposal uses; None: unchanged

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
    """The objects read: nodes by name, every pod, the MIG settings (ClusterPolicy), and DRA's
    ResourceClaims, ResourceClaimTemplates and DeviceClasses (resource.k8s.io/v1; empty without DRA)."""

    nodes: Mapping[str, Mapping[str, Any]]
    pods: Sequence[Mapping[str, Any]]
    settings: MigSettings = field(default_factory=MigSettings)
    claims: Sequence[Mapping[str, Any]] = ()
    claim_templates: Sequence[Mapping[str, Any]] = ()
    device_classes: Sequence[Mapping[str, Any]] = ()

    @classmethod
    def from_items(cls, items: Iterable[Mapping[str, Any]], settings: MigSettings | None = None) -> Cluster:
        """From a List as `kubectl get nodes,pods -A -o json` prints it (ClusterPolicies, ResourceClaims,
        ResourceClaimTemplates and DeviceClasses in it count)."""
        from migops.kube.clusterpolicy import settings_from_policies

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


def suggest(
    spec: RepoSpec,
    cluster: Cluster,
    limits: Limits | None = None,
    cache: FitCache | None = None,
    demand: Sequence[Demand] = (),
) -> Outcome:
    """Raises RepoError when the repo does not validate against this cluster (nothing is proposed).
    `demand`: more pending requests beside the cluster's pods and claims."""
    cache = cache or FitCache()
    desired = resolve(spec, cluster.nodes, cluster.settings, cache)
    strategy = desired.strategy
    demands, skipped = read_demand(cluster.pods, strategy)
    demands += read_claims(cluster.claims, cluster.claim_templates, cluster.device_classes, cluster.pods)
    demands += demand
    used = used_devices(cluster.pods, cluster.nodes, strategy)
    facts, unknown = read_nodes(cluster.nodes, {n: t.config for n, t in desired.targets.items()}, used, strategy)
    skipped += unknown
    if not demands:
        return Outcome(spec, strategy, (), tuple(skipped), tuple(facts), None, spec.nodes_text, desired.warnings)
    if limits is None:
        limits = Limits(max_nodes=spec.nodes.suggest.max_nodes)
    proposal = propose(spec, facts, demands, strategy, limits, cache)
    changes = {c.node: c.config for c in proposal.changes}
    config = add_configs(spec.config_text, proposal.new_configs) if proposal.new_configs else None
    text, lost = spec.nodes_text, False
    if changes:
        text = edit_nodes(spec.nodes_text, changes)
        if not _holds(spec, config, text, cluster, changes, cache):
            text, lost = rewrite(spec.nodes_text, changes), True
            if not _holds(spec, config, text, cluster, changes, cache):
                moved = ", ".join(f"{n} -> {c}" for n, c in sorted(changes.items()))
                raise NotWritable(
                    f"the proposal ({moved}) could not be written into nodes.yaml so that it resolves as proposed"
                )
    return Outcome(
        spec, strategy, tuple(demands), tuple(skipped), tuple(facts), proposal, text, desired.warnings, lost, config
    )


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

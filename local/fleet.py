"""`migops local up --clusters N`: N local clusters side by side, each a whole `migops local` stack.

Each cluster has its own etcd, kube-apiserver, simulated GPU nodes (of its own GPU model: the models
cycle through H100, A100 80GB and A30, so the clusters differ as a fleet's do), admission webhook,
agents and, with a repository, a reconciler following `clusters/<name>` of it. Cluster i lives under
`$MIGOPS_HOME/fleet/<name>` (a home of its own, so `migops local` with MIGOPS_HOME set to it reaches
it alone) and `$MIGOPS_HOME/fleet/kubeconfig` holds one context per cluster, named as the cluster, for
`migops fleet status` and `migops inventory --context`. The first cluster is the canary.

With a fleet repo (`--repo DIR` holding fleet.yaml) the clusters are fleet.yaml's, in wave order; with
`flux`/`argocd` as well, the canary runs the GitOps tool and the git server serving DIR's files, the
other clusters run reconcilers waiting for the MigSync the tool applies, and the tool rolls the repo
out to every cluster through their loopback API servers, wave by wave (migops.local.fleet_gitops).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import yaml

from migops.gitops.fleet import FLEET_FILE, FleetFile
from migops.local import fleet_gitops, stack, state
from migops.local.kubeconfig import write
from migops.mig.catalogue import GpuModel, catalogue

FLEET_DIR = "fleet"
# One model per cluster, cycling: the clusters of a fleet rarely share their GPUs.
MODELS = ("0x233010DE", "0x20B210DE", "0x20B710DE")  # H100 SXM5 80GB, A100 SXM4 80GB, A30
CANARY = "canary"


def names(count: int) -> list[str]:
    return [CANARY, *(f"cluster-{i}" for i in range(1, count))]


def fleet_dir(home: Path) -> Path:
    return home / FLEET_DIR


def cluster_home(home: Path, name: str) -> Path:
    return fleet_dir(home) / name


def kubeconfig_path(home: Path) -> Path:
    return fleet_dir(home) / "kubeconfig"


@dataclass(frozen=True)
class FleetCluster:
    name: str
    home: Path
    started: stack.Started


def cluster_options(
    base: stack.Options, index: int, name: str, models: Sequence[GpuModel] = (), path: str | None = None
) -> stack.Options:
    """Cluster `index`'s options: its own GPU model and its own directory of the fleet repo. With a GitOps
    tool, only the canary (index 0) runs it, serving the fleet repo, and every reconciler waits for the
    MigSync the tool applies; without, each follows `base.repo` itself."""
    model = models[index % len(models)] if models else catalogue().resolve(MODELS[index % len(MODELS)])
    options = replace(base, gpus=[model], path=path or f"clusters/{name}", real_node=False)
    if not (base.flux or base.argocd):
        return options
    return replace(
        options,
        repo=None,
        ref=None,
        flux=base.flux and index == 0,
        argocd=base.argocd and index == 0,
        fleet_repo=fleet_gitops.REPO if index == 0 else None,
        gitops_migsync=True,
    )


def plan(count: int, base: stack.Options) -> tuple[FleetFile | None, list[tuple[str, str | None]]]:
    """The fleet file of `base.repo` (None without one) and (name, path) per cluster, the canary first.
    ValueError when a GitOps tool has no fleet repo, or N disagrees with fleet.yaml."""
    directory = Path(base.repo) if base.repo else None
    fleet = fleet_gitops.read_fleet(directory) if directory and (directory / FLEET_FILE).is_file() else None
    if fleet_gitops.tool_of(base.flux, base.argocd) and fleet is None:
        raise ValueError("--flux/--argocd with --clusters roll out a fleet repo: give --repo DIR holding fleet.yaml")
    if fleet is None or directory is None:
        return None, [(n, None) for n in names(count)]
    if count != len(fleet.clusters):
        raise ValueError(f"--clusters {count}, but {directory / FLEET_FILE} names {len(fleet.clusters)} cluster(s)")
    return fleet, [(c.name, c.path) for wave in fleet.waves for c in wave]


def up(
    home: Path,
    count: int,
    base: stack.Options,
    progress: Callable[[str], None] = lambda _: None,
    models: Sequence[GpuModel] = (),
) -> list[FleetCluster]:
    """Start `count` clusters one after another (with a GitOps tool, then roll the fleet repo out with
    it); on a failure stop every one started. The caller made sure none runs (`down` first). ValueError
    as `plan` says, before anything starts."""
    fleet, clusters = plan(count, base)
    started: list[FleetCluster] = []
    try:
        for i, (name, path) in enumerate(clusters):
            where = cluster_home(home, name)
            with state.locked(where):
                stack.down(where)
                found = stack.up(where, cluster_options(base, i, name, models, path), _prefixed(progress, name))
            started.append(FleetCluster(name, where, found))
        merged = merge_kubeconfigs(kubeconfig_path(home), [(c.name, Path(c.started.state.kubeconfig)) for c in started])
        tool = fleet_gitops.tool_of(base.flux, base.argocd)
        if tool and fleet is not None and base.repo:
            canary = started[0].started.state
            fleet_gitops.rollout(
                tool,
                Path(base.repo),
                fleet,
                Path(canary.workdir),
                Path(canary.kubeconfig),
                canary.flux_git or canary.argocd_git or "",
                {c.name: Path(c.started.state.kubeconfig) for c in started},
                merged,
                progress,
            )
    except BaseException:
        down(home)
        raise
    return started


def _prefixed(progress: Callable[[str], None], name: str) -> Callable[[str], None]:
    return lambda line: progress(f"{name}: {line}")


def merge_kubeconfigs(path: Path, clusters: Sequence[tuple[str, Path]]) -> Path:
    """One kubeconfig, one context per cluster named as the cluster (its admin credentials)."""
    merged: dict = {"apiVersion": "v1", "kind": "Config", "clusters": [], "users": [], "contexts": []}
    for name, source in clusters:
        one = yaml.safe_load(source.read_text())
        merged["clusters"].append({"name": name, "cluster": one["clusters"][0]["cluster"]})
        merged["users"].append({"name": name, "user": one["users"][0]["user"]})
        merged["contexts"].append({"name": name, "context": {"cluster": name, "user": name}})
    merged["current-context"] = clusters[0][0] if clusters else ""
    return write(path, merged)


def running(home: Path) -> list[tuple[str, state.LocalState]]:
    """The clusters recorded under the fleet directory, in start order (the canary first)."""
    found = []
    for where in (
        sorted(fleet_dir(home).iterdir(), key=lambda p: (p.name != CANARY, p.name)) if fleet_dir(home).is_dir() else ()
    ):
        recorded = state.load(where) if where.is_dir() else None
        if recorded is not None:
            found.append((where.name, recorded))
    return found


def down(home: Path) -> list[int]:
    """Stop every cluster of the fleet (the others first, the canary, which may run the GitOps tool
    that talks to them, last); the pids that survived. The fleet directory is removed when all stopped."""
    survivors: list[int] = []
    if not fleet_dir(home).is_dir():
        return survivors
    for where in sorted((p for p in fleet_dir(home).iterdir() if p.is_dir()), key=lambda p: p.name == CANARY):
        with state.locked(where):
            survivors += stack.down(where)
    if not survivors:
        import shutil

        shutil.rmtree(fleet_dir(home), ignore_errors=True)  # the kubeconfig and the clusters' lock files
    return survivors

"""`migops local up --clusters N`: N local clusters side by side, each a whole `migops local` stack.

Each cluster has its own etcd, kube-apiserver, simulated GPU nodes (of its own GPU model: the models
cycle through H100, A100 80GB and A30, so the clusters differ as a fleet's do), admission webhook,
agents and, with a repository, a reconciler following `clusters/<name>` of it. Cluster i lives under
`$MIGOPS_HOME/fleet/<name>` (a home of its own, so `migops local` with MIGOPS_HOME set to it reaches
it alone) and `$MIGOPS_HOME/fleet/kubeconfig` holds one context per cluster, named as the cluster, for
`migops fleet status` and `migops inventory --context`. The first cluster is the canary; with
`flux`/`argocd` it also runs the GitOps tool that manages them all through their loopback API servers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import yaml

from migops.local import stack, state
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


def cluster_options(base: stack.Options, index: int, name: str, models: Sequence[GpuModel] = ()) -> stack.Options:
    """Cluster `index`'s options: its own GPU model and its own directory of the fleet repo; only the
    canary (index 0) runs the GitOps tools asked for."""
    model = models[index % len(models)] if models else catalogue().resolve(MODELS[index % len(MODELS)])
    return replace(
        base,
        gpus=[model],
        path=f"clusters/{name}",
        flux=base.flux and index == 0,
        argocd=base.argocd and index == 0,
        real_node=False,
    )


def up(
    home: Path,
    count: int,
    base: stack.Options,
    progress: Callable[[str], None] = lambda _: None,
    models: Sequence[GpuModel] = (),
) -> list[FleetCluster]:
    """Start `count` clusters one after another; on a failure stop every one started. The caller made
    sure none runs (`down` first)."""
    started: list[FleetCluster] = []
    try:
        for i, name in enumerate(names(count)):
            where = cluster_home(home, name)
            with state.locked(where):
                stack.down(where)
                found = stack.up(where, cluster_options(base, i, name, models), _prefixed(progress, name))
            started.append(FleetCluster(name, where, found))
    except BaseException:
        down(home)
        raise
    merge_kubeconfigs(kubeconfig_path(home), [(c.name, Path(c.started.state.kubeconfig)) for c in started])
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

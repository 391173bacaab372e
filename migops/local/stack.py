"""Everything `migops local up` runs, started in order, recorded together, stopped in reverse.

Order: etcd, kube-apiserver, the cluster's seed (GPU nodes, the GPU Operator's ClusterPolicy and MIG
ConfigMap), the admission webhook (registered before anything else writes MIG objects, so every later
write passes through it), one simulated agent per node, with --flux a loopback git server and Flux's
source- and kustomize-controller (migops.local.flux), the GitOps reconciler when a repo is given,
kube-scheduler. Each process is adopted by the ControlPlane as soon as it starts, so a failure half-way
stops what already runs (nothing is orphaned), the watchdog covers them while `up` runs, and state.json
lists them all for `down`, which stops them in reverse order: the clients before the API server.
`migops local up` and `make demo` both start the stack here.
"""
from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from migops.local import agents, cluster, flux, gitserver, reconciler, state, webhook
from migops.local.binaries import locate
from migops.local.controlplane import ControlPlane
from migops.local.controlplane import identifying_arguments as server_arguments
from migops.local.process import find_by_argument, find_by_environment, is_alive, stop
from migops.mig.catalogue import GpuModel

Progress = Callable[[str], None]
AGENT_PREFIX = "agent/"


@dataclass(frozen=True)
class Options:
    nodes: int
    gpus: Sequence[GpuModel]  # node i gets gpus[i % len(gpus)]
    gpus_per_node: int
    strategy: str
    repo: str | None = None  # run the reconciler on this config repo
    ref: str | None = None
    path: str = ""
    interval: str = "10s"  # the reconciler's poll interval
    flux: bool = False  # also run Flux (source- and kustomize-controller) on a loopback git server


@dataclass(frozen=True)
class Started:
    state: state.LocalState
    nodes: list[cluster.NodeSpec]
    webhook_url: str
    unready_agents: list[str]  # nodes whose agent had not reported a state yet
    seconds: float


def up(home: Path, options: Options, progress: Progress = lambda _: None) -> Started:
    """Start the whole stack for `home` (the caller holds state.locked(home) and has cleaned up any
    stale state). Raises ControlPlaneError, ApiException, TimeoutError or RuntimeError after stopping
    whatever had started."""
    nodes = cluster.plan_nodes(options.nodes, list(options.gpus), options.gpus_per_node, options.strategy)
    binaries = locate(echo_build=True)
    plane = ControlPlane(binaries, state.local_dir(home), watchdog=True)
    began = time.monotonic()
    try:
        plane.start()
        progress(f"etcd and kube-apiserver ready at {plane.url} ({plane.ready_seconds:.1f}s)")
        with plane.api_client() as api:
            cluster.seed(api, nodes, options.strategy)
            progress(f"seeded {len(nodes)} GPU node(s) and the GPU Operator's ClusterPolicy ({options.strategy})")
            hook = webhook.start(api, plane.workdir, plane.admin_kubeconfig, log=plane.logs / "webhook.log")
            plane.adopt("webhook", hook.popen, hook.ref)
            progress(f"admission webhook registered at {hook.url}")
            agents.seed_mig_config(api)
            for node, (popen, ref) in agents.start(plane.workdir, plane.admin_kubeconfig,
                                                   [(n.name, n.gpu.device_id, n.gpus) for n in nodes]).items():
                plane.adopt(AGENT_PREFIX + node, popen, ref)
            unready = agents.wait_ready(api, [n.name for n in nodes])
            progress(f"{len(nodes) - len(unready)} of {len(nodes)} simulated agent(s) reporting")
            flux_git = None
            if options.flux:
                flux_git = flux.up(api, plane, progress)
            reconciler_url = None
            if options.repo:
                rec = reconciler.start(api, plane.workdir, plane.admin_kubeconfig, options.repo, options.ref,
                                       options.path, interval=options.interval)
                plane.adopt("reconciler", rec.popen, rec.ref)
                reconciler_url = rec.url
                progress(f"reconciler following {options.repo} (every {options.interval}, and at once on POST /hook)")
        plane.start_scheduler()
        progress("kube-scheduler running")
        recorded = state.LocalState(
            api_url=plane.url, kubeconfig=str(plane.admin_kubeconfig), bin_dir=str(binaries.directory),
            workdir=str(plane.workdir), strategy=options.strategy, processes=plane.processes,
            nodes=[state.NodeRecord(n.name, n.gpu.product, n.gpu.device_id, n.gpus) for n in nodes],
            ready_seconds=plane.ready_seconds, webhook_url=hook.url, repo=options.repo,
            reconciler_url=reconciler_url, flux_git=flux_git)
        state.save(home, recorded)
        plane.detach()
    except BaseException:
        plane.stop()
        raise
    return Started(recorded, nodes, hook.url, unready, time.monotonic() - began)


def running_agents(current: state.LocalState) -> list[str]:
    return [name[len(AGENT_PREFIX):] for name, ref in current.processes.items()
            if name.startswith(AGENT_PREFIX) and is_alive(ref)]


def down(home: Path) -> list[int]:
    """Stop every process of this home (recorded, or found by an argument only they are started with,
    for when state.json is lost) in reverse start order; delete its directory. The pids that survived."""
    workdir = state.local_dir(home)
    recorded = state.load(home)
    refs = list(recorded.processes.values())[::-1] if recorded else []
    # Leftovers found by command line, clients first (they talk to the servers).
    refs += [r for r in find_by_environment(flux.WORKDIR_ENV, str(workdir)) if r not in refs]
    for arg in (*reconciler.identifying_arguments(workdir), *gitserver.identifying_arguments(flux.git_root(workdir)),
                *agents.identifying_arguments(workdir), *webhook.identifying_arguments(workdir),
                *server_arguments(workdir)):
        refs += [r for r in find_by_argument(arg) if r not in refs]
    # A half-dead control plane (one server crashed) has nothing to shut down gracefully, and
    # kube-apiserver without its etcd would sit out the whole grace period.
    grace = 15.0 if all(is_alive(r) for r in refs) else 3.0
    for ref in refs:
        try:
            stop(ref, timeout=grace)
        except RuntimeError:
            pass
    survivors = [r.pid for r in refs if is_alive(r)]
    if not survivors:
        shutil.rmtree(workdir, ignore_errors=True)
    return survivors

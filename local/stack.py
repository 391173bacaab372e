"""Everything `migops local up` runs, started in order, recorded together, stopped in reverse.

Order: etcd, kube-apiserver, with `real_node` kube-controller-manager and the real node (containerd,
kubelet, kube-proxy: migops.local.realnode; its network is made before the API server, which serves on
the node address), the cluster's seed (GPU nodes, the GPU Operator's ClusterPolicy and MIG
ConfigMap), the admission webhook (as the manifests' ServiceAccount migops-webhook; registered before
anything else writes MIG objects, so every later write passes through it), the agents' ServiceAccount,
RBAC and own-node policy (manifests/base/agent), one simulated agent per node with a token bound to its Node, with --flux a loopback git server and Flux's
source- and kustomize-controller (migops.local.flux), with --argocd redis and Argo CD's repo-server and
application-controller (migops.local.argocd, on the same git server), the GitOps reconciler when a repo is given (as
ServiceAccount migops-reconciler, with the manifests' RBAC and the applied record's policy),
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

from kubernetes.client import ApiClient

from migops.api.names import LOCAL_MANAGER
from migops.kube import ssa
from migops.local import (
    agent_identity,
    agents,
    argocd,
    cluster,
    flux,
    gitserver,
    identity,
    nodeclean,
    realnode,
    reconciler,
    state,
    webhook,
)
from migops.local.binaries import locate
from migops.local.controlplane import ControlPlane
from migops.local.controlplane import identifying_arguments as server_arguments
from migops.local.process import find_by_argument, find_by_environment, is_alive, stop
from migops.mig import dra
from migops.mig.catalogue import GpuModel
from migops.mig.validate import Strategy

Progress = Callable[[str], None]
AGENT_PREFIX = "agent/"


@dataclass(frozen=True)
class Options:
    nodes: int
    gpus: Sequence[GpuModel]  # node i gets gpus[i % len(gpus)]
    gpus_per_node: int
    strategy: Strategy
    repo: str | None = None  # run the reconciler on this config repo
    ref: str | None = None
    path: str = ""
    interval: str = "10s"  # the reconciler's poll interval
    real_node: bool = False  # also run the real node `migops-node` (root; one per machine)
    flux: bool = False  # also run Flux (source- and kustomize-controller) on a loopback git server
    dra: bool = False  # agents publish the NVIDIA DRA driver's ResourceSlices; DeviceClasses per profile
    argocd: bool = False  # also run Argo CD (redis, repo-server, application-controller), same git server
    # A fleet's canary: with flux/argocd, serve this empty bare repository and start the tool with no
    # object of its own (the fleet's come once every cluster is up: migops.local.fleet_gitops).
    fleet_repo: str | None = None
    # Run the reconciler on the MigSync a GitOps tool applies (none is made here; a fleet's clusters).
    gitops_migsync: bool = False


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
    binaries = locate(node=options.real_node, echo_build=True)
    began = time.monotonic()
    real: realnode.RealNode | None = None
    real_spec: cluster.NodeSpec | None = None
    if options.real_node:
        real = realnode.RealNode(binaries, state.local_dir(home))
        real.prepare()  # the machine's lock and the node's bridge, before the API server binds its address
        real_spec = cluster.plan_node(real.name, options.gpus[0], options.gpus_per_node, options.strategy)
    plane = ControlPlane(binaries, state.local_dir(home), watchdog=True, node_address=real.address if real else None)
    try:
        plane.start()
        progress(f"etcd and kube-apiserver ready at {plane.url} ({plane.ready_seconds:.1f}s)")
        if real is not None:
            plane.start_controller_manager()
            real.join(plane)
            progress(
                f"real node {real.name} Ready at {real.address} ({real.ready_seconds:.1f}s): containerd, "
                "kubelet, kube-proxy; kube-controller-manager"
            )
        with plane.api_client() as api:
            cluster.seed(api, nodes, options.strategy)
            if real_spec is not None:
                cluster.apply_real_node(api, real_spec)
            progress(f"seeded {len(nodes)} GPU node(s) and the GPU Operator's ClusterPolicy ({options.strategy})")
            # The webhook and the reconciler run as the manifests' ServiceAccounts (migops.local.identity).
            hook_identity = identity.kubeconfig_for(
                api, plane.url, plane.ca_pem, identity.WEBHOOK, webhook.kubeconfig_path(plane.workdir)
            )
            hook = webhook.start(api, plane.workdir, hook_identity, log=plane.logs / "webhook.log")
            plane.adopt("webhook", hook.popen, hook.ref)
            progress(f"admission webhook registered at {hook.url}")
            agents.seed_mig_config(api)
            agent_identity.install(api, dra=options.dra)
            if options.dra:
                models = {n.gpu for n in nodes} | ({real_spec.gpu} if real_spec else set())
                classes = [dra.driver_device_class(), *dra.profile_device_classes(models)]
                for body in classes:
                    ssa.apply(api, body, field_manager=LOCAL_MANAGER, force=True)
                progress(
                    f"DRA: {len(classes)} DeviceClasses (mig.nvidia.com, mig-<profile>.nvidia.com); the agents "
                    "publish ResourceSlices as NVIDIA's DRA driver would (a stand-in)"
                )
            gpu_nodes = [*nodes, *([real_spec] if real_spec else [])]
            for n in gpu_nodes:
                agent_identity.kubeconfig_for_node(
                    api, plane.url, plane.ca_pem, n.name, agents.kubeconfig_path(plane.workdir, n.name)
                )
            if gpu_nodes:
                agent_identity.wait_in_force(
                    agents.kubeconfig_path(plane.workdir, gpu_nodes[0].name), gpu_nodes[0].name
                )
            state_files = {real.name: real.layout.gpu_dir / "gpus.json"} if real else {}
            for node, (popen, ref) in agents.start(
                plane.workdir,
                [(n.name, n.gpu.device_id, n.gpus) for n in gpu_nodes],
                state_files=state_files,
                dra=options.dra,
            ).items():
                plane.adopt(AGENT_PREFIX + node, popen, ref)
            unready = agents.wait_ready(api, [n.name for n in gpu_nodes])
            progress(f"{len(gpu_nodes) - len(unready)} of {len(gpu_nodes)} simulated agent(s) reporting")
            flux_git, argocd_git = _gitops(api, plane, options, progress)
            reconciler_url = None
            followed = options.repo
            if options.repo or options.gitops_migsync:
                rec_identity = identity.kubeconfig_for(
                    api, plane.url, plane.ca_pem, identity.RECONCILER, reconciler.kubeconfig_path(plane.workdir)
                )
                rec = reconciler.start(
                    api, plane.workdir, rec_identity, options.repo, options.ref, options.path, interval=options.interval
                )
                plane.adopt("reconciler", rec.popen, rec.ref)
                reconciler_url, followed = rec.url, rec.repo or None
                progress(
                    f"reconciler following {followed} (every {options.interval}, and at once on POST /hook)"
                    if followed
                    else f"reconciler waiting for its MigSync {reconciler.NAMESPACE}/{reconciler.MIGSYNC} (applied by the GitOps tool)"
                )
        plane.start_scheduler()
        progress("kube-scheduler running")
        recorded = state.LocalState(
            api_url=plane.url,
            kubeconfig=str(plane.admin_kubeconfig),
            bin_dir=str(binaries.directory),
            workdir=str(plane.workdir),
            strategy=options.strategy,
            processes=plane.processes,
            nodes=[state.NodeRecord(n.name, n.gpu.product, n.gpu.device_id, n.gpus) for n in gpu_nodes],
            ready_seconds=plane.ready_seconds,
            webhook_url=hook.url,
            repo=followed,
            reconciler_url=reconciler_url,
            flux_git=flux_git,
            argocd_git=argocd_git,
            real_node=str(real.layout.root) if real else None,
        )
        state.save(home, recorded)
        plane.detach()
    except BaseException:
        plane.stop()
        if real is not None:
            real.cleanup()
        raise
    return Started(recorded, gpu_nodes, hook.url, unready, time.monotonic() - began)


def _gitops(api: ApiClient, plane: ControlPlane, options: Options, progress: Progress) -> tuple[str | None, str | None]:
    """Flux and Argo CD as asked (one git server for both): the URLs they follow (flux_git, argocd_git)."""
    if options.fleet_repo is not None:
        if options.flux:
            return flux.serve_fleet(api, plane, progress, options.fleet_repo), None
        if options.argocd:
            return None, argocd.serve_fleet(api, plane, progress, options.fleet_repo)
        return None, None
    flux_git = flux.up(api, plane, progress) if options.flux else None
    argocd_git = None
    if options.argocd:
        argocd_git = argocd.up(api, plane, progress, git_base=flux_git.rsplit("/", 1)[0] if flux_git else None)
    return flux_git, argocd_git


def running_agents(current: state.LocalState) -> list[str]:
    return [
        name[len(AGENT_PREFIX) :]
        for name, ref in current.processes.items()
        if name.startswith(AGENT_PREFIX) and is_alive(ref)
    ]


def down(home: Path) -> list[int]:
    """Stop every process of this home (recorded, or found by an argument only they are started with,
    for when state.json is lost) in reverse start order; delete its directory. The pids that survived."""
    workdir = state.local_dir(home)
    recorded = state.load(home)
    refs = list(recorded.processes.values())[::-1] if recorded else []
    # Leftovers found by command line, clients first (they talk to the servers). Flux's controllers and
    # Argo CD's redis, repo-server and controller carry the workdir in their environment.
    refs += [r for r in find_by_environment(flux.WORKDIR_ENV, str(workdir)) if r not in refs]
    node_dir = Path(recorded.real_node) if recorded and recorded.real_node else None
    if node_dir is None and nodeclean.NODE_DIR.exists() and nodeclean.last_owner_is(workdir):
        node_dir = nodeclean.NODE_DIR  # an `up --real-node` that died before it recorded its state
    if node_dir is not None and nodeclean.another_owner_holds_the_machine(workdir):
        node_dir = None  # our node is long gone; the one running now (same directory) is someone else's
    node_args = nodeclean.node_arguments(node_dir) if node_dir else ()
    for arg in (
        *reconciler.identifying_arguments(workdir),
        *gitserver.identifying_arguments(flux.git_root(workdir)),
        *agents.identifying_arguments(workdir),
        *webhook.identifying_arguments(workdir),
        *node_args,
        *server_arguments(workdir),
    ):
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
    if node_dir is not None:
        # The real node: shims, containers, mounts, iptables, the bridge, cgroups... A directory with a
        # mount left under it is kept (deleting it would descend into the mount).
        kube_proxy = Path(recorded.bin_dir) / "kube-proxy" if recorded else None
        problems = nodeclean.sweep(node_dir, kube_proxy, workdir)
        if problems:
            raise RuntimeError("the real node could not be removed completely: " + "; ".join(problems))
    if not survivors:
        shutil.rmtree(workdir, ignore_errors=True)
    return survivors

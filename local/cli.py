"""`migops local up|down|status|env`: a real local control plane that looks like a GPU cluster.

`up` starts the local stack (migops.local.stack: etcd, kube-apiserver, GPU nodes seeded as a GPU
Operator cluster, the admission webhook, one simulated agent per node, the reconciler with --repo,
kube-scheduler), leaves it running detached, and records it under $MIGOPS_HOME/local/. Nodes cycle through the given GPU models: node i gets
`gpus[i % len(gpus)]`, with `--gpus-per-node` GPUs each. `--flux` adds Flux's controllers and a git server.
"""

from __future__ import annotations

import argparse
import dataclasses
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from migops.cli.usage import EXIT_INVALID, EXIT_OK, UsageError
from migops.local import reconciler

if TYPE_CHECKING:
    from migops.local.stack import Started

DEFAULT_GPU = "0x233010DE"  # H100 SXM5 80GB
DEFAULT_STRATEGY = "single"
DEFAULT_GPUS_PER_NODE = 8
# A config repo of one's own, from a directory holding config.yaml and nodes.yaml.
_REPO_RECIPE = "git init DIR && git -C DIR add -A && git -C DIR commit -m 'MIG config', then --repo DIR"


def register(sub: argparse._SubParsersAction) -> None:
    """Add `migops local ...` to the command tree."""
    local = sub.add_parser(
        "local",
        help="run a local Kubernetes control plane with GPU nodes",
        description="A real etcd + kube-apiserver on loopback, seeded with GPU nodes "
        "(state under $MIGOPS_HOME, default ~/.migops).",
    )
    cmds = local.add_subparsers(dest="local_command", metavar="SUBCOMMAND", required=True)

    up = cmds.add_parser(
        "up",
        help="start the control plane and seed GPU nodes",
        description="Start etcd, kube-apiserver and kube-scheduler on loopback, seed --nodes GPU nodes as a "
        "GPU Operator cluster would label them (simulated GPUs, one simulated MIG agent each), register the "
        "admission webhook, and with --repo run the GitOps reconciler on a config repo. It returns once the "
        "cluster is ready and keeps running detached until `migops local down`.",
    )
    up.add_argument("--nodes", type=int, default=1, metavar="N", help="number of nodes (default 1)")
    up.add_argument(
        "--gpu",
        action="append",
        metavar="GPU",
        help="GPU model: PCI device ID (0x233010DE) or GFD product name; repeat for "
        f"several models, nodes cycle through them (default {DEFAULT_GPU})",
    )
    up.add_argument(
        "--gpus-per-node",
        type=int,
        default=DEFAULT_GPUS_PER_NODE,
        metavar="N",
        help=f"GPUs on each node (default {DEFAULT_GPUS_PER_NODE})",
    )
    up.add_argument(
        "--strategy",
        choices=("none", "single", "mixed"),
        default=DEFAULT_STRATEGY,
        help=f"the GPU Operator's MIG strategy (default {DEFAULT_STRATEGY})",
    )
    up.add_argument(
        "--real-node",
        action="store_true",
        help="also run one real node, migops-node, that runs pods (containerd, kubelet, kube-proxy, "
        "kube-controller-manager; root, one per machine), labelled as a GPU node of the first "
        "--gpu model",
    )
    up.add_argument(
        "--flux",
        action="store_true",
        help="also run Flux's source-controller and kustomize-controller (built once from their Go "
        "modules, hack/flux-binaries.sh) syncing the MIG ConfigMap from a loopback git server",
    )
    up.add_argument(
        "--dra",
        action="store_true",
        help="Dynamic Resource Allocation: the simulated agents publish ResourceSlices for their MIG devices "
        "in NVIDIA's DRA driver's attribute contract (a stand-in for the driver), with a DeviceClass per "
        "profile, so kube-scheduler allocates ResourceClaims for MIG devices (docs/dra.md)",
    )
    up.add_argument(
        "--argocd",
        action="store_true",
        help="also run Argo CD's repo-server and application-controller (built once from its Go module, "
        "hack/argocd-binaries.sh) and redis, syncing the MIG ConfigMap from a loopback git server",
    )
    up.add_argument(
        "--clusters",
        type=int,
        default=0,
        metavar="N",
        help="N clusters side by side, each with its own control plane, GPU nodes (models cycling through "
        "H100, A100 80GB, A30, or --gpu's), webhook, agents and, with --repo, a reconciler following "
        "clusters/<name> of it (a fleet repo's fleet.yaml names the clusters and their waves); with --flux or "
        "--argocd as well, the first, the canary, runs the tool and serves the fleet repo, and the tool rolls "
        "it out to every cluster, wave by wave (docs/fleet.md)",
    )
    reconciler.add_arguments(up)
    up.set_defaults(func=_up)

    image = cmds.add_parser(
        "image",
        help="build the migops image from the Dockerfile and load it into the real node",
        description="Build the product image from the repository's Dockerfile on a base made "
        "from Debian packages (no image registry is reached; docs/deploy-image.md), save it "
        "under ~/.cache/migops/image and import it into the real node's containerd when "
        "`migops local up --real-node` runs. Prints the image reference.",
    )
    image.add_argument("--no-load", action="store_true", help="build only; do not import it into the real node")
    image.set_defaults(func=_image)

    dep = cmds.add_parser(
        "deploy",
        help="run migops in pods on the real node: apply an overlay, wait until Available",
        description="Apply a kustomize overlay (default manifests/overlays/local) with the image "
        "`migops local image` builds (built and loaded first when the node lacks it), and wait "
        "until every Deployment and DaemonSet is Available. The in-cluster webhook, reconciler "
        "and agent replace the host processes `local up` started for the real node. "
        "`kubectl delete migsync --all -A --wait`, then `kubectl delete -k manifests/overlays/local` removes "
        "it all (MigSyncs first: the reconciler's finalizer releases their nodes).",
    )
    dep.add_argument(
        "--overlay",
        default="local",
        metavar="NAME",
        help="an overlay under manifests/overlays/ or a directory (default local)",
    )
    dep.add_argument("--timeout", type=float, default=300.0, metavar="S", help="wait at most this long (default 300)")
    dep.set_defaults(func=_deploy)

    down = cmds.add_parser(
        "down",
        help="stop the control plane and delete its data",
        description="Stop every process `migops local up` started (the real node's too, with its mounts and "
        "network) and delete the local cluster's state under $MIGOPS_HOME/local.",
    )
    down.set_defaults(func=_down)
    status = cmds.add_parser(
        "status",
        help="is it running; API server URL; nodes",
        description="Say whether the local cluster is running, its API server URL and kubeconfig, its nodes and "
        "what else runs (reconciler, Flux, Argo CD, the real node). Exit 0 running, 1 not.",
    )
    status.set_defaults(func=_status)
    env = cmds.add_parser(
        "env",
        help='shell exports for kubectl: eval "$(migops local env)"',
        description="Print the shell exports that point kubectl and migops at the local cluster: PATH (its "
        'kubectl first, then this migops), KUBECONFIG and MIGOPS_HOME. Use: eval "$(migops local env)".',
    )
    env.set_defaults(func=_env)


def _self() -> str:
    """How to run this migops from any shell: `migops` when that is the one on PATH, else its full path
    (a virtualenv's bin that nothing put on PATH; `local env` puts it there)."""
    import shutil

    mine = Path(sys.executable).parent / "migops"
    on_path = shutil.which("migops")
    if not mine.exists() or (on_path and Path(on_path).resolve() == mine.resolve()):
        return "migops"
    return shlex.quote(str(mine))


def _home() -> Path:
    from migops.local.state import migops_home

    return migops_home()


def _say(message: str) -> None:
    print(f"migops local: {message}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- up
def _up(args: argparse.Namespace) -> int:
    if args.nodes < 1:
        raise UsageError("--nodes must be at least 1")
    if args.gpus_per_node < 1:
        raise UsageError("--gpus-per-node must be at least 1")
    if args.clusters:
        return _up_fleet(args)
    gpus = _resolve_gpus(args.gpu or [DEFAULT_GPU])
    try:
        plain = reconciler.plain_directory(args.repo) if args.repo else None
    except ValueError as exc:
        raise UsageError(
            f"{exc}: give a git repository (path or URL) or a directory of config.yaml and nodes.yaml"
        ) from None

    from kubernetes.client.exceptions import ApiException

    from migops.local import stack, state
    from migops.local.binaries import BinariesUnavailable
    from migops.local.controlplane import ControlPlaneError

    home = _home()
    from migops.local.realnode import RealNodeError

    options = stack.Options(
        args.nodes,
        gpus,
        args.gpus_per_node,
        args.strategy,
        args.repo,
        args.ref,
        args.path,
        real_node=args.real_node,
        flux=args.flux,
        dra=args.dra,
        argocd=args.argocd,
    )
    with state.locked(home):
        current = state.load(home)
        if current is not None and current.running():
            _say(
                f"already up at {current.api_url} (state in {state.local_dir(home)}); nothing "
                "to do. Run `migops local down` first to change nodes, GPUs or strategy."
            )
            return EXIT_OK
        stack.down(home)  # stale state from a crash or reboot: start from scratch
        logs = state.local_dir(home) / "logs"
        try:
            started = stack.up(home, options, progress=lambda line: _say(line))
        except BinariesUnavailable as exc:
            _say(str(exc))
            return EXIT_INVALID
        except ControlPlaneError as exc:
            _say(f"failed to start: {exc}\n(logs kept in {logs})")
            return EXIT_INVALID
        except RealNodeError as exc:
            _say(f"the real node did not start: {exc}")
            return EXIT_INVALID
        except (ApiException, TimeoutError, RuntimeError) as exc:
            _say(f"API server up, but starting the cluster failed: {exc}\n(logs kept in {logs})")
            return EXIT_INVALID
    _print_started(args, started, gpus, plain)
    return EXIT_OK


def _print_started(args: argparse.Namespace, started: Started, gpus: list, plain: Path | None) -> None:
    """What `up` started and how to use it; `plain`: the --repo directory committed into a throwaway repository."""
    plane = started.state
    models = ", ".join(sorted({f"{g.product} ({g.device_id})" for g in gpus}))
    print(
        f"migops local: up at {plane.api_url} in {started.seconds:.1f}s "
        f"(API server ready after {plane.ready_seconds:.1f}s)"
    )
    print(f"  nodes:      {', '.join(n.name for n in started.nodes)}: {args.gpus_per_node} x {models}")
    if plane.real_node:
        print(
            f"  real node:  migops-node runs pods (containerd, kubelet, kube-proxy; state {plane.real_node}); "
            "workloads: nodeSelector kubernetes.io/hostname=migops-node; images: "
            f"ctr --address {plane.real_node}/containerd/containerd.sock -n k8s.io images import --local FILE"
        )
    print(f"  strategy:   {args.strategy} (ClusterPolicy cluster-policy)")
    slow = started.unready_agents
    print(
        f"  agents:     one simulated MIG agent per node{' (not reporting yet: ' + ', '.join(slow) + ')' if slow else ''}"
    )
    print(f"  webhook:    {started.webhook_url} (registered as migops-webhook)")
    if args.repo:
        print(
            f"  reconciler: following {plane.repo} (log {Path(plane.workdir) / 'logs' / 'reconciler.log'}; "
            "`migops status`)"
        )
    if plain is not None:
        print(
            f"              {args.repo} is not a git repository: its files were committed once into that "
            f"throwaway repository (deleted by `migops local down`), and later edits to them are not followed; "
            f"to follow your own commits: {_REPO_RECIPE}"
        )
    if plane.flux_git:
        print(
            f"  flux:       source-controller + kustomize-controller (processes, users flux-source-controller and "
            f"flux-kustomize-controller); git clone {plane.flux_git}, edit mig-config/config.yaml, push; "
            "`kubectl get gitrepository,kustomization -n flux-system`"
        )
    if plane.argocd_git:
        print(
            "  argocd:     repo-server + application-controller + redis (processes; the controller as "
            "ServiceAccount argocd/argocd-application-controller); "
            f"git clone {plane.argocd_git}, edit mig-config/configmap.yaml, push; `kubectl get application -n argocd`"
        )
    print("  scheduler:  kube-scheduler binds Pods to the nodes by their allocatable resources")
    if args.dra:
        print(
            "  dra:        ResourceSlices per node (driver gpu.nvidia.com, published by the agents as a stand-in); "
            "claim a device with deviceClassName mig-<profile>.nvidia.com (`kubectl get deviceclasses`)"
        )
    print(f"  kubeconfig: {plane.kubeconfig}")
    print(f'  next:       eval "$({_self()} local env)"; kubectl get nodes --show-labels')


def _up_fleet(args: argparse.Namespace) -> int:
    """`up --clusters N` (migops.local.fleet)."""
    from migops.local import fleet, stack

    if args.clusters < 1 or args.real_node:
        raise UsageError("--clusters must be at least 1, and a fleet has no real node")
    home = _home()
    if fleet.running(home):
        _say(f"a fleet is already up under {fleet.fleet_dir(home)}; `migops local down` first")
        return EXIT_OK
    models = _resolve_gpus(args.gpu) if args.gpu else ()
    base = stack.Options(
        args.nodes,
        [],
        args.gpus_per_node,
        args.strategy,
        args.repo,
        args.ref,
        "",
        flux=args.flux,
        dra=args.dra,
        argocd=args.argocd,
    )
    try:
        started = fleet.up(home, args.clusters, base, progress=_say, models=models)
    except Exception as exc:  # noqa: BLE001 - every cluster was stopped; say why
        _say(f"the fleet did not start: {exc}")
        return EXIT_INVALID
    canary = started[0].started.state
    served = canary.flux_git or canary.argocd_git
    for c in started:
        node = c.started.nodes[0]
        follows = f", reconciler following {c.started.state.repo or 'the MigSync ' + ('Flux' if args.flux else 'Argo CD') + ' applies'}"
        print(
            f"migops local: {c.name} up at {c.started.state.api_url}: {len(c.started.nodes)} x "
            f"{node.gpus} x {node.gpu.product}" + (follows if args.repo else "")
        )
    print(
        f"  kubeconfig: {fleet.kubeconfig_path(home)} (one context per cluster); `migops fleet status "
        f"--kubeconfig {fleet.kubeconfig_path(home)}`"
    )
    if served:
        print(
            f"  fleet repo: {served} (clone, change, `migops validate`, commit, `migops fleet pin HEAD`, commit, push)"
        )
    return EXIT_OK


def _resolve_gpus(names: list[str]) -> list:
    from migops.mig.catalogue import UnknownGpuError, catalogue

    cat = catalogue()
    try:
        return [cat.resolve(n) for n in names]
    except UnknownGpuError as exc:
        raise UsageError(str(exc)) from None


# --------------------------------------------------------------------------- image
def _image(args: argparse.Namespace) -> int:
    from migops.local import image, state

    try:
        built = image.build(log=lambda line: _say(line) if not line.startswith(" ") else None)
    except image.ImageError as exc:
        _say(str(exc))
        return EXIT_INVALID
    _say(
        f"built {built.reference} in {built.base_seconds + built.build_seconds:.0f}s "
        f"({built.size / 2**20:.0f} MiB; saved to {built.archive})"
    )
    if not args.no_load:
        from migops.local.binaries import locate
        from migops.local.realnode import RealNode, RealNodeError

        current = state.load(_home())
        if current is None or not current.running() or not current.real_node:
            _say("no real node running (`migops local up --real-node`): not loaded anywhere")
        else:
            try:
                RealNode(locate(node=True), Path(current.real_node)).load_image(built.archive)
            except RealNodeError as exc:
                _say(str(exc))
                return EXIT_INVALID
            _say("loaded into the real node's containerd (migops-node)")
    print(built.reference)
    return EXIT_OK


# --------------------------------------------------------------------------- deploy
def _deploy(args: argparse.Namespace) -> int:
    from migops.local import deploy, image, state
    from migops.local.binaries import locate
    from migops.local.process import stop
    from migops.local.realnode import NODE_NAME, RealNode, RealNodeError

    home = _home()
    try:
        overlay = deploy.overlay_dir(args.overlay)
    except deploy.DeployError as exc:
        raise UsageError(str(exc)) from None
    with state.locked(home):
        current = state.load(home)
        if current is None or not current.running() or not current.real_node:
            _say("needs a running cluster with the real node: `migops local up --real-node` first")
            return EXIT_INVALID
        binaries = locate(node=True)
        node = RealNode(binaries, Path(current.real_node))
        try:
            ref = deploy.ensure_image(node, log=lambda line: None)
        except (image.ImageError, RealNodeError) as exc:
            _say(str(exc))
            return EXIT_INVALID
        _say(f"image {ref} is in {NODE_NAME}'s containerd")
        # The pods replace the host processes that served the real node.
        replaced = {
            name: ref_
            for name, ref_ in current.processes.items()
            if name in ("webhook", "reconciler", f"agent/{NODE_NAME}")
        }
        for proc in replaced.values():
            stop(proc, timeout=15)
        record = next((n for n in current.nodes if n.name == NODE_NAME), None)
        gpus = f"{record.gpus}x{record.device_id}" if record else None
        current = dataclasses.replace(
            current,
            processes={k: v for k, v in current.processes.items() if k not in replaced},
            webhook_url=None,
            reconciler_url=None,
        )
        state.save(home, current)
        if replaced:
            _say(f"stopped the host {', '.join(replaced)} (pods take over)")
        from kubernetes import config

        try:
            with config.new_client_from_config(config_file=current.kubeconfig) as api:
                seconds = deploy.deploy(
                    api,
                    binaries.kubectl,
                    Path(current.kubeconfig),
                    overlay=overlay,
                    gpus=gpus,
                    repo=current.repo,
                    timeout=args.timeout,
                    log=_say,
                )
        except deploy.DeployError as exc:
            _say(str(exc))
            return EXIT_INVALID
    print(f"migops local: {overlay.name} deployed; every workload Available after {seconds:.1f}s")
    print("  webhook:    Deployment migops-webhook (2 replicas) behind Service migops-webhook")
    print(
        f"  reconciler: Deployment migops-reconciler (leader-elected){' following ' + current.repo if current.repo else ''}"
    )
    print(f"  agent:      DaemonSet migops-agent on {NODE_NAME} ({gpus or 'simulated'} GPUs)")
    print(f"  remove:     kubectl delete migsync --all -A --wait && kubectl delete -k {overlay}")
    return EXIT_OK


# --------------------------------------------------------------------------- down
def _down(args: argparse.Namespace) -> int:
    from migops.local import stack, state

    home = _home()
    from migops.local import fleet

    if fleet.fleet_dir(home).exists():
        survivors = fleet.down(home)
        if survivors:
            _say(f"could not stop pids {', '.join(map(str, survivors))} of the fleet")
            return EXIT_INVALID
        print(f"migops local: the fleet under {fleet.fleet_dir(home)} is down")
        if not state.local_dir(home).exists():
            return EXIT_OK
    with state.locked(home):
        if not state.local_dir(home).exists():
            _say(f"not running (nothing under {state.local_dir(home)})")
            return EXIT_OK
        try:
            survivors = stack.down(home)
        except RuntimeError as exc:  # the real node's sweep: says what is left
            _say(str(exc))
            return EXIT_INVALID
    if survivors:
        _say(f"could not stop pids {', '.join(map(str, survivors))}")
        return EXIT_INVALID
    print(f"migops local: down; no server, webhook, agent or reconciler left, {state.local_dir(home)} removed")
    return EXIT_OK


# --------------------------------------------------------------------------- status / env
def _status(args: argparse.Namespace) -> int:
    from migops.local import state

    home = _home()
    current = state.load(home)
    if current is None:
        print(f"migops local: down (nothing under {state.local_dir(home)})")
        return EXIT_INVALID
    if not current.running():
        print(
            f"migops local: down, stale state in {state.local_dir(home)} (servers gone); "
            "`migops local down` cleans up, `migops local up` starts afresh"
        )
        return EXIT_INVALID
    print(f"migops local: up at {current.api_url}")
    print(f"  home:       {home}")
    print(f"  kubeconfig: {current.kubeconfig}")
    print(f"  binaries:   {current.bin_dir}")
    print(f"  strategy:   {current.strategy}")
    from migops.local import stack
    from migops.local.process import is_alive

    for name, ref in current.processes.items():
        if not name.startswith(stack.AGENT_PREFIX):
            print(f"  {name + ':':<15} pid {ref.pid}{'' if is_alive(ref) else ' (exited)'}")
    print(f"  agents:         {len(stack.running_agents(current))} of {len(current.nodes)} running")
    if current.webhook_url:
        print(f"  webhook url:    {current.webhook_url}")
    if current.repo:
        print(f"  config repo:    {current.repo}")
    if current.real_node:
        print(f"  real node:      migops-node (containerd, kubelet, kube-proxy; {current.real_node})")
    if current.flux_git:
        print(f"  flux git:       {current.flux_git}")
    if current.argocd_git:
        print(f"  argocd git:     {current.argocd_git}")
    print("  nodes:")
    for line in _node_lines(Path(current.kubeconfig)):
        print(f"    {line}")
    return EXIT_OK


def _node_lines(kubeconfig_path: Path) -> list[str]:
    """Live node summary from the API server (labels change as migops works)."""
    from kubernetes import client as k8s
    from kubernetes import config

    from migops.mig.gfd import DEVICE_ID_LABEL, GPU_COUNT_LABEL, GPU_PRODUCT_LABEL, MIG_CONFIG_LABEL

    try:
        with config.new_client_from_config(config_file=str(kubeconfig_path)) as api:
            items = k8s.CoreV1Api(api).list_node(_request_timeout=10).items
    except Exception as exc:  # noqa: BLE001 - status must report, not crash
        return [f"(could not list nodes: {exc})"]
    lines = []
    for node in items:
        labels = node.metadata.labels or {}
        lines.append(
            "  ".join(
                [
                    node.metadata.name,
                    labels.get(GPU_PRODUCT_LABEL, "-"),
                    f"x{labels.get(GPU_COUNT_LABEL, '?')}",
                    labels.get(DEVICE_ID_LABEL, "-"),
                    f"mig.config={labels.get(MIG_CONFIG_LABEL, '-')}",
                ]
            )
        )
    return lines or ["(none)"]


def _env(args: argparse.Namespace) -> int:
    from migops.local import state

    current = state.load(_home())
    if current is None or not current.running():
        _say("not running; start it with `migops local up`")
        return EXIT_INVALID
    # Our kubectl first: the one on PATH may be another version, or not kubectl at all; then the migops
    # this cluster belongs to (its virtualenv's bin), so `migops status` & co. work in any shell.
    migops_bin = Path(sys.executable).parent
    path = [current.bin_dir] + ([str(migops_bin)] if (migops_bin / "migops").exists() else [])
    print(f'export PATH={":".join(shlex.quote(p) for p in path)}:"$PATH"')
    print(f"export KUBECONFIG={shlex.quote(current.kubeconfig)}")
    print(f"export MIGOPS_HOME={shlex.quote(str(_home()))}")
    print('# eval "$(migops local env)"')
    return EXIT_OK

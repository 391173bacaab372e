"""Run the node agent as a service: its backend, the node's API objects, the reconfigure flow, drift
repair, /metrics, and a graceful SIGTERM (the agent finishes or rolls back the step in flight).

The agent's start-up, as reconciler/main.py is the reconciler's; `migops agent` (migops/cli/agent.py)
parses the options and calls `run`.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from migops.cli.usage import EXIT_INVALID, EXIT_OK

if TYPE_CHECKING:  # imported where the agent starts: `migops --help` and `migops validate` need none of it
    from kubernetes.client import ApiClient

    from migops.agent.dra import DraSlices
    from migops.agent.host import Systemd
    from migops.agent.loop import LoopPolicy
    from migops.agent.ports import FlowOptions
    from migops.agent.watch import Overrides


class SettingsError(ValueError):
    """A setting the agent cannot start with; `migops agent` shows it as a usage error (exit 2)."""


def _split_configmap(text: str | None) -> tuple[str, str] | None:
    if not text:
        return None
    ns, sep, name = text.partition("/")
    if not sep or not ns or not name:
        raise SettingsError(f"--config-map {text!r}: expected NAMESPACE/NAME")
    return ns, name


def run(args: argparse.Namespace) -> int:
    """Build the agent from its settings (`migops agent`'s options) and run it until SIGTERM; the exit status."""
    from migops.agent.controller import Agent, IdentityError, check_identity
    from migops.agent.kube import NodeIO
    from migops.agent.metrics import AgentMetrics, serve
    from migops.agent.ports import AgentPorts
    from migops.kube.client import api_client

    options, policy, overrides = _options(args), _policy(args), _overrides(args)
    work = Path(args.work_dir)
    backend, simulated_reboot = _backend(args, work)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())  # until the agent exists; then agent.shutdown
    metrics = AgentMetrics()
    server = serve(metrics, args.metrics_address) if args.metrics_address else None
    api = api_client(args.kubeconfig, args.context)
    try:
        check_identity(api, args.node, stop)
        node = NodeIO(api, args.node, stop=stop)
        node.load()
        systemd, reboot = _host(args, work, simulated_reboot is not None)
        ports = AgentPorts(backend, node, options, systemd, reboot, _dra(args, api), metrics)
        agent = Agent(api, ports, overrides=overrides, policy=policy, simulated_reboot=simulated_reboot)
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: agent.shutdown())
        logging.getLogger(__name__).info(
            "agent for node %s, backend %s, GPUs %s",
            args.node,
            backend.name,
            ",".join(d.device_id for d in backend.devices()),
        )
        agent.run()
    except IdentityError as exc:
        print(f"migops agent: {exc}", file=sys.stderr)
        return EXIT_INVALID
    except Exception:
        if stop.is_set():  # stopped while the API server did not answer: the next agent restores what this one paused
            return EXIT_OK
        raise
    finally:
        if server is not None:
            server.shutdown()
        backend.close()
        api.close()
    return EXIT_OK


def _options(args: argparse.Namespace) -> FlowOptions:
    from migops.agent.host import parse_gpu_clients
    from migops.agent.ports import FlowOptions

    services: tuple[str, ...] = ()
    if args.gpu_clients_file:
        try:
            services = parse_gpu_clients(Path(args.gpu_clients_file).read_text(), args.gpu_clients_file)
        except (OSError, ValueError) as exc:
            raise SettingsError(str(exc)) from None
    if args.dra == "publish" and args.backend != "simulated":
        raise SettingsError("--dra publish stands in for the DRA driver with simulated GPUs; use --dra verify")
    return FlowOptions(
        pod_timeout=args.pod_timeout,
        with_reboot=args.with_reboot,
        host_clients=args.host_gpu_clients,
        host_services=services,
        mode_change_settle=args.mode_change_settle,
        destroy_in_use=args.destroy_in_use,
        publish_gfd=args.publish_gfd if args.publish_gfd is not None else args.backend == "simulated",
    )


def _policy(args: argparse.Namespace) -> LoopPolicy:
    from migops.agent.drift import DriftOptions
    from migops.agent.loop import LoopPolicy, Retry

    if args.drift_interval < 0 or args.drift_max_repairs < 1 or args.drift_window <= 0:
        raise SettingsError("--drift-interval must be >= 0 (0: off), --drift-max-repairs >= 1, --drift-window > 0")
    drift = DriftOptions(args.drift_interval, args.drift, args.drift_max_repairs, args.drift_window)
    return LoopPolicy(Retry(args.retry_base, args.retry_max), drift)


def _overrides(args: argparse.Namespace) -> Overrides:
    from migops.agent.watch import Overrides

    return Overrides(_split_configmap(args.config_map), args.strategy, args.clients_namespace)


def _host(args: argparse.Namespace, work: Path, simulated: bool) -> tuple[Systemd | None, Callable[[], None]]:
    """systemd for the host's GPU clients (when asked to stop them), and how the node reboots."""
    from migops.agent.host import HostCommands, Systemd

    host = HostCommands(args.host_root)
    systemd = Systemd(host, journal=work / "stopped-services.json") if args.host_gpu_clients else None
    return systemd, (lambda: None) if simulated else Systemd(host).reboot


def _dra(args: argparse.Namespace, api: ApiClient) -> DraSlices | None:
    if args.dra == "off":
        return None
    from migops.agent.dra import DraOptions, DraSlices

    options = DraOptions(args.dra, args.dra_plugin_selector, args.dra_plugin_namespace, args.dra_timeout)
    return DraSlices(api, args.node, options)


def _backend(args: argparse.Namespace, work: Path):  # noqa: ANN202
    from migops.agent.backend import GpuError
    from migops.mig.catalogue import UnknownGpuError

    if args.backend == "simulated":
        from migops.agent.simulated import SimulatedBackend, parse_gpus

        try:
            models = parse_gpus(args.gpus) if args.gpus else None
            backend = SimulatedBackend(
                args.state_file or work / "gpus.json", models, node=args.node, faults_file=args.faults_file
            )
        except (UnknownGpuError, ValueError) as exc:
            raise SettingsError(str(exc)) from None
        return backend, backend.reboot
    if args.gpus or args.state_file or args.faults_file:
        raise SettingsError("--gpus, --state-file and --faults-file are for --backend simulated")
    from migops.agent.nvml import NvmlBackend

    try:
        return NvmlBackend(reset=reset_commands(args.host_root)), None
    except GpuError as exc:
        raise SettingsError(f"NVML: {exc}") from None


def reset_commands(host_root: str):  # noqa: ANN201
    """Where `nvidia-smi -r` (a GPU reset for a MIG mode change) runs. The NVIDIA container runtime
    puts the driver's nvidia-smi into the agent's container (NVIDIA_DRIVER_CAPABILITIES=utility), from a
    host-installed driver or the GPU Operator's driver container alike: use it, as mig-manager does.
    Without it, the host's through chroot; the host root has none when the driver runs in a container."""
    from migops.agent.host import HostCommands

    return HostCommands(None) if shutil.which("nvidia-smi") else HostCommands(host_root)

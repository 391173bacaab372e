"""`migops agent`: the node agent (agent/), one process per GPU node.

    migops agent --node NAME --backend nvml|simulated [--gpus 8x0x233010DE] [--state-file F] [--kubeconfig F] [--context NAME]

Environment variables mig-manager users know are read as defaults: NODE_NAME, WITH_REBOOT,
WITH_SHUTDOWN_HOST_GPU_CLIENTS, GPU_CLIENTS_FILE, DEFAULT_GPU_CLIENTS_NAMESPACE, KUBECONFIG.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Any

from migops import logs
from migops.cli.usage import EXIT_INVALID, EXIT_OK, UsageError
from migops.kube import client as kube_client
from migops.mig.strategy import STRATEGIES

DEFAULT_WORK_DIR = "/var/lib/migops-agent"


def _env_bool(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def register(sub: argparse._SubParsersAction) -> None:
    a = sub.add_parser(
        "agent",
        help="run the node agent: apply the node's MIG config to its GPUs",
        description="Watch this node's nvidia.com/mig.config label and the MIG ConfigMap; validate, pause GPU "
        "clients, apply the geometry as a diff at explicit placements, report "
        "nvidia.com/mig.config.state. See docs/agent.md.",
    )
    a.add_argument("--node", default=os.environ.get("NODE_NAME"), help="this node's name (env NODE_NAME)")
    _gpus(a)
    kube_client.add_arguments(a)
    a.add_argument(
        "--work-dir",
        default=DEFAULT_WORK_DIR,
        metavar="D",
        help=f"where the agent keeps its journal (default {DEFAULT_WORK_DIR})",
    )
    _settings(a)
    _drift(a)
    a.add_argument(
        "--metrics-address",
        metavar="HOST:PORT",
        help="serve Prometheus metrics on GET /metrics there (e.g. :9400; default: none)",
    )
    _host(a)
    _dra(a)
    logs.add_arguments(a)
    a.set_defaults(func=cmd_agent)


def _gpus(a: argparse.ArgumentParser) -> None:
    """Which GPUs: the driver's, or simulated ones."""
    a.add_argument("--backend", choices=("nvml", "simulated"), required=True)
    a.add_argument(
        "--gpus",
        metavar="SPEC",
        help="simulated GPUs, index order: 8x0x233010DE or "
        "0x233010DE,0x20B510DE (needed when the state file does not exist yet)",
    )
    a.add_argument("--state-file", metavar="F", help=f"simulated GPUs' state (default {DEFAULT_WORK_DIR}/gpus.json)")
    a.add_argument("--faults-file", metavar="F", help="simulated fault injection (default <state-file>.faults)")
    gfd = a.add_mutually_exclusive_group()
    gfd.add_argument(
        "--publish-gfd",
        dest="publish_gfd",
        action="store_true",
        default=None,
        help="publish GFD labels and extended resources (default with --backend simulated)",
    )
    gfd.add_argument("--no-publish-gfd", dest="publish_gfd", action="store_false")


def _settings(a: argparse.ArgumentParser) -> None:
    """Where the config comes from, how long to wait, how to retry."""
    a.add_argument("--config-map", metavar="NS/NAME", help="MIG ConfigMap (default: the ClusterPolicy's)")
    a.add_argument("--strategy", choices=STRATEGIES, help="default: the ClusterPolicy's")
    a.add_argument(
        "--clients-namespace",
        default=os.environ.get("DEFAULT_GPU_CLIENTS_NAMESPACE"),
        metavar="NS",
        help="namespace of the GPU Operator's client pods (default: the ClusterPolicy's namespace)",
    )
    a.add_argument(
        "--pod-timeout",
        type=float,
        default=300.0,
        metavar="S",
        help="how long to wait for GPU client pods to leave (default 300)",
    )
    a.add_argument("--retry-base", type=float, default=10.0, metavar="S", help="first retry delay (default 10)")
    a.add_argument("--retry-max", type=float, default=600.0, metavar="S", help="longest retry delay (default 600)")
    a.add_argument(
        "--destroy-in-use",
        action="store_true",
        help="go ahead when instances the change removes have running processes (the driver may "
        "still refuse); default: refuse, before pausing anything",
    )


def _drift(a: argparse.ArgumentParser) -> None:
    """What to do when the GPUs change behind the agent's back."""
    a.add_argument(
        "--drift-interval",
        type=float,
        default=30.0,
        metavar="S",
        help="compare the GPUs with the applied config every S seconds, and at start (default 30; "
        "0 turns drift checks off)",
    )
    a.add_argument(
        "--drift",
        choices=("repair", "report"),
        default="repair",
        help="on drift (the GPUs changed out of band): repair through the apply flow, or only report "
        "it (state failed, migops.io/mig.drift); default repair",
    )
    a.add_argument(
        "--drift-max-repairs",
        type=int,
        default=3,
        metavar="N",
        help="repairs allowed within --drift-window; drift beyond that holds repairs (state failed) "
        "until the window frees one (default 3)",
    )
    a.add_argument("--drift-window", type=float, default=600.0, metavar="S", help="(default 600)")


def _host(a: argparse.ArgumentParser) -> None:
    """The host's GPU clients and reboots (mig-manager's environment variables are the defaults)."""
    a.add_argument(
        "--with-reboot",
        action="store_true",
        default=_env_bool("WITH_REBOOT"),
        help="reboot the node when a MIG mode change cannot take effect otherwise (env WITH_REBOOT)",
    )
    a.add_argument(
        "--host-gpu-clients",
        action="store_true",
        default=_env_bool("WITH_SHUTDOWN_HOST_GPU_CLIENTS"),
        help="stop the host's systemd GPU clients while reconfiguring (env WITH_SHUTDOWN_HOST_GPU_CLIENTS)",
    )
    a.add_argument(
        "--gpu-clients-file",
        default=os.environ.get("GPU_CLIENTS_FILE"),
        metavar="F",
        help="the GPU Operator's gpu-clients file (version: v1, systemd-services: [...])",
    )
    a.add_argument("--host-root", default="/host", metavar="DIR", help="the host's / (default /host)")
    a.add_argument(
        "--mode-change-settle",
        type=float,
        default=30.0,
        metavar="S",
        help="pause after stopping host clients before a MIG mode change (default 30)",
    )


def _dra(a: argparse.ArgumentParser) -> None:
    """Dynamic Resource Allocation: the DRA driver's ResourceSlices follow the geometry."""
    a.add_argument(
        "--dra",
        choices=("off", "verify", "publish"),
        default=os.environ.get("MIGOPS_DRA", "off"),
        help="after a geometry change, check the NVIDIA DRA driver's ResourceSlices (static MIG): verify = "
        "restart its kubelet plugin on this node and wait for its slices to list exactly the GPUs' "
        "instances; publish = publish those slices ourselves (simulated GPUs only: a stand-in for the "
        "driver); a mismatch is a failed state (env MIGOPS_DRA, default off)",
    )
    a.add_argument(
        "--dra-plugin-selector",
        default=os.environ.get("MIGOPS_DRA_PLUGIN_SELECTOR", "dra-driver-nvidia-gpu-component=kubelet-plugin"),
        metavar="SELECTOR",
        help="label selector of the DRA driver's kubelet plugin pods (default: the driver chart's)",
    )
    a.add_argument("--dra-plugin-namespace", metavar="NS", help="their namespace (default: any)")
    a.add_argument(
        "--dra-timeout", type=float, default=120.0, metavar="S", help="how long the slices may take (default 120)"
    )


def cmd_agent(args: argparse.Namespace) -> int:
    from migops.agent.main import SettingsError, run  # the agent's start-up, as reconciler/main.py is the reconciler's

    if not args.node:
        raise UsageError("--node (or NODE_NAME) is required")
    logs.from_args(args, "agent", {"node": args.node})
    try:
        return run(args)
    except SettingsError as exc:
        raise UsageError(str(exc)) from None


def cmd_probe(args: argparse.Namespace, nvml: Any = None) -> int:
    """`migops gpus --probe`: NVML's view of this host's GPUs next to the catalogue. Read-only.
    Exit 0 when every GPU matches its catalogue entry, 1 on differences or without an NVIDIA driver."""
    import json

    from migops.agent.probe import probe, render
    from migops.cli.outputs import document

    if nvml is None:
        nvml = importlib.import_module("pynvml")
    try:
        driver, gpus = probe(nvml)
    except nvml.NVMLError as exc:
        print(f"migops gpus --probe: NVML is not available here ({exc}): no NVIDIA driver or GPU", file=sys.stderr)
        return EXIT_INVALID
    if args.output == "json":
        json.dump(document("probe", {"driver": driver, "gpus": [g.as_dict() for g in gpus]}), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        for line in render(driver, gpus):
            print(line)
    return EXIT_INVALID if any(g.differences for g in gpus) else EXIT_OK

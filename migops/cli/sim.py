"""`migops sim`: change simulated GPUs out of band, as a person with `nvidia-smi mig` changes real ones.

    migops sim show        --node gpu-node-1 | --state-file F
    migops sim destroy-gi  --node N --gpu 0 --start 4          # nvidia-smi mig -dci -gi ID; -dgi -gi ID
    migops sim destroy-ci  --node N --gpu 0 --start 4 [--ci ID]
    migops sim create-gi   --node N --gpu 0 --profile 1g.10gb [--start 6] [--ci 1 ...|--no-ci]
    migops sim mig-mode    --node N --gpu 0 on|off [--pending]  # nvidia-smi -i 0 -mig 0|1 (+ -r)
    migops sim reset       --node N --gpu 0                     # nvidia-smi -r: instances gone

The calls go through the simulated driver (`agent/simulated.py`), so it refuses what hardware refuses
(an overlapping placement, destroying an instance with processes), and they share the state file's
lock with a running agent. Each action is one change to the state file (`SimulatedBackend.atomic`): the
agent sees the GPUs before or after it, and an action the driver refuses part-way changes nothing. A
person's change of several actions is seen between them, as separate nvidia-smi commands are on real
GPUs. They are not counted in the file's per-GPU `ops` (those count the agent's
calls), and the faults injected into the agent's driver (`op_delay`, `nvml_error`) do not apply to
them; processes (`in_use`) do. `--node` names a node of `migops local` (its state file under
$MIGOPS_HOME/local/agents/).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from migops.cli.usage import EXIT_INVALID, EXIT_OK, UsageError


def register(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser(
        "sim",
        help="change simulated GPUs out of band (as nvidia-smi mig would)",
        description="Read or change a simulated agent's GPUs behind its back, to see the agent "
        "detect and repair the drift. See docs/agent.md.",
    )
    actions = s.add_subparsers(dest="action", metavar="ACTION", required=True)

    def action(name: str, help_text: str, gpu: bool = True) -> argparse.ArgumentParser:
        a = actions.add_parser(name, help=help_text, description=help_text)
        where = a.add_mutually_exclusive_group(required=True)
        where.add_argument("--node", metavar="NAME", help="a node of `migops local` (its agent's state file)")
        where.add_argument("--state-file", metavar="F", help="the simulated GPUs' state file (agent --state-file)")
        if gpu:
            a.add_argument("--gpu", type=int, required=True, metavar="I", help="GPU index")
        a.set_defaults(func=cmd_sim)
        return a

    action("show", "print every GPU's MIG mode and instances", gpu=False)
    d = action("destroy-gi", "destroy the GPU instance at a placement start, its compute instances first")
    d.add_argument("--start", type=int, required=True, metavar="S", help="the instance's first memory slice")
    d = action("destroy-ci", "destroy compute instances of the GPU instance at a start (all, or --ci)")
    d.add_argument("--start", type=int, required=True, metavar="S")
    d.add_argument("--ci", type=int, metavar="ID", help="one compute instance ID (default: all of them)")
    c = action("create-gi", "create a GPU instance (with one full-size compute instance unless --ci/--no-ci)")
    c.add_argument("--profile", required=True, metavar="P", help="GI profile, e.g. 1g.10gb")
    c.add_argument("--start", type=int, metavar="S", help="placement start (default: the first free one)")
    cis = c.add_mutually_exclusive_group()
    cis.add_argument(
        "--ci", type=int, action="append", metavar="SLICES", help="a compute instance of this size (repeatable)"
    )
    cis.add_argument("--no-ci", action="store_true", help="no compute instance")
    m = action("mig-mode", "switch MIG mode: destroys the GPU's instances, sets the mode, resets the GPU")
    m.add_argument("mode", choices=("on", "off"))
    m.add_argument("--pending", action="store_true", help="set the mode only (it stays pending until a reset)")
    action("reset", "reset the GPU: every instance is gone, a pending MIG mode takes effect")


def state_path(args: argparse.Namespace) -> Path:
    if args.state_file:
        return Path(args.state_file)
    try:
        from migops.local import agents, state
    except ModuleNotFoundError:
        raise UsageError("--node needs the local cluster harness (a checkout); use --state-file") from None

    path = agents.agent_dir(state.local_dir(state.migops_home()), args.node) / "gpus.json"
    if not path.exists():
        raise UsageError(
            f"--node {args.node}: no simulated GPUs at {path} (is `migops local up` running, "
            "and is that one of its nodes?)"
        )
    return path


def cmd_sim(args: argparse.Namespace) -> int:
    from migops.agent.backend import GpuError
    from migops.agent.simulated import SimulatedBackend

    path = state_path(args)
    if not path.exists():
        raise UsageError(f"{path} does not exist")
    try:
        sim = SimulatedBackend(path, out_of_band=True)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    try:
        if args.action != "show":
            with sim.atomic():
                _change(sim, args)
        for line in describe(sim, None if args.action == "show" else args.gpu):
            print(line)
    except GpuError as exc:
        print(f"migops sim {args.action}: {exc}", file=sys.stderr)
        return EXIT_INVALID
    return EXIT_OK


def _change(sim, args: argparse.Namespace) -> None:  # noqa: ANN001
    from migops.agent.backend import GpuError
    from migops.agent.plan import gi_profile

    gpu = args.gpu
    if not 0 <= gpu < len(sim.devices()):
        raise UsageError(f"--gpu {gpu}: the node has GPUs 0 to {len(sim.devices()) - 1}")
    state = sim.read(gpu)
    if args.action in ("destroy-gi", "destroy-ci"):
        inst = next((i for i in state.instances if i.start == args.start), None)
        if inst is None:
            raise UsageError(f"GPU {gpu} has no GPU instance starting at slice {args.start} (`migops sim show`)")
        for ci in inst.compute:
            if args.action == "destroy-gi" or args.ci in (None, ci.id):
                sim.destroy_compute_instance(gpu, inst.id, ci.id)
        if args.action == "destroy-gi":
            sim.destroy_gpu_instance(gpu, inst.id)
    elif args.action == "create-gi":
        profile = gi_profile(sim.model(gpu), args.profile)
        if profile is None:
            raise UsageError(
                f"--profile {args.profile}: {sim.model(gpu).name} has no such GPU-instance profile "
                f"({', '.join(p.name for p in sim.model(gpu).profiles)})"
            )
        starts = [args.start] if args.start is not None else list(profile.starts)
        gi = None
        for start in starts:
            try:
                gi = sim.create_gpu_instance(gpu, profile.name, start)
                break
            except GpuError as exc:
                if args.start is not None or exc.code != "INSUFFICIENT_RESOURCES":
                    raise
        if gi is None:
            raise GpuError(
                "create_gpu_instance", gpu, "INSUFFICIENT_RESOURCES", f"no free placement for {profile.name}"
            )
        sizes = [] if args.no_ci else (args.ci or [profile.compute_slices])
        for slices in sizes:
            sim.create_compute_instance(gpu, gi, slices)
    elif args.action == "mig-mode":
        for inst in state.instances:
            for ci in inst.compute:
                sim.destroy_compute_instance(gpu, inst.id, ci.id)
            sim.destroy_gpu_instance(gpu, inst.id)
        sim.set_mig_mode(gpu, args.mode == "on")
        if not args.pending:
            sim.reset([gpu])
    elif args.action == "reset":
        sim.reset([gpu])


def describe(sim, only: int | None = None) -> list[str]:  # noqa: ANN001
    """One line per GPU: mode and instances (`profile@start[CI sizes]`)."""
    lines = []
    for d in sim.devices():
        if only is not None and d.index != only:
            continue
        s = sim.read(d.index)
        mode = "MIG on" if s.mig_enabled else "MIG off"
        if s.mode_pending:
            mode += f" (pending {'on' if s.mig_pending else 'off'})"
        insts = ", ".join(
            f"{i.profile}@{i.start}[{'+'.join(str(c) for c in i.composition) or '-'}]"
            + (f" pids {','.join(map(str, i.pids))}" if i.pids else "")
            for i in s.instances
        )
        lines.append(f"GPU {d.index}  {sim.model(d.index).name}  {mode}  {insts or 'no instances'}")
    return lines

"""`migops validate`, `migops plan`, `migops gpus`: the MIG core on the command line.

Exit codes: 0 valid, 1 invalid (every problem printed with its path and rule), 2 usage error.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from migops.mig.catalogue import GpuModel, UnknownGpuError, catalogue, raw_catalogue
from migops.mig.gfd import advertise
from migops.mig.problems import MigError, Problem
from migops.mig.spec import MigPartedConfig, parse_config
from migops.mig.validate import STRATEGIES, ConfigReport, Strategy, validate
from migops.render import draw_layout, table
from migops.usage import EXIT_INVALID, EXIT_OK, UsageError


def register(sub: argparse._SubParsersAction) -> None:  # noqa: SLF001
    v = sub.add_parser("validate", help="check a mig-parted config (or a ConfigMap holding one)",
                       description="Check a mig-parted config against the GPU catalogue: syntax (mig-parted's "
                       "13 rules) and what mig-parted skips (profiles per GPU model, counts, placement, "
                       "device filters, coverage, MIG strategy). Exit 0 valid, 1 invalid, 2 usage error.")
    v.add_argument("file", metavar="FILE|-", help="YAML/JSON config or ConfigMap manifest; - reads stdin")
    v.add_argument("--gpu", action="append", default=[], metavar="GPU",
                   help="a GPU of the target node, in index order (repeat for each GPU): PCI device ID such "
                   "as 0x233010DE or GFD product such as NVIDIA-H100-80GB-HBM3")
    v.add_argument("--strategy", choices=STRATEGIES, help="the cluster's MIG strategy (ClusterPolicy mig.strategy)")
    v.add_argument("-c", "--selected-config", dest="config", metavar="NAME", help="check only this named config")
    v.add_argument("-o", "--output", choices=("text", "json"), default="text")
    v.set_defaults(func=cmd_validate)

    p = sub.add_parser("plan", help="show where each MIG instance will be placed",
                       description="Lay out the selected config on a node with the given GPUs: an exact, "
                       "deterministic placement (start and size in memory slices).")
    p.add_argument("file", metavar="FILE|-")
    p.add_argument("--gpu", action="append", required=True, metavar="GPU",
                   help="a GPU of the node, in index order (repeat for each GPU)")
    p.add_argument("-c", "--selected-config", dest="config", metavar="NAME",
                   help="config to lay out (required when the file holds more than one)")
    p.add_argument("--strategy", choices=STRATEGIES, help="also check the MIG strategy")
    p.add_argument("-o", "--output", choices=("text", "json"), default="text")
    p.set_defaults(func=cmd_plan)

    g = sub.add_parser("gpus", help="list the MIG-capable GPU catalogue")
    g.add_argument("-o", "--output", choices=("text", "json"), default="text")
    g.add_argument("--probe", action="store_true",
                   help="read this machine's GPUs through NVML (read-only) and compare them with the catalogue")
    g.set_defaults(func=cmd_gpus)


# ---------------------------------------------------------------------------------------------- input


def read_input(name: str) -> bytes:
    if name == "-":
        return sys.stdin.buffer.read()
    path = Path(name)
    if not path.exists():
        raise UsageError(f"{name}: no such file")
    if path.is_dir():
        raise UsageError(f"{name}: is a directory")
    try:
        return path.read_bytes()
    except OSError as exc:
        raise UsageError(f"{name}: {exc.strerror}") from None


def resolve_gpus(names: Sequence[str]) -> list[GpuModel]:
    cat = catalogue()
    try:
        return [cat.resolve(n) for n in names]
    except UnknownGpuError as exc:
        raise UsageError(str(exc)) from None


def _print_problems(problems: Sequence[Problem], indent: str = "  ") -> None:
    for p in problems:
        print(f"{indent}{'error' if p.severity == 'error' else 'warning'}: {p}")


def _emit_json(doc: object) -> None:
    json.dump(doc, sys.stdout, indent=2)
    sys.stdout.write("\n")


def _report_invalid(source: str, problems: Sequence[Problem], output: str, listing: str) -> None:
    """A file that cannot be checked further (parse errors, unknown -c): problems, and nothing else."""
    if output == "json":
        _emit_json({"source": source, "valid": False, "problems": [p.as_dict() for p in problems], listing: []})
    else:
        print(f"{source}: INVALID")
        _print_problems(problems)


def _load(args: argparse.Namespace, listing: str) -> tuple[str, list[GpuModel], MigPartedConfig | None]:
    """Read and parse FILE and resolve --gpu; usage errors raise, an unparseable file is reported."""
    data = read_input(args.file)
    node = resolve_gpus(args.gpu)
    source = "<stdin>" if args.file == "-" else args.file
    try:
        return source, node, parse_config(data)
    except MigError as exc:
        _report_invalid(source, exc.problems, args.output, listing)
        return source, node, None


# ------------------------------------------------------------------------------------------- validate


def _advertises(report: ConfigReport, strategies: Sequence[Strategy]) -> dict[str, object]:
    out: dict[str, object] = {}
    for s in strategies:
        ad = advertise(report.gpus, s)
        out[s] = {"resources": ad.resources, "labels": ad.labels, "invalid_reason": ad.invalid_reason}
    return out


def _fits_text(report: ConfigReport) -> str:
    if len(report.fits) == len(catalogue().gpus):
        return "every GPU model"
    names = list(dict.fromkeys(g.name for g in report.fits))
    return ", ".join(names)


def _gpu_state(r) -> str:
    if r.mig_enabled is None:
        return "not covered"
    if not r.mig_enabled:
        return "MIG disabled"
    if r.layout is None:
        return "invalid geometry"
    counts: dict[str, int] = {}
    for d in r.mig_devices:
        counts[d] = counts.get(d, 0) + 1
    return " + ".join(f"{c}x {d}" for d, c in counts.items()) or "MIG enabled, no instances"


def _runs(items: Sequence[str]) -> list[tuple[int, int, str]]:
    """Consecutive equal items as (first index, last index, item)."""
    runs: list[tuple[int, int, str]] = []
    for i, item in enumerate(items):
        if runs and runs[-1][2] == item:
            runs[-1] = (runs[-1][0], i, item)
        else:
            runs.append((i, i, item))
    return runs


def _summary(report: ConfigReport) -> str:
    return "; ".join(f"GPU {a}: {s}" if a == b else f"GPU {a}-{b}: {s}"
                     for a, b, s in _runs([_gpu_state(r) for r in report.gpus]))


def node_text(node: Sequence[GpuModel]) -> str:
    return ", ".join(f"{b - a + 1} x {label}" for a, b, label in _runs([g.label() for g in node]))


def cmd_validate(args: argparse.Namespace) -> int:
    source, node, config = _load(args, "configs")
    if config is None:
        return EXIT_INVALID
    names = None
    if args.config is not None:
        try:
            config.select(args.config)
        except MigError as exc:
            _report_invalid(source, exc.problems, args.output, "configs")
            return EXIT_INVALID
        names = [args.config]
    reports = validate(config, names, node or None, args.strategy)
    valid = all(r.valid for r in reports)
    strategies: tuple[Strategy, ...] = (args.strategy,) if args.strategy else STRATEGIES  # type: ignore[assignment]
    if args.output == "json":
        _emit_json({
            "source": source,
            "valid": valid,
            "strategy": args.strategy,
            "node": [g.device_id for g in node],
            "problems": [],
            "configs": [
                {
                    "name": r.name,
                    "valid": r.valid,
                    "problems": [p.as_dict() for p in r.problems],
                    **({"gpus": [g.as_dict() for g in r.gpus]} if node else
                       {"fits": [g.device_id for g in r.fits]}),
                    **({"advertises": _advertises(r, strategies)} if node and r.valid else {}),
                }
                for r in reports
            ],
        })
        return EXIT_OK if valid else EXIT_INVALID
    where = f" on a node with {node_text(node)}" if node else " against the GPU catalogue"
    strategy = f", MIG strategy {args.strategy}" if args.strategy else ""
    print(f"{source}: {len(reports)} config(s) checked{where}{strategy}")
    width = max(len(r.name) for r in reports) if reports else 0
    for r in reports:
        mark = "valid  " if r.valid else "INVALID"
        detail = _summary(r) if node else (f"fits: {_fits_text(r)}" if r.fits else "")
        print(f"  {mark} {r.name.ljust(width)}  {detail}".rstrip())
        _print_problems(r.problems, "      ")
        if node and r.valid and args.strategy:
            ad = advertise(r.gpus, args.strategy)
            shown = ", ".join(f"{k}={v}" for k, v in ad.resources.items()) or "nothing"
            print(f"      advertises ({args.strategy}): {shown}")
    bad = sum(not r.valid for r in reports)
    print(f"{len(reports) - bad} valid, {bad} invalid")
    return EXIT_OK if valid else EXIT_INVALID


# ----------------------------------------------------------------------------------------------- plan


def cmd_plan(args: argparse.Namespace) -> int:
    source, node, config = _load(args, "gpus")
    if config is None:
        return EXIT_INVALID
    try:
        name, _ = config.select(args.config)
    except MigError as exc:
        _report_invalid(source, exc.problems, args.output, "gpus")
        return EXIT_INVALID
    (report,) = validate(config, [name], node, args.strategy)
    if args.output == "json":
        doc: dict[str, object] = {
            "gpus": [
                {
                    "index": r.index,
                    "device_id": r.gpu.device_id,
                    "config": name,
                    "mig_enabled": r.mig_enabled,
                    "instances": [p.as_dict() for p in r.layout or ()],
                }
                for r in report.gpus
            ]
        }
        if not report.valid or report.problems:
            doc["problems"] = [p.as_dict() for p in report.problems]
        doc["valid"] = report.valid
        _emit_json(doc)
        return EXIT_OK if report.valid else EXIT_INVALID
    if not report.valid:
        print(f"{name}: cannot be laid out on {node_text(node)}")
        _print_problems(report.problems)
        return EXIT_INVALID
    print(f"config {name} on {len(node)} GPU(s)")
    _print_problems(report.problems)
    for r in report.gpus:
        head = f"GPU {r.index}  {r.gpu.label()}"
        if r.mig_enabled is None:
            print(f"{head}: not selected by any entry (left as it is)")
        elif not r.mig_enabled:
            print(f"{head}: MIG disabled")
        else:
            print(f"{head}  ({r.entry})")
            for line in draw_layout(r.gpu, r.layout or ()):
                print(line)
    return EXIT_OK


# ----------------------------------------------------------------------------------------------- gpus


def cmd_gpus(args: argparse.Namespace) -> int:
    if args.probe:
        from migops.commands_agent import cmd_probe

        return cmd_probe(args)
    cat = catalogue()
    if args.output == "json":
        raw = raw_catalogue()
        tables = raw["profile_tables"]
        _emit_json({"gpus": [{**g, "profiles": tables[g["table"]]["profiles"],
                              "compute_slices": tables[g["table"]]["compute_slices"],
                              "memory_slices": tables[g["table"]]["memory_slices"],
                              "inferred": sorted(set(g.get("inferred", [])) | set(tables[g["table"]]["inferred"]))}
                             for g in raw["gpus"]]})
        return EXIT_OK
    rows = []
    for g in cat.gpus:
        profiles = " ".join(f"{p.name}({p.max_count})" for p in g.profiles)
        inferred = ",".join(sorted(set(g.inferred) | set(g.table.inferred))) or "-"
        rows.append((g.device_id, g.name, g.product, g.architecture,
                     f"{g.table.compute_slices}/{g.table.memory_slices}", profiles, inferred))
    for line in table(rows, ("DEVICE ID", "NAME", "PRODUCT", "ARCH", "C/M SLICES", "PROFILES (MAX COUNT)", "INFERRED")):
        print(line)
    return EXIT_OK

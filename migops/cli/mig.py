"""`migops validate`, `migops plan`, `migops gpus`: the MIG core on the command line.

`migops validate` takes files, directories and stdin; each file is a bare mig-parted config or a
Kubernetes manifest stream whose MIG ConfigMaps are checked (see migops.mig.sources). Every problem is
shown at file:line:col. Exit codes: 0 valid, 1 invalid (any input), 2 usage error.
"""

from __future__ import annotations

import argparse
import shutil
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from migops.cli.inputs import expand_inputs, read_input, resolve_gpus
from migops.cli.usage import EXIT_INVALID, EXIT_OK, UsageError
from migops.mig.strategy import STRATEGIES, Strategy

if TYPE_CHECKING:
    from migops.cli.report import Checked, ValidationRun
    from migops.mig.catalogue import GpuModel
    from migops.mig.fit import NodeGpus
    from migops.mig.problems import Problem
    from migops.mig.sources import ConfigSource
    from migops.mig.spec import MigPartedConfig
    from migops.mig.validate import ConfigReport

# The MIG core is imported where a command runs, not with this module: every command line registers
# these commands, and `migops --version` or `migops reconcile` must not pay for loading the validator
# (tests/cli/test_startup.py, bench/cli_startup.py).


def register(sub: argparse._SubParsersAction) -> None:
    _register_validate(sub)
    _register_plan(sub)
    _register_gpus(sub)


def _register_validate(sub: argparse._SubParsersAction) -> None:
    v = sub.add_parser(
        "validate",
        help="check mig-parted configs: files, directories, manifest streams, stdin",
        description="Check mig-parted configs against the GPU catalogue: syntax (read exactly as "
        "mig-parted reads it) and what mig-parted skips (profiles per GPU model, counts, placement, "
        "device filters, coverage, MIG strategy). An input is a file, a directory (searched for "
        "*.yaml, *.yml, *.json) or - for stdin; a file is a bare config or a Kubernetes manifest "
        "stream whose MIG ConfigMaps are checked. Exit 0 valid, 1 invalid, 2 usage error.",
    )
    v.add_argument("inputs", nargs="+", metavar="INPUT", help="file, directory, or - (stdin)")
    v.add_argument(
        "--gpu",
        action="append",
        default=[],
        metavar="GPU",
        help="a GPU of the target node, in index order (repeat for each GPU): PCI device ID such "
        "as 0x233010DE or GFD product such as NVIDIA-H100-80GB-HBM3",
    )
    v.add_argument("--strategy", choices=STRATEGIES, help="the cluster's MIG strategy (ClusterPolicy mig.strategy)")
    v.add_argument("-c", "--selected-config", dest="config", metavar="NAME", help="check only this named config")
    v.add_argument(
        "--skip-unrelated",
        action="store_true",
        help="skip named files that hold no MIG config (neither a Kubernetes manifest nor a file that "
        "mentions mig-configs), as a directory search does: for pre-commit and CI on changed files",
    )
    v.add_argument(
        "-o",
        "--output",
        choices=("text", "json", "github", "gitlab", "sarif"),
        default="text",
        help="text (default), json, github (GitHub Actions annotations), gitlab (GitLab Code Quality "
        "report), sarif (SARIF 2.1.0)",
    )
    v.set_defaults(func=cmd_validate)


def _register_plan(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "plan",
        help="show where each MIG instance will be placed",
        description="Lay out the selected config on a node with the given GPUs: an exact, "
        "deterministic placement (start and size in memory slices).",
    )
    p.add_argument("file", metavar="FILE|-")
    p.add_argument(
        "--gpu",
        action="append",
        required=True,
        metavar="GPU",
        help="a GPU of the node, in index order (repeat for each GPU)",
    )
    p.add_argument(
        "-c",
        "--selected-config",
        dest="config",
        metavar="NAME",
        help="config to lay out (required when the file holds more than one)",
    )
    p.add_argument("--strategy", choices=STRATEGIES, help="also check the MIG strategy")
    p.add_argument("-o", "--output", choices=("text", "json"), default="text")
    p.set_defaults(func=cmd_plan)


def _register_gpus(sub: argparse._SubParsersAction) -> None:
    g = sub.add_parser(
        "gpus",
        help="list the MIG-capable GPU catalogue",
        description="List the GPU models migops knows MIG for: PCI device ID, name, architecture, compute "
        "and memory slices, and each MIG profile with how many fit on one GPU. The names `--gpu` takes "
        "elsewhere are the DEVICE ID and PRODUCT columns (-o wide). With --probe, read the host's GPUs "
        "through NVML and compare them with the catalogue. With --check, compare the catalogue with "
        "`nvidia-mig-parted generate-config` outputs collected from real nodes: every difference per "
        "model, exit 1 on any.",
    )
    g.add_argument(
        "-o",
        "--output",
        choices=("text", "wide", "json"),
        default="text",
        help="text (default: the terminal's width, profiles wrapped), wide (every column, one line per GPU), json",
    )
    g.add_argument(
        "--probe",
        action="store_true",
        help="read this host's GPUs through NVML (read-only) and compare them with the catalogue",
    )
    g.add_argument(
        "--check",
        nargs="+",
        metavar="FILE",
        help="generate-config outputs (files, directories, or - for stdin; YAML, JSON, or mig-manager's "
        "<node>-mig-config ConfigMaps) to compare the catalogue with",
    )
    g.add_argument(
        "--gpu",
        metavar="GPU",
        help="with --check: the GPU model of the outputs that name no device ID (a node of one model); "
        "without it, inferred from their profiles",
    )
    g.set_defaults(func=cmd_gpus)


def _print_problems(problems: Sequence[Problem], file: str, indent: str = "  ") -> None:
    from migops.cli.report import problem_line

    for p in problems:
        print(f"{indent}{problem_line(file, p)}")


def _split_notes(config: MigPartedConfig, names: Sequence[str]) -> tuple[list[Problem], dict[str, list[Problem]]]:
    """Reading notes of the whole source, and those that belong to one config (by path)."""
    from migops.mig.problems import key_path

    prefixes = {name: key_path("mig-configs", name) for name in names}
    whole: list[Problem] = []
    per: dict[str, list[Problem]] = {name: [] for name in names}
    for note in config.notes:
        owner = next(
            (n for n, pre in prefixes.items() if note.path == pre or note.path.startswith((pre + ".", pre + "["))), None
        )
        (per[owner] if owner else whole).append(note)
    return whole, per


def _question(node: Sequence[GpuModel]) -> NodeGpus | None:
    """--gpu given: that node, exactly; none: the catalogue (migops.mig.fit)."""
    from migops.mig.fit import NodeGpus

    return NodeGpus(tuple(node), True) if node else None


def check_source(
    file: str, source: ConfigSource, node: Sequence[GpuModel], strategy: Strategy | None, selected: str | None
) -> Checked:
    """Validate one config source; every problem located in the file."""
    from migops.cli.report import Checked
    from migops.mig.fit import fit_all
    from migops.mig.problems import MigError
    from migops.mig.spec import no_config_problems

    config = source.config
    if config is None:
        return Checked(file, source.object, source.line, False, source.problems)
    names = list(config.names())
    problems: list[Problem] = list(no_config_problems(config))
    if selected is not None:
        try:
            config.select(selected)
            names = [selected]
        except MigError as exc:
            problems += exc.problems
            return Checked(file, source.object, source.line, True, tuple(problems), unselected=selected)
    whole, per = _split_notes(config, names)
    reports = [f.report for f in fit_all(config, names, _question(node), strategy)]
    placed = tuple(replace(r, problems=config.place(tuple(per.get(r.name, ())) + r.problems)) for r in reports)
    return Checked(file, source.object, source.line, True, tuple(problems + whole), placed)


def check(
    inputs: Sequence[str],
    node: Sequence[GpuModel],
    strategy: Strategy | None,
    selected: str | None,
    skip_unrelated: bool = False,
) -> ValidationRun:
    """Read and validate every input; a file found in a directory (or named, with skip_unrelated) that is
    neither a manifest stream nor mentions mig-configs is not a MIG config and is only counted."""
    from migops.cli.report import ValidationRun
    from migops.mig.sources import read_file

    checked: list[Checked] = []
    skipped = []
    ignored = []
    files = 0
    fleets = [n for n in inputs if n != "-" and ((Path(n) / "fleet.yaml").is_file() or Path(n).name == "fleet.yaml")]
    if fleets:  # a fleet repo: every cluster judged on its inventory (migops.cli.fleet)
        from migops.cli.fleet import fleet_checks

        for name in fleets:
            read, found = fleet_checks(Path(name) if Path(name).is_dir() else Path(name).parent)
            files += read
            checked += found
    for name, walked in expand_inputs([n for n in inputs if n not in fleets]):
        data = read_input(name)
        file = "<stdin>" if name == "-" else name
        nodes = _nodes_file(name, data)
        if nodes is not None:
            files += 1
            checked.append(check_nodes_file(file, name, data, node, strategy))
            continue
        contents = read_file(data)
        if (walked or skip_unrelated) and not contents.manifests and b"mig-configs" not in data:
            ignored.append(file)  # a YAML file of the repository that is not a MIG config
            continue
        files += 1
        skipped += [(file, s) for s in contents.skipped]
        for source in contents.sources:
            checked.append(check_source(file, source, node, strategy, selected))
    return ValidationRun(tuple(checked), tuple(skipped), files, tuple(node), strategy, tuple(ignored))


def _nodes_file(name: str, data: bytes) -> bool | None:
    """True for a config repo's nodes.yaml (gitops.check.is_nodes_file: by name, or by shape), else None."""
    if b"assignments" not in data and not Path(name).name.startswith("nodes."):
        return None  # named like no nodes file (gitops.check.NAMES) and not shaped like one: gitops stays unloaded
    from migops.gitops.check import NAMES, is_nodes_file
    from migops.mig.problems import MigError
    from migops.mig.yamlsafe import load_yaml

    if Path(name).name in NAMES:
        return True
    if b"assignments" not in data or b"mig-configs" in data:
        return None
    try:
        doc = load_yaml(data)
    except MigError:
        return None
    return True if is_nodes_file(name, doc) else None


def check_nodes_file(file: str, name: str, data: bytes, node: Sequence[GpuModel], strategy: Strategy | None) -> Checked:
    """A nodes.yaml, checked with the config.yaml beside it (gitops.check)."""
    from migops.api.migsync import CONFIG_FILE
    from migops.cli.report import Checked
    from migops.gitops.check import check_nodes

    beside = Path(name).parent / CONFIG_FILE if name != "-" else Path(CONFIG_FILE)
    config_text = beside.read_bytes() if beside.is_file() else None
    config_file = str(beside) if name != "-" else CONFIG_FILE
    found = check_nodes(file, data, config_text, config_file, node, strategy)
    return Checked(file, config_file, None, True, found.problems, kind="nodes", assignments=found.assignments)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version  # SARIF output only

    try:
        return version("migops")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree without installing
        return "0"


def _load_one(args: argparse.Namespace, listing: str) -> tuple[str, list[GpuModel], MigPartedConfig | None]:
    """`plan`: one file with exactly one config source; usage errors raise, an unparseable one is reported."""
    from migops.cli.outputs import document
    from migops.cli.report import emit_json
    from migops.mig.sources import read_file

    data = read_input(args.file)
    node = resolve_gpus(args.gpu)
    file = "<stdin>" if args.file == "-" else args.file
    contents = read_file(data)
    if len(contents.sources) != 1:
        raise UsageError(f"{file}: holds {len(contents.sources)} MIG configs (ConfigMaps); plan needs exactly one")
    (source,) = contents.sources
    if source.config is None:
        if args.output == "json":
            emit_json(
                document(
                    "plan",
                    {"source": file, "valid": False, "problems": [p.as_dict() for p in source.problems], listing: []},
                )
            )
        else:
            print(f"{file}: INVALID")
            _print_problems(source.problems, file)
        return file, node, None
    return file, node, source.config


# ------------------------------------------------------------------------------------------- validate


def cmd_validate(args: argparse.Namespace) -> int:
    from migops.mig.gcpause import paused_gc

    # The whole command with the cyclic collector paused, as the core pauses it while reading and judging
    # (migops.mig.gcpause): placing a large file's problems and writing them makes as many small objects
    # again, and each collection walked the file's parsed values, locations and verdicts (a third of the
    # time of placing 6,000 configs' problems). One command is one call: the process ends after it.
    with paused_gc():
        return _validate(args)


def _validate(args: argparse.Namespace) -> int:
    from migops.cli import report
    from migops.cli.report import emit_json

    node = resolve_gpus(args.gpu)
    run = check(args.inputs, node, args.strategy, args.config, args.skip_unrelated)
    if args.output == "json":
        emit_json(report.as_json(run))
    elif args.output == "sarif":
        emit_json(report.sarif(run, _version()))
    elif args.output == "github":
        report.github(run)
    elif args.output == "gitlab":
        emit_json(report.gitlab(run))
    else:
        report.text(run)
    return EXIT_OK if run.valid else EXIT_INVALID


# ----------------------------------------------------------------------------------------------- plan


def cmd_plan(args: argparse.Namespace) -> int:
    from migops.cli.outputs import document
    from migops.cli.report import emit_json
    from migops.mig.fit import fit_all
    from migops.mig.problems import MigError

    file, node, config = _load_one(args, "gpus")
    if config is None:
        return EXIT_INVALID
    try:
        name, _ = config.select(args.config)
    except MigError as exc:
        if args.output == "json":
            emit_json(
                document(
                    "plan",
                    {"source": file, "valid": False, "problems": [p.as_dict() for p in exc.problems], "gpus": []},
                )
            )
        else:
            print(f"{file}: INVALID")
            _print_problems(exc.problems, file)
        return EXIT_INVALID
    (verdict,) = fit_all(config, [name], _question(node), args.strategy)
    found = verdict.report
    found = replace(found, problems=config.place(found.problems))
    if args.output == "json":
        return _plan_json(name, found)
    return _plan_text(name, node, file, found)


def _plan_json(name: str, found: ConfigReport) -> int:
    from migops.cli.outputs import document
    from migops.cli.report import emit_json

    doc: dict[str, object] = {
        "gpus": [
            {
                "index": r.index,
                "device_id": r.gpu.device_id,
                "config": name,
                "mig_enabled": r.mig_enabled,
                "instances": [p.as_dict() for p in r.layout or ()],
            }
            for r in found.gpus
        ]
    }
    if not found.valid or found.problems:
        doc["problems"] = [p.as_dict() for p in found.problems]
    doc["valid"] = found.valid
    emit_json(document("plan", doc))
    return EXIT_OK if found.valid else EXIT_INVALID


def _plan_text(name: str, node: list[GpuModel], file: str, found: ConfigReport) -> int:
    from migops.cli.render import draw_layout
    from migops.cli.report import node_text

    if not found.valid:
        print(f"{name}: cannot be laid out on {node_text(node)}")
        _print_problems(found.problems, file)
        return EXIT_INVALID
    print(f"config {name} on {len(node)} GPU(s)")
    _print_problems(found.problems, file)
    for r in found.gpus:
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
    if args.check:
        from migops.cli.gpucheck import cmd_check

        return cmd_check(args)
    if args.gpu:
        raise UsageError("--gpu names the model of --check's outputs: give --check FILE...")
    if args.probe:
        from migops.cli.agent import cmd_probe

        return cmd_probe(args)
    from migops.cli.outputs import document
    from migops.cli.render import table
    from migops.cli.report import emit_json
    from migops.mig.catalogue import catalogue, raw_catalogue

    cat = catalogue()
    if args.output == "json":
        raw = raw_catalogue()
        tables = raw["profile_tables"]
        emit_json(
            document(
                "gpus",
                {
                    "gpus": [
                        {
                            **g,
                            "profiles": tables[g["table"]]["profiles"],
                            "compute_slices": tables[g["table"]]["compute_slices"],
                            "memory_slices": tables[g["table"]]["memory_slices"],
                            "inferred": sorted(set(g.get("inferred", [])) | set(tables[g["table"]]["inferred"])),
                        }
                        for g in raw["gpus"]
                    ]
                },
            )
        )
        return EXIT_OK
    wide = args.output == "wide"
    rows: list[tuple[str, ...]] = []
    for g in cat.gpus:
        table_ = g.table
        assert table_ is not None  # the catalogue lists MIG-capable GPUs only
        profiles = " ".join(f"{p.name}({p.max_count})" for p in g.profiles)
        inferred = ",".join(sorted(set(g.inferred) | set(table_.inferred))) or "-"
        slices = f"{table_.compute_slices}/{table_.memory_slices}"
        if wide:
            rows.append((g.device_id, g.name, g.product or "-", g.architecture or "-", slices, profiles, inferred))
        else:
            rows.append((g.device_id, g.name, g.architecture or "-", slices, profiles))
    header = (
        ("DEVICE ID", "NAME", "PRODUCT", "ARCH", "C/M SLICES", "PROFILES (MAX COUNT)", "INFERRED")
        if wide
        else ("DEVICE ID", "NAME", "ARCH", "C/M SLICES", "PROFILES (MAX COUNT)")
    )
    for line in table(rows, header, None if wide else shutil.get_terminal_size().columns):
        print(line)
    return EXIT_OK

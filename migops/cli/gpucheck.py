"""`migops gpus --check FILE...`: the catalogue against `nvidia-mig-parted generate-config` outputs
collected from real nodes (migops.mig.generated compares; this module reads the files and prints).

A FILE is an output as generate-config writes it (YAML or JSON), or a manifest stream of the ConfigMaps
mig-manager publishes it in (`<node>-mig-config`): read by the same reader as `migops validate`. Exit 0
when the catalogue agrees with every output, 1 on any difference (or a file that is not such an
output), 2 on a usage error.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from migops.cli.usage import EXIT_INVALID, EXIT_OK, UsageError

if TYPE_CHECKING:
    from migops.mig.generated import CatalogueCheck, GeneratedOutput, ModelComparison


def read_outputs(files: Sequence[str]) -> list[GeneratedOutput]:
    from migops.cli.inputs import expand_inputs, read_input
    from migops.mig.generated import GeneratedOutput, read_generated
    from migops.mig.sources import read_file

    outputs = []
    for name, _ in expand_inputs(files):
        file = "<stdin>" if name == "-" else name
        for source in read_file(read_input(name)).sources:
            if source.config is None:
                outputs.append(GeneratedOutput(file, source.object, (), source.problems))
            else:
                outputs.append(read_generated(source.config, file, source.object))
    return outputs


def cmd_check(args: argparse.Namespace) -> int:
    from migops.cli.inputs import resolve_gpus
    from migops.cli.outputs import document
    from migops.cli.report import emit_json
    from migops.mig.catalogue import catalogue
    from migops.mig.generated import check_catalogue

    if args.probe:
        raise UsageError("--check and --probe: one at a time")
    named = None
    if args.gpu:
        (named,) = resolve_gpus([args.gpu])
        if not named.mig_capable:
            raise UsageError(f"--gpu {args.gpu}: {named.label()}")
    found = check_catalogue(read_outputs(args.check), catalogue(), named)
    if args.output == "json":
        emit_json(document("gpus-check", as_json(found)))
    else:
        for line in text(found):
            print(line)
    return EXIT_OK if found.agrees else EXIT_INVALID


def _model_lines(m: ModelComparison) -> list[str]:
    errors = sum(d.severity == "error" for d, _ in m.differences)
    sources = ", ".join(m.sources)
    if m.agrees:
        head = f"{m.name}: agrees on {m.profiles} profile(s) and their counts ({sources})"
    else:
        differing = {source for d, shown in m.differences if d.severity == "error" for source in shown}
        outputs = f" in {len(differing)} of {len(m.sources)} outputs" if len(m.sources) > 1 else ""
        head = f"{m.name}: {errors} difference(s){outputs} ({sources})"
    lines = [head]
    for d, shown in m.differences:
        where = "" if len(m.sources) == 1 else f" (in {', '.join(shown)})"
        lines.append(f"  {d.severity}: {d.message} [{d.rule}]{where}")
    return lines


def text(found: CatalogueCheck) -> list[str]:
    from migops.cli.report import problem_line
    from migops.mig.generated import NOT_COMPARED

    lines = []
    for output in found.outputs:
        lines += [f"{output.source}: not a generate-config output"] if output.problems else []
        lines += [f"  {problem_line(output.file, p)}" for p in output.problems]
    for m in found.models:
        lines += _model_lines(m)
    unread = sum(bool(o.problems) for o in found.outputs)
    differing = sum(not m.agrees for m in found.models)
    said = [f"{unread} output(s) not generate-config output"] if unread else []
    said.append(
        f"{len(found.outputs) - unread} output(s), {len(found.models)} GPU model(s): "
        + ("the catalogue agrees with every one" if not differing else f"{differing} model(s) differ")
    )
    lines.append("; ".join(said) + f" (not in the outputs, not compared: {', '.join(NOT_COMPARED)})")
    return lines


def as_json(found: CatalogueCheck) -> dict[str, Any]:
    from migops.mig.generated import NOT_COMPARED

    return {
        "agrees": found.agrees,
        "not_compared": list(NOT_COMPARED),
        "outputs": [
            {"source": o.source, "gpus": len(o.gpus), "problems": [p.as_dict() for p in o.problems]}
            for o in found.outputs
        ],
        "models": [
            {
                "device_id": m.device_id,
                "name": m.model.name if m.model else None,
                "inferred": [g.device_id for g in m.inferred],
                "sources": list(m.sources),
                "profiles": m.profiles,
                "agrees": m.agrees,
                "differences": [
                    {
                        "rule": d.rule,
                        "severity": d.severity,
                        "profile": d.profile,
                        "output": d.output,
                        "catalogue": d.catalogue,
                        "message": d.message,
                        "sources": list(shown),
                    }
                    for d, shown in m.differences
                ],
            }
            for m in found.models
        ],
    }

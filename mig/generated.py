"""`nvidia-mig-parted generate-config` output (mig-parted v0.14 and later): what it says of the
hardware, and how that compares with the GPU catalogue.

generate-config reads every MIG-capable GPU's GPU-instance profiles through NVML (A30's are written
into mig-parted: NVML misreports their instance counts) and writes a mig-parted v1 config
(pkg/mig/builder/builder.go, v0.15.0): `all-disabled`, `all-enabled`, `all-balanced` and, per profile,
`all-<profile, '+' written as '.'>` with the profile at its maximum count. On a node with several GPU
models every entry carries a `device-filter` naming the device IDs that share that count; on a node of
one model no entry has a filter, so the output does not say which model it is. mig-manager publishes the
same text as ConfigMap `<node>-mig-config` (key `config.yaml`).

So an output says, per GPU model, which profiles exist and how many of each fit on one GPU: what the
catalogue says of that model. It does not say placements, SMs, engines or usable memory; a profile's
memory is only the whole-GB figure in its name (the naming formula's, migops.mig.profile).

The text is read by migops.mig's reader, as `migops validate` reads it; everything here is pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from migops.mig.catalogue import Catalogue, GiProfile, GpuModel
from migops.mig.devices import DeviceIdSyntaxError, parse_device_id
from migops.mig.problems import Problem, Severity, key_path
from migops.mig.profile import parse_profile
from migops.mig.spec import MigConfigEntry, MigPartedConfig
from migops.mig.text import listed

# The configs generate-config writes besides one per profile (builder.go, balanced.go).
FIXED_CONFIGS = ("all-disabled", "all-enabled", "all-balanced")
# What an output cannot tell, so the check never compares it.
NOT_COMPARED = ("placements", "SMs", "engines", "usable memory")


def config_name(profile: str) -> str:
    """The config generate-config writes for one profile (normalizeProfileName: '+' becomes '.', as a
    label value cannot hold '+')."""
    return "all-" + profile.replace("+", ".")


@dataclass(frozen=True)
class DiscoveredGpu:
    """One GPU model of an output: its device ID (None when the output names none: one model on the
    node) and each profile with its maximum count, in the output's order."""

    device_id: str | None
    profiles: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class GeneratedOutput:
    """One generate-config output: a file, or one ConfigMap of a manifest stream."""

    file: str
    object: str | None  # e.g. "ConfigMap gpu-operator/node-1-mig-config"; None: the file is the output
    gpus: tuple[DiscoveredGpu, ...]
    problems: tuple[Problem, ...] = ()  # why (part of) the text is not generate-config output

    @property
    def source(self) -> str:
        return f"{self.file}: {self.object}" if self.object else self.file


def _entry_profile(entry: MigConfigEntry, name: str) -> tuple[str, int] | Problem:
    """The (profile, count) of one per-profile entry, or why it is not one generate-config writes."""
    counts = [item for item in entry.mig_devices if item.count]
    if entry.devices != "all" or not entry.mig_enabled or len(counts) != 1:
        return Problem(
            entry.path,
            "not-generate-config",
            f"config {name!r}: generate-config writes each entry as `devices: all`, MIG enabled, one profile "
            "at its maximum count",
        )
    (item,) = counts
    if config_name(str(item.profile)) != name:
        return Problem(
            entry.path,
            "not-generate-config",
            f"config {name!r} holds {item.profile}: generate-config names that profile's config "
            f"{config_name(str(item.profile))!r}",
        )
    return str(item.profile), item.count


def _filter_ids(entry: MigConfigEntry) -> tuple[str | None, ...] | Problem:
    if not entry.device_filter:
        return (None,)
    try:
        return tuple(parse_device_id(text).primary for text in entry.device_filter)
    except DeviceIdSyntaxError as exc:
        return Problem(key_path(entry.path, "device-filter"), "not-generate-config", f"device-filter: {exc}")


def read_generated(config: MigPartedConfig, file: str, object: str | None = None) -> GeneratedOutput:
    """The GPU models and profiles an output lists; what is not generate-config's shape is a problem."""
    found: dict[str | None, dict[str, int]] = {}
    problems: list[Problem] = []
    for name, entries in config.configs:
        if name in FIXED_CONFIGS:
            continue
        if not name.startswith("all-"):
            problems.append(
                Problem(
                    key_path("mig-configs", name),
                    "not-generate-config",
                    f"config {name!r} is not one generate-config writes ({', '.join(FIXED_CONFIGS)}, all-<profile>)",
                )
            )
            continue
        for entry in entries:
            profile, devices = _entry_profile(entry, name), _filter_ids(entry)
            for made in (profile, devices):
                if isinstance(made, Problem):
                    problems.append(made)
            if isinstance(profile, Problem) or isinstance(devices, Problem):
                continue
            for device in devices:
                found.setdefault(device, {})[profile[0]] = profile[1]
    if None in found and len(found) > 1:
        problems.append(
            Problem(
                "mig-configs",
                "not-generate-config",
                "some entries carry a device-filter and some do not: generate-config writes filters on every "
                "entry of a node with several GPU models, on none otherwise",
            )
        )
    elif not found and not problems:
        problems.append(Problem("mig-configs", "not-generate-config", "no all-<profile> config: nothing to compare"))
    gpus = tuple(DiscoveredGpu(device, tuple(profiles.items())) for device, profiles in found.items())
    return GeneratedOutput(file, object, gpus, tuple(config.place(problems)))


# ------------------------------------------------------------------------------------------ the comparison
@dataclass(frozen=True)
class CatalogueDifference:
    """Where one output and the catalogue disagree on one profile of one model (or on the model)."""

    rule: str
    profile: str | None  # the profile it is about, as the output or else the catalogue names it
    output: int | None  # its maximum count in the output; None when the output lacks it
    catalogue: int | None  # in the catalogue; None when the catalogue lacks it
    message: str
    severity: Severity = "error"  # "warning": a name the catalogue knows as drift, nothing to change


@dataclass(frozen=True)
class ModelComparison:
    """One GPU model: the outputs that show it, and every difference with the outputs that show it."""

    device_id: str | None  # None: outputs that name no device ID
    model: GpuModel | None  # the catalogue's model; None when it has none for the device ID
    inferred: tuple[GpuModel, ...]  # outputs without a device ID: the models whose profiles they match
    sources: tuple[str, ...]
    profiles: int  # profiles compared (the catalogue's, or the outputs' where it has none)
    differences: tuple[tuple[CatalogueDifference, tuple[str, ...]], ...]

    @property
    def agrees(self) -> bool:
        return not any(d.severity == "error" for d, _ in self.differences)

    @property
    def name(self) -> str:
        if self.model is not None:
            return f"{self.model.name} ({self.model.device_id})"
        if self.inferred:
            others = len(self.inferred) - 1
            more = f" and {others} other model(s) with the same profiles" if others else ""
            return f"{self.inferred[0].name} ({self.inferred[0].device_id}){more}, inferred from the outputs"
        return self.device_id or "a GPU model the output does not name"


@dataclass(frozen=True)
class CatalogueCheck:
    outputs: tuple[GeneratedOutput, ...]
    models: tuple[ModelComparison, ...]

    @property
    def agrees(self) -> bool:
        return all(m.agrees for m in self.models) and not any(
            p.severity == "error" for o in self.outputs for p in o.problems
        )


def _shape(profile: GiProfile) -> tuple[int, int, tuple[str, ...], bool]:
    """What stays when only the memory figure of a name drifts."""
    p = profile.profile
    return (p.gpu, p.compute, p.attributes, p.negative)


def _matched(model: GpuModel, name: str, count: int, used: set[str]) -> list[CatalogueDifference] | None:
    """Differences of one output profile the catalogue resolves (by name or alias); None when it does not."""
    found = model.find_profile(parse_profile(name))
    if found is None or found[0].name in used:
        return None
    gi, by_alias = found
    used.add(gi.name)
    out = []
    if by_alias:
        out.append(
            CatalogueDifference(
                rule="catalogue-alias",
                profile=name,
                output=count,
                catalogue=gi.max_count,
                message=f"{name}: a name some drivers print for the catalogue's {gi.name} (known: migops accepts both)",
                severity="warning",
            )
        )
    if count != gi.max_count:
        out.append(
            CatalogueDifference(
                rule="catalogue-max-count",
                profile=gi.name,
                output=count,
                catalogue=gi.max_count,
                message=f"{gi.name}: at most {count} per GPU on the hardware, {gi.max_count} in the catalogue",
            )
        )
    return out


def _renamed(model: GpuModel, name: str, count: int, used: set[str]) -> CatalogueDifference:
    """An output profile the catalogue does not resolve: a profile of the same slices and attributes
    under another memory figure, or one the catalogue lacks."""
    wanted = parse_profile(name)
    key = (wanted.gpu, wanted.compute, wanted.attributes, wanted.negative)
    twin = next((gi for gi in model.profiles if gi.name not in used and _shape(gi) == key), None)
    if twin is None:
        return CatalogueDifference(
            rule="catalogue-lacks-profile",
            profile=name,
            output=count,
            catalogue=None,
            message=f"{name}: the hardware lists it (at most {count} per GPU); the catalogue does not have it",
        )
    used.add(twin.name)
    counts = "" if count == twin.max_count else f"; at most {count} per GPU, {twin.max_count} in the catalogue"
    return CatalogueDifference(
        rule="catalogue-memory",
        profile=name,
        output=count,
        catalogue=twin.max_count,
        message=f"{name}: the catalogue names it {twin.name} ({wanted.memory_gb} GB on the hardware, "
        f"{twin.profile.memory_gb} GB in the catalogue){counts}",
    )


def compare_model(model: GpuModel, profiles: Sequence[tuple[str, int]]) -> tuple[CatalogueDifference, ...]:
    """Every difference between one output's profiles for `model` and the catalogue's."""
    if not model.mig_capable:
        shown = listed([f"{name} (max {count})" for name, count in profiles], 8)
        return (
            CatalogueDifference(
                rule="catalogue-unknown-gpu",
                profile=None,
                output=len(profiles),
                catalogue=None,
                message=f"{model.device_id}: the catalogue has no MIG profiles for this device ID "
                f"({model.label()}); the hardware lists {len(profiles)}: {shown}",
            ),
        )
    used: set[str] = set()
    out: list[CatalogueDifference] = []
    unresolved = []
    for name, count in profiles:
        found = _matched(model, name, count, used)
        if found is None:
            unresolved.append((name, count))
        else:
            out += found
    out += [_renamed(model, name, count, used) for name, count in unresolved]
    out += [
        CatalogueDifference(
            rule="catalogue-extra-profile",
            profile=gi.name,
            output=None,
            catalogue=gi.max_count,
            message=f"{gi.name}: the catalogue has it (at most {gi.max_count} per GPU); the hardware does not list it",
        )
        for gi in model.profiles
        if gi.name not in used
    ]
    return tuple(out)


def _errors(found: Iterable[CatalogueDifference]) -> int:
    return sum(d.severity == "error" for d in found)


def infer_models(
    cat: Catalogue, profiles: Sequence[tuple[str, int]]
) -> tuple[tuple[GpuModel, ...], tuple[CatalogueDifference, ...]]:
    """The catalogue models an output that names no device ID is nearest to, with its differences from
    them: the models it differs least from, when they all show the same differences and those are at
    most half its profiles; else none (the output cannot be told apart)."""
    scored = [(g, compare_model(g, profiles)) for g in cat.gpus]
    best = min(_errors(found) for _, found in scored)
    nearest = [(g, found) for g, found in scored if _errors(found) == best]
    if len({found for _, found in nearest}) != 1 or best * 2 > len(profiles):
        return (), ()
    return tuple(g for g, _ in nearest), nearest[0][1]


@dataclass(frozen=True)
class _OutputModel:
    """One (output, GPU model) to compare."""

    source: str
    key: tuple[str, ...]  # what groups it with other outputs of the same model
    model: GpuModel | None
    inferred: tuple[GpuModel, ...]
    differences: tuple[CatalogueDifference, ...]
    profiles: int


def _unnamed(cat: Catalogue, gpu: DiscoveredGpu, source: str) -> _OutputModel:
    """An output without device IDs, with no model given: compared with the models it is nearest to, or
    a difference that asks for the model when it cannot be told."""
    inferred, found = infer_models(cat, gpu.profiles)
    if inferred:
        return _OutputModel(
            source, tuple(g.device_id for g in inferred), None, inferred, found, len(inferred[0].profiles)
        )
    nearest = sorted(cat.gpus, key=lambda g: _errors(compare_model(g, gpu.profiles)))[:3]
    missing = CatalogueDifference(
        rule="catalogue-model-unnamed",
        profile=None,
        output=len(gpu.profiles),
        catalogue=None,
        message="the output names no device ID (one GPU model on the node) and its profiles do not tell "
        f"which catalogue model it is: name the node's GPU with --gpu (nearest: {', '.join(g.name for g in nearest)})",
    )
    return _OutputModel(source, ("", source), None, (), (missing,), len(gpu.profiles))


def _seen(cat: Catalogue, output: GeneratedOutput, named: GpuModel | None) -> Iterable[_OutputModel]:
    for gpu in output.gpus:
        if gpu.device_id is None and named is None:
            yield _unnamed(cat, gpu, output.source)
            continue
        model = named if gpu.device_id is None and named is not None else cat.model(parse_device_id(str(gpu.device_id)))
        compared = len(model.profiles) if model.mig_capable else len(gpu.profiles)
        yield _OutputModel(output.source, (model.device_id,), model, (), compare_model(model, gpu.profiles), compared)


def check_catalogue(
    outputs: Sequence[GeneratedOutput], cat: Catalogue, named: GpuModel | None = None
) -> CatalogueCheck:
    """Every output against the catalogue, grouped per GPU model in catalogue order. `named`: the model
    of the outputs that name no device ID (`--gpu`); without it, inferred from their profiles."""
    groups: dict[tuple[str, ...], list[_OutputModel]] = {}
    for output in outputs:
        for seen in _seen(cat, output, named):
            groups.setdefault(seen.key, []).append(seen)
    order = {g.device_id: i for i, g in enumerate(cat.gpus)}
    models = [_merged(seen) for seen in groups.values()]
    models.sort(key=lambda m: (order.get(_first(m), len(order)), m.name))
    return CatalogueCheck(tuple(outputs), tuple(models))


def _first(m: ModelComparison) -> str:
    """The device ID a model's row sorts by: its own, or the first inferred model's."""
    return m.model.device_id if m.model else m.inferred[0].device_id if m.inferred else ""


def _merged(seen: Sequence[_OutputModel]) -> ModelComparison:
    """One model's outputs: each distinct difference once, with the outputs that show it."""
    shown: dict[CatalogueDifference, list[str]] = {}
    for s in seen:
        for d in s.differences:
            shown.setdefault(d, []).append(s.source)
    first = seen[0]
    device = first.model.device_id if first.model else None
    return ModelComparison(
        device,
        first.model if first.model is not None and first.model.mig_capable else None,
        first.inferred,
        tuple(dict.fromkeys(s.source for s in seen)),
        max(s.profiles for s in seen),
        tuple((d, tuple(dict.fromkeys(sources))) for d, sources in shown.items()),
    )

"""The checks mig-parted skips, so an invalid geometry is refused before any GPU client is paused.

Two ways to ask:
- on a node (`validate_on_node`): the node's GPUs in index order, as `migops validate --gpu ...` and the
  webhook (which knows the node's GPU model) ask it; every GPU must be covered, as `assert` requires;
- against the catalogue (`validate_against_catalogue`): each entry is checked on the models its
  device-filter names; an entry without a filter must fit at least one known model.

Rules (the `rule` of each Problem) are listed in docs/config-rules.md.
"""
from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from migops.mig.catalogue import Catalogue, GiProfile, GpuModel, catalogue, gi_key
from migops.mig.devices import DeviceIdSyntaxError, parse_device_id
from migops.mig.placement import Placement, place
from migops.mig.problems import Problem, Severity, index_path, key_path
from migops.mig.profile import MigProfile, compute_subprofile_allowed
from migops.mig.spec import MigConfigEntry, MigPartedConfig

Strategy = Literal["none", "single", "mixed"]
STRATEGIES: tuple[str, ...] = ("none", "single", "mixed")
MAX_GPUS_PER_NODE = 16  # HGX boards carry 8; no MIG-capable system puts more than 16 GPUs in one node

# A Kubernetes label value: the config name must be one to be selectable via nvidia.com/mig.config.
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


@dataclass(frozen=True)
class GpuResult:
    """What one GPU of the node becomes under the config."""

    index: int
    gpu: GpuModel
    entry: str | None  # path of the entry that decides this GPU (the last that selects it); None: uncovered
    mig_enabled: bool | None
    layout: tuple[Placement, ...] | None = None  # GPU instances, when the geometry is valid
    mig_devices: tuple[str, ...] = ()  # one profile string per MIG device (compute instance)

    def as_dict(self) -> dict[str, object]:
        return {
            "index": self.index,
            "device_id": self.gpu.device_id,
            "gpu": self.gpu.name,
            "entry": self.entry,
            "mig_enabled": self.mig_enabled,
            "instances": [p.as_dict() for p in self.layout or ()],
            "mig_devices": list(self.mig_devices),
        }


@dataclass(frozen=True)
class ConfigReport:
    """The verdict on one named config."""

    name: str
    problems: tuple[Problem, ...]
    gpus: tuple[GpuResult, ...] = ()  # node mode: one per GPU of the node
    fits: tuple[GpuModel, ...] = ()  # catalogue mode: the models the config is valid on

    @property
    def valid(self) -> bool:
        return not any(p.severity == "error" for p in self.problems)

    @property
    def errors(self) -> tuple[Problem, ...]:
        return tuple(p for p in self.problems if p.severity == "error")


# --------------------------------------------------------------------------------------------------
# Findings: problems with the GPU they were seen on, merged across GPUs before they are reported.


class _Lazy:
    """A message built only if it is shown: most per-model findings in catalogue mode are discarded."""

    __slots__ = ("_make", "_text")

    def __init__(self, make: Callable[[], str]) -> None:
        self._make: Callable[[], str] | None = make
        self._text = ""

    def __str__(self) -> str:
        if self._make is not None:
            self._text, self._make = self._make(), None
        return self._text


@dataclass(frozen=True)
class _Finding:
    path: str
    rule: str
    message: str | _Lazy
    severity: Severity = "error"
    gpu: str | None = None  # model name the finding is about; None: independent of the GPU


def _merge(findings: Sequence[_Finding]) -> tuple[Problem, ...]:
    """One Problem per (path, rule, message); the GPUs it was seen on are named once, in order."""
    gpus: dict[tuple[str, str, str, str], list[str]] = {}
    for f in findings:
        names = gpus.setdefault((f.path, f.rule, str(f.message), f.severity), [])
        if f.gpu and f.gpu not in names:
            names.append(f.gpu)
    problems = []
    for (path, rule, message, severity), names in gpus.items():
        if names:
            shown = ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")
            message = f"on {shown}: {message}"
        problems.append(Problem(path, rule, message, severity))  # type: ignore[arg-type]
    return tuple(problems)


# --------------------------------------------------------------------------------------------------
# Entry-level checks (independent of the GPU).


@dataclass(frozen=True)
class _Entry:
    """A config entry with its device-filter parsed once."""

    raw: MigConfigEntry
    filters: tuple  # parsed DeviceIds (unparseable ones dropped: they match nothing, as in mig-parted)
    indices: frozenset[int] | None  # None: devices: all
    # Device IDs the filter names; None without a filter. Catalogue GPUs carry no subsystem ID, so a
    # filter with a subsystem part is taken to match its device (see docs/config-rules.md).
    primaries: frozenset[str] | None = None

    def selects(self, index: int, gpu: GpuModel) -> bool:
        if self.indices is not None and index not in self.indices:
            return False
        return self.primaries is None or gpu.device_id in self.primaries

    def resolves_on(self, gpu: GpuModel) -> bool:
        """Cheap pre-check: every profile name of the entry exists (or is an alias) on this GPU."""
        index = gpu.table.index
        return all(gi_key(item.profile) in index for item in self.raw.mig_devices)


def _prepare_entry(entry: MigConfigEntry, cat: Catalogue, out: list[_Finding]) -> _Entry:
    filters = []
    filter_path = key_path(entry.path, "device-filter")
    for i, text in enumerate(entry.device_filter):
        path = index_path(filter_path, i) if len(entry.device_filter) > 1 else filter_path
        try:
            device = parse_device_id(text)
        except DeviceIdSyntaxError as exc:
            out.append(_Finding(path, "device-filter-syntax",
                                f"{exc}; mig-parted ignores the parse error and the entry silently matches no GPU"))
            continue
        if cat.by_device_id(device) is None:
            out.append(_Finding(path, "device-filter-unknown",
                                f"{text} names no known MIG-capable GPU (see `migops gpus`); the entry would "
                                "select nothing on any node"))
        filters.append(device)
    indices = None
    if entry.devices != "all":
        devices_path = key_path(entry.path, "devices")
        seen: set[int] = set()
        for i, value in enumerate(entry.devices):
            if value < 0:
                out.append(_Finding(index_path(devices_path, i), "negative-device-index",
                                    f"GPU index {value} is negative"))
            elif value in seen:
                out.append(_Finding(index_path(devices_path, i), "duplicate-device-index",
                                    f"GPU index {value} is listed twice"))
            seen.add(value)
        if not entry.devices:
            out.append(_Finding(devices_path, "no-devices", "the device list is empty: the entry selects no GPU",
                                "warning"))
        indices = frozenset(v for v in entry.devices if v >= 0)
    for item in entry.mig_devices:
        if item.count == 0:
            out.append(_Finding(key_path(key_path(entry.path, "mig-devices"), item.key), "zero-count",
                                "a count of 0 creates nothing, and mig-parted then never sees the config as "
                                "applied (it compares map sizes), so it reconfigures the GPU every time",
                                "warning"))
    primaries = frozenset(f.primary for f in filters) if entry.device_filter else None
    return _Entry(entry, tuple(filters), indices, primaries)


# --------------------------------------------------------------------------------------------------
# One entry's geometry on one GPU model.


@dataclass(frozen=True)
class _Geometry:
    findings: tuple[_Finding, ...]
    layout: tuple[Placement, ...] | None
    mig_devices: tuple[str, ...]


def _did_you_mean(profile: MigProfile, gpu: GpuModel, cat: Catalogue) -> str:
    """Name the nearest profile of this GPU: same G and attributes first (driver name drift such as
    7g.79gb vs 7g.80gb), then the same G, then the nearest in G and memory."""
    names = [p.name for p in gpu.profiles]

    def distance(gi: GiProfile) -> tuple:
        p = gi.profile
        return (p.attributes != profile.attributes or p.negative != profile.negative,
                abs(p.gpu - profile.gpu), abs(p.memory_gb - profile.memory_gb), gi.memory_slices)

    best = min(gpu.profiles, key=distance)
    hint = f"; did you mean {best.name!r}?"
    elsewhere = list(dict.fromkeys(g.name for g in cat.gpus_with_profile(profile)))
    if elsewhere:
        more = f" and {len(elsewhere) - 4} more" if len(elsewhere) > 4 else ""
        hint += f" ({profile.gi_name} exists on {', '.join(elsewhere[:4])}{more})"
    return f"profile {str(profile)!r} does not exist on this GPU (it has: {', '.join(names)}){hint}"


def _geometry(entry: MigConfigEntry, gpu: GpuModel, cat: Catalogue) -> _Geometry:
    """Resolve the entry's profiles on this GPU, check counts, the media engine, and placement."""
    findings: list[_Finding] = []
    name = gpu.name
    devices_path = key_path(entry.path, "mig-devices")
    # GI profile -> CI sizes requested in it, in mig-parted's flatten order (G desc, C desc).
    wanted: dict[GiProfile, list[int]] = defaultdict(list)
    first_key: dict[GiProfile, str] = {}
    mig_devices: list[str] = []
    for item in entry.mig_devices:
        path = key_path(devices_path, item.key)
        found = gpu.find_profile(item.profile)
        if found is None:
            hint = _Lazy(lambda p=item.profile: _did_you_mean(p, gpu, cat))
            findings.append(_Finding(path, "unknown-profile", hint, gpu=name))
            continue
        gi, by_alias = found
        if by_alias:
            findings.append(_Finding(path, "profile-name-drift",
                                     f"{item.key!r} is what some drivers call {gi.name!r}; the node's driver "
                                     "decides which name mig-parted accepts", "warning", gpu=name))
        if not compute_subprofile_allowed(item.profile.compute, item.profile.gpu):
            findings.append(_Finding(path, "invalid-compute-instance",
                                     f"a {item.profile.gpu}g GPU instance offers no {item.profile.compute}c compute "
                                     f"instance (valid: C == G, or C < G with 2C <= G+1)", gpu=name))
            continue
        first_key.setdefault(gi, item.key)
        wanted[gi].extend([item.profile.compute] * item.count)
        mig_devices.extend([str(item.profile)] * item.count)
    if findings and any(f.severity == "error" for f in findings):
        return _Geometry(tuple(findings), None, ())
    # Pack compute instances into GPU instances the way mig-parted does: reuse the previous GI of the
    # same profile while it has compute slices left (next-fit, largest first).
    request: dict[GiProfile, int] = {}
    for gi, sizes in wanted.items():
        gis, room = 0, 0
        for c in sorted(sizes, reverse=True):
            if c <= room:
                room -= c
            else:
                gis += 1
                room = gi.compute_slices - c
        request[gi] = gis
    for gi, count in request.items():
        if count > gi.max_count:
            findings.append(_Finding(key_path(devices_path, first_key[gi]), "count-exceeds-max",
                                     f"{count} x {gi.name} requested; the GPU allows at most {gi.max_count}",
                                     gpu=name))
    media = sum(c for gi, c in request.items() if gi.has_media_extensions)
    if media > 1:
        findings.append(_Finding(devices_path, "media-extensions-once",
                                 f"{media} instances with +me requested; a GPU has one set of media engines, "
                                 "so at most one +me instance fits", gpu=name))
    if any(f.severity == "error" for f in findings):
        return _Geometry(tuple(findings), None, ())
    layout = place(gpu.table, request)
    if layout is None:
        findings.append(_Finding(devices_path, "placement-infeasible", _why_infeasible(gpu, request), gpu=name))
        return _Geometry(tuple(findings), None, ())
    return _Geometry(tuple(findings), layout, tuple(mig_devices))


def _why_infeasible(gpu: GpuModel, request: dict[GiProfile, int]) -> str:
    table = gpu.table
    wanted = " + ".join(f"{c} x {gi.name}" for gi, c in request.items())
    memory = sum(gi.memory_slices * c for gi, c in request.items())
    compute = sum(gi.compute_slices * c for gi, c in request.items())
    if memory > table.memory_slices:
        return f"{wanted} needs {memory} memory slices; the GPU has {table.memory_slices}"
    if compute > table.compute_slices:
        return f"{wanted} needs {compute} compute slices; the GPU has {table.compute_slices}"
    starts = "; ".join(f"{gi.name} starts at {'/'.join(map(str, gi.starts))}" for gi in request)
    return f"{wanted} cannot be placed without overlap ({starts})"


# --------------------------------------------------------------------------------------------------
# A whole node.


def _strategy_findings(config_path: str, results: Sequence[GpuResult], strategy: Strategy | None,
                       entry_paths: dict[int, str]) -> list[_Finding]:
    if strategy is None:
        return []
    covered = [r for r in results if r.mig_enabled is not None]
    enabled = [r for r in covered if r.mig_enabled]
    findings: list[_Finding] = []
    if strategy == "none":
        for r in enabled:
            if r.mig_devices:
                findings.append(_Finding(
                    key_path(entry_paths[r.index], "mig-devices"), "strategy-mismatch",
                    "MIG strategy 'none' advertises whole GPUs only (nvidia.com/gpu): the MIG devices this "
                    "config creates cannot be scheduled; set the ClusterPolicy's mig.strategy to single or mixed",
                    gpu=r.gpu.name))
        return findings
    if strategy == "single":
        empty = [r for r in enabled if not r.mig_devices]
        profiles = sorted({d for r in enabled for d in r.mig_devices})
        why = []
        if empty:
            why.append(f"GPU {', '.join(str(r.index) for r in empty)} has MIG enabled but no MIG devices")
        if enabled and len(enabled) != len(covered):
            why.append("MIG-enabled and MIG-disabled GPUs are mixed on one node")
        if len(profiles) > 1:
            why.append(f"more than one MIG device type on the node ({', '.join(profiles)})")
        if why:
            findings.append(_Finding(
                config_path, "strategy-mismatch",
                "under MIG strategy 'single' " + "; ".join(why) + ": GFD labels the node "
                "nvidia.com/gpu.product=<model>-MIG-INVALID and it advertises 0 GPUs; use strategy 'mixed' "
                "or one profile type on every GPU", gpu=enabled[0].gpu.name if enabled else None))
        return findings
    for r in enabled:
        if not r.mig_devices:
            findings.append(_Finding(entry_paths[r.index], "no-mig-devices",
                                     f"GPU {r.index} has MIG enabled but no MIG devices: it advertises nothing",
                                     "warning", gpu=r.gpu.name))
    return findings


@dataclass
class _Context:
    """Per-call caches: entries are prepared once, geometries computed once per (entry, table)."""

    cat: Catalogue
    geometries: dict[tuple[int, str], _Geometry] = field(default_factory=dict)

    def geometry(self, entry: MigConfigEntry, gpu: GpuModel) -> _Geometry:
        key = (id(entry), gpu.table.id)
        if key not in self.geometries:
            self.geometries[key] = _geometry(entry, gpu, self.cat)
        return self.geometries[key]


def _evaluate_node(name: str, entries: Sequence[_Entry], node: Sequence[GpuModel], strategy: Strategy | None,
                   explicit: bool, ctx: _Context) -> tuple[list[_Finding], tuple[GpuResult, ...]]:
    """Findings and per-GPU results of one config on one node. Entry-level findings are not included."""
    config_path = key_path("mig-configs", name)
    findings: list[_Finding] = []
    selected: dict[int, list[_Entry]] = {}
    for entry in entries:
        for index, gpu in enumerate(node):
            if entry.selects(index, gpu):
                selected.setdefault(index, []).append(entry)
        if explicit and entry.indices is not None:
            for value in sorted(v for v in entry.indices if v >= len(node)):
                findings.append(_Finding(key_path(entry.raw.path, "devices"), "device-index-out-of-range",
                                         f"GPU index {value} does not exist on a node with {len(node)} GPU(s); "
                                         "mig-parted skips it silently", "warning"))
    results: list[GpuResult] = []
    entry_paths: dict[int, str] = {}
    for index, gpu in enumerate(node):
        chosen = selected.get(index, [])
        if not chosen:
            if explicit:
                findings.append(_Finding(config_path, "gpu-not-covered",
                                         f"no entry selects GPU {index} ({gpu.label()}); mig-parted's assert "
                                         "requires every GPU to match, so this config never reports as applied"))
            results.append(GpuResult(index, gpu, None, None))
            continue
        last = chosen[-1].raw
        entry_paths[index] = last.path
        for earlier in chosen[:-1]:
            same = (earlier.raw.mig_enabled == last.mig_enabled
                    and earlier.raw.profile_counts() == last.profile_counts())
            findings.append(_Finding(
                last.path, "overlapping-entries",
                f"this entry and {earlier.raw.path} both select GPU {index}; "
                + ("they agree, so the earlier one is redundant" if same else
                   "mig-parted applies both in turn (last wins) and its assert can never pass"),
                "warning" if same else "error", gpu=gpu.name))
        if not last.mig_enabled:
            results.append(GpuResult(index, gpu, last.path, False))
            continue
        geometry = ctx.geometry(last, gpu)
        # Geometries are cached per profile table; credit the findings to this GPU's model.
        findings.extend(f if f.gpu in (None, gpu.name) else _Finding(f.path, f.rule, f.message, f.severity, gpu.name)
                        for f in geometry.findings)
        results.append(GpuResult(index, gpu, last.path, True, geometry.layout, geometry.mig_devices))
    findings.extend(_strategy_findings(config_path, results, strategy, entry_paths))
    return findings, tuple(results)


def _config_findings(name: str) -> list[_Finding]:
    if not _LABEL_VALUE.match(name) or len(name) > 63:
        return [_Finding(key_path("mig-configs", name), "config-name-not-label",
                         f"{name!r} is not a valid label value (63 characters of [A-Za-z0-9-_.], alphanumeric "
                         "at both ends), so no node can select it with nvidia.com/mig.config", "warning")]
    return []


def _prepare(name: str, entries: Sequence[MigConfigEntry], cat: Catalogue) -> tuple[list[_Finding], list[_Entry]]:
    findings = _config_findings(name)
    prepared = [_prepare_entry(e, cat, findings) for e in entries]
    return findings, prepared


def validate_on_node(config: MigPartedConfig, name: str, node: Sequence[GpuModel],
                     strategy: Strategy | None = None, cat: Catalogue | None = None) -> ConfigReport:
    """Is config `name` valid when applied to a node with these GPUs (index order)?"""
    cat = cat or catalogue()
    findings, entries = _prepare(name, config.entries(name), cat)
    node_findings, results = _evaluate_node(name, entries, node, strategy, True, _Context(cat))
    return ConfigReport(name, _merge(findings + node_findings), gpus=results)


def validate_against_catalogue(config: MigPartedConfig, name: str, strategy: Strategy | None = None,
                               cat: Catalogue | None = None, ctx: _Context | None = None) -> ConfigReport:
    """Is config `name` valid on the GPU models it targets (or, unfiltered, on at least one model)?"""
    cat = cat or catalogue()
    ctx = ctx or _Context(cat)
    findings, entries = _prepare(name, config.entries(name), cat)
    # Entry-level errors (a malformed filter, a duplicate index) hold on every model: it fits none.
    entry_errors = any(f.severity == "error" for f in findings)
    filtered = all(e.raw.device_filter for e in entries)
    if filtered:
        named = {f.primary for e in entries for f in e.filters}
        models = [g for g in cat.gpus if g.device_id in named]
    else:
        models = list(cat.gpus)
    # A node of each model, as large as the highest index asks for (no node has more than 16 GPUs).
    highest = max([max(e.indices, default=-1) + 1 for e in entries if e.indices is not None] + [1])
    size = min(highest, MAX_GPUS_PER_NODE)
    if highest > MAX_GPUS_PER_NODE:
        findings.append(_Finding(key_path("mig-configs", name), "device-index-out-of-range",
                                 f"GPU index {highest - 1} is beyond the {MAX_GPUS_PER_NODE} GPUs any known node has",
                                 "warning"))
    fits: list[GpuModel] = []
    filtered_paths = tuple(e.raw.path for e in entries if e.raw.device_filter)

    def is_pinned(f: _Finding) -> bool:
        """A finding of a filtered entry on a model its filter names: always a real problem. When every
        entry is filtered, every model evaluated is one a filter names, so node-level findings
        (strategy-mismatch at the config's path) are real too."""
        return filtered or any(f.path == p or f.path.startswith(p + ".") or f.path.startswith(p + "[") for p in filtered_paths)

    def credit(findings: Sequence[_Finding], members: Sequence[GpuModel]) -> list[_Finding]:
        return [f if f.gpu is None else _Finding(f.path, f.rule, f.message, f.severity, gpu.name)
                for gpu in members for f in findings]

    # Models with the same profile table that the same entries select behave identically: evaluate
    # one of them and credit the findings to all.
    groups: dict[tuple, list[GpuModel]] = {}
    for gpu in models:
        selecting = tuple(i for i, e in enumerate(entries) if e.primaries is None or gpu.device_id in e.primaries)
        groups.setdefault((gpu.table.id, selecting), []).append(gpu)
    loose: list[tuple[list[GpuModel], list[_Finding], int]] = []

    def evaluate(members: list[GpuModel]) -> None:
        node_findings, _ = _evaluate_node(name, entries, [members[0]] * size, strategy, False, ctx)
        errors = sum(f.severity == "error" for f in node_findings)
        if not errors:
            fits.extend(members)
        if node_findings:
            findings.extend(credit([f for f in node_findings if is_pinned(f)], members))
            loose.append((members, [f for f in node_findings if not is_pinned(f)], errors))

    # A group where only unfiltered entries apply and one of them names a profile the GPU lacks cannot
    # fit, and its findings only matter if no model fits: evaluate it only then.
    deferred: list[list[GpuModel]] = []
    for (_, selecting), members in groups.items():
        chosen = [entries[i] for i in selecting]
        if (not filtered and all(e.primaries is None for e in chosen)
                and any(e.raw.mig_enabled and (e.indices is None or any(i < size for i in e.indices))
                        and not e.resolves_on(members[0]) for e in chosen)):
            deferred.append(members)
        else:
            evaluate(members)
    if not fits:
        for members in deferred:
            evaluate(members)
    if fits:
        # Warnings (name drift, ...) on the models it fits are still worth showing.
        for members, fs, errors in loose:
            if not errors:
                findings.extend(credit([f for f in fs if f.severity == "warning"], members))
    elif not filtered and loose:
        fewest = min(errors for _, _, errors in loose)
        for members, fs, errors in loose:
            if errors == fewest:
                findings.extend(credit(fs, members))
        findings.append(_Finding(key_path("mig-configs", name), "fits-no-gpu",
                                 "the config fits no known GPU model (see the problems above for the closest ones)"))
    if entry_errors:
        fits.clear()
    fits.sort(key=models.index)
    return ConfigReport(name, _merge(findings), fits=tuple(fits))


def validate(config: MigPartedConfig, names: Sequence[str] | None = None, node: Sequence[GpuModel] | None = None,
             strategy: Strategy | None = None, cat: Catalogue | None = None) -> tuple[ConfigReport, ...]:
    """Validate the named configs (all of them by default), on a node when one is given."""
    cat = cat or catalogue()
    ctx = _Context(cat)
    chosen = list(names) if names is not None else list(config.names())
    if node:
        return tuple(validate_on_node(config, n, node, strategy, cat) for n in chosen)
    return tuple(validate_against_catalogue(config, n, strategy, cat, ctx) for n in chosen)


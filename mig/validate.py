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
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property, lru_cache, partial
from operator import itemgetter
from typing import NamedTuple, cast

from migops.mig.catalogue import ENGINE_NAMES, Catalogue, GiProfile, GpuModel, ProfileTable, catalogue, gi_key
from migops.mig.devices import DeviceId, DeviceIdSyntaxError, parse_device_id
from migops.mig.gcpause import paused_gc
from migops.mig.placement import Placement, place
from migops.mig.problems import Problem, Severity, index_path, key_path, slot_setters
from migops.mig.profile import MigProfile, compute_subprofile_allowed
from migops.mig.spec import MigConfigEntry, MigPartedConfig, ProfileCount
from migops.mig.strategy import STRATEGIES as STRATEGIES  # re-exported: the validator's callers import them here
from migops.mig.strategy import Strategy as Strategy
from migops.mig.text import listed

MAX_GPUS_PER_NODE = 16  # HGX boards carry 8; no MIG-capable system puts more than 16 GPUs in one node

# A Kubernetes label value: the config name must be one to be selectable via nvidia.com/mig.config.
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


Packing = tuple[tuple[Placement, tuple[int, ...]], ...]


@dataclass(frozen=True, slots=True, init=False)
class GpuResult:
    """What one GPU of the node becomes under the config."""

    index: int
    gpu: GpuModel
    entry: str | None  # path of the entry that decides this GPU (the last that selects it); None: uncovered
    mig_enabled: bool | None
    layout: tuple[Placement, ...] | None = None  # GPU instances, when the geometry is valid
    mig_devices: tuple[str, ...] = ()  # one profile string per MIG device (compute instance)
    # The layout's GPU instances (placement order) with the compute instances mig-parted creates in
    # each (their compute slices, largest first): what the agent executes, packed as `_pack` counted.
    instances: Packing = ()

    # One per GPU of every config judged on a node (48,000 for 6,000 configs on 8 GPUs): made as Problem
    # is (`slot_setters`), not by the generated __init__.
    def __init__(
        self,
        index: int,
        gpu: GpuModel,
        entry: str | None,
        mig_enabled: bool | None,
        layout: tuple[Placement, ...] | None = None,
        mig_devices: tuple[str, ...] = (),
        instances: Packing = (),
    ) -> None:
        _set_index(self, index)
        _set_gpu(self, gpu)
        _set_entry(self, entry)
        _set_mig_enabled(self, mig_enabled)
        _set_layout(self, layout)
        _set_mig_devices(self, mig_devices)
        _set_instances(self, instances)

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


_set_index, _set_gpu, _set_entry, _set_mig_enabled, _set_layout, _set_mig_devices, _set_instances = slot_setters(
    GpuResult, "index gpu entry mig_enabled layout mig_devices instances"
)


@dataclass(frozen=True)
class ConfigReport:
    """The verdict on one named config."""

    name: str
    problems: tuple[Problem, ...]
    gpus: tuple[GpuResult, ...] = ()  # node mode: one per GPU of the node
    fits: tuple[GpuModel, ...] = ()  # catalogue mode: the models the config is valid on
    # Catalogue mode: no model fits the config (`fits-no-gpu`), whether that problem is listed or is
    # among those past MAX_PROBLEMS (migops.mig.fit.text_errors needs to know either way).
    fits_no_gpu: bool = False

    # Computed once (the report is frozen): fit_all, combine and every output format ask each report's
    # validity several times, and a large file has thousands of reports.
    @cached_property
    def valid(self) -> bool:
        return not any(p.severity == "error" for p in self.problems)

    @cached_property
    def errors(self) -> tuple[Problem, ...]:
        return tuple(p for p in self.problems if p.severity == "error")


# --------------------------------------------------------------------------------------------------
# Findings: problems with the GPU they were seen on, merged across GPUs before they are reported.
#
# Paths in findings are relative to a prefix (the config's path) so that configs with the same entries
# share one evaluation (YAML aliases make such repetition free for a writer and common in real files):
# the config itself is "" and its entries "[0]", "[1]", ...; the report adds the prefix.


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
class _PathMessage:
    """A message that names another path of the same config (relative until the report renders it)."""

    before: str
    path: str
    after: str

    def render(self, prefix: str) -> str:
        return f"{self.before}{prefix}{self.path}{self.after}"


Message = str | _Lazy | _PathMessage


class _Finding(NamedTuple):  # a tuple, not a dataclass: hundreds of thousands are made for large files
    path: str
    rule: str
    message: Message
    severity: Severity = "error"
    gpu: str | None = None  # model name the finding is about; None: independent of the GPU


# A merged finding, still relative: (path, rule, the models it was seen on, message, severity). The
# "on <models>: " head is written when the problem is shown (`_render`): most merged findings of a large
# config are past MAX_PROBLEMS and only counted.
_Merged = tuple[str, str, tuple[str, ...], Message, Severity]


# Findings with the models to credit them to (each finding then counts as seen on each of those
# models), or None to keep the GPU each finding names.
_Batch = tuple[Sequence[_Finding], Sequence[GpuModel] | None]


# What merging leaves past MAX_PROBLEMS, only counted: ((rule, severity), how many), in order first seen.
_Hidden = tuple[tuple[tuple[str, Severity], int], ...]


def _merge(batches: Sequence[_Batch]) -> tuple[tuple[_Merged, ...], _Hidden]:
    """One problem per (path, rule, message); the GPUs it was seen on are named once, in order. The
    first MAX_PROBLEMS are returned whole, the rest only counted by rule: a large config has hundreds of
    thousands (a key no model has, on each of eight models), and a problem not shown needs no models.

    A message is told apart from another by its text, except a lazy one, which stands for its text
    without building it: the context makes one per distinct text (a hint depends only on the profile
    and on the names of the model's profiles), so identity and text agree, and a hint that is never
    shown is never built."""
    # Models as tuples: most problems are seen on one model, whose name tuple is then the batch's own;
    # a merge (rare) makes a longer one.
    gpus: dict[tuple[str, str, object, Severity], tuple[Message, tuple[str, ...]]] = {}
    # The distinct keys past the first MAX_PROBLEMS, in order first seen: only counted, so neither their
    # models nor their messages are kept (`profiles` on 8 models: 203,000 of them).
    rest: dict[tuple[str, str, object, Severity], None] = {}
    get = gpus.get
    for found, members in batches:
        credit = (
            None
            if members is None
            else (members[0].name,)  # a node's GPU (most batches)
            if len(members) == 1
            else tuple(dict.fromkeys(m.name for m in members))
        )
        for f in found:
            message = f.message
            # (path, rule, message, severity): the finding's head, with a path message's text
            key = f[:4] if type(message) is not _PathMessage else (f.path, f.rule, message.render(""), f.severity)
            slot = get(key)
            gpu = f.gpu
            if slot is None:  # the first of its kind: seen on its GPU, or on the batch's models
                if len(gpus) < MAX_PROBLEMS:
                    gpus[key] = (message, ((gpu,) if credit is None else credit) if gpu else ())
                else:
                    rest[key] = None
            elif gpu:
                names = slot[1]
                new = (
                    ((gpu,) if gpu not in names else ())
                    if credit is None
                    else tuple(n for n in credit if n not in names)
                )
                if new:
                    gpus[key] = (slot[0], names + new)
    shown = tuple(
        (path, rule, names, message, severity) for (path, rule, _, severity), (message, names) in gpus.items()
    )
    if not rest:
        return shown, ()
    return shown, tuple(Counter(map(_rule_severity, rest)).items())


_rule_severity = itemgetter(1, 3)  # of a merge key (path, rule, message, severity)
_severity = itemgetter(3)  # of a _Finding


@lru_cache(maxsize=1024)  # a file's problems name a few combinations of a node's models, over and over
def _seen_on(names: tuple[str, ...]) -> str:
    """The head of a problem seen on these GPU models."""
    return f"on {listed(names, 6)}: " if names else ""


# What a shown problem says, by (models, message): a large file's configs repeat the same problem on the
# same models (a profile a model lacks, its hint), so each text is made, and held, once per call.
_Texts = dict[tuple[tuple[str, ...], str | _Lazy], str]


def _render(merged: Sequence[_Merged], prefix: str, texts: _Texts) -> list[Problem]:
    out = []
    for path, rule, names, message, severity in merged:
        if isinstance(message, _PathMessage):  # names a path of this config: its own text
            text = _seen_on(names) + message.render(prefix)
        else:
            key = (names, message)
            found = texts.get(key)
            if found is None:
                found = texts[key] = _seen_on(names) + str(message)
            text = found
        out.append(Problem(prefix + path, rule, text, severity))
    return out


def _ranges(values: Iterable[int], most: int = 12) -> str:
    """GPU indices for a message, consecutive runs joined: `0-3, 5, 9-12` (at most `most` runs shown)."""
    runs: list[list[int]] = []
    for v in sorted(set(values)):
        if runs and v == runs[-1][1] + 1:
            runs[-1][1] = v
        else:
            runs.append([v, v])
    return listed((str(a) if a == b else f"{a}-{b}" for a, b in runs), most)


def _gpus(indices: Sequence[int]) -> str:
    return f"GPU {_ranges(indices)}" if len(indices) == 1 else f"GPUs {_ranges(indices)}"


def _table(gpu: GpuModel) -> ProfileTable:
    """The profile table of a GPU the caller knows can do MIG (a catalogue model, or one past a
    `mig_capable` check)."""
    table = gpu.table
    assert table is not None, f"{gpu.name} cannot do MIG"
    return table


# --------------------------------------------------------------------------------------------------
# Entry-level checks (independent of the GPU). Repeated findings of one kind merge into one line.

_GiKey = tuple[int, int, tuple[str, ...], bool]  # what `gi_key` makes of a profile


# Not frozen and compared by identity: one is made per entry of every config, and a frozen dataclass's
# __init__ sets each field through object.__setattr__; nothing compares or hashes entries by value.
@dataclass(eq=False)
class _Entry:
    """A config entry with its device-filter parsed once."""

    raw: MigConfigEntry
    path: str  # relative to the config's path (see above)
    filters: tuple[DeviceId, ...]  # parsed DeviceIds (unparseable ones dropped: they match nothing, as in mig-parted)
    indices: frozenset[int] | None  # None: devices: all
    # Device IDs the filter names; None without a filter. Catalogue GPUs carry no subsystem ID, so a
    # filter with a subsystem part is taken to match its device (see docs/config-rules.md).
    primaries: frozenset[str] | None = None
    items: tuple[tuple[str, int], ...] = ()  # the mig-devices as (key, count) pairs: what the geometry depends on
    keys: tuple[str, ...] = ()  # the mig-devices' keys, in order
    gi_keys: tuple[_GiKey, ...] = ()  # what each profile name is looked up by in a profile table
    # table id -> unresolved_on(): computed once
    resolved: dict[str, int] = field(default_factory=dict, compare=False)
    # table id -> _Geometry: one dict for the entries of equal path and items (`_Context.geometry_table`)
    geometries: dict[str, _Geometry] = field(default_factory=dict, compare=False)

    @cached_property
    def counts(self) -> dict[MigProfile, int]:
        """raw.profile_counts(), for comparing overlapping entries (only they need it)."""
        return self.raw.profile_counts()

    def selects(self, index: int, gpu: GpuModel) -> bool:
        if self.indices is not None and index not in self.indices:
            return False
        return self.primaries is None or gpu.device_id in self.primaries

    def resolves_on(self, gpu: GpuModel) -> bool:
        """Cheap pre-check: every profile name of the entry exists (or is an alias) on this GPU."""
        return self.unresolved_on(_table(gpu)) == 0

    def unresolved_on(self, table: ProfileTable) -> int:
        """How many of the entry's profile names the table lacks (computed once per table)."""
        found = self.resolved.get(table.id)
        if found is None:
            index = table.index
            found = self.resolved[table.id] = sum(key not in index for key in self.gi_keys)
        return found


# What one device-filter string is: its DeviceId (None when it does not parse) and the problem with it,
# as (rule, message, severity), or None. A function of the string alone (and the catalogue).
_FilterItem = tuple[DeviceId | None, tuple[str, str, Severity] | None]


def _filter_item(text: str, cat: Catalogue) -> _FilterItem:
    try:
        device = parse_device_id(text)
    except DeviceIdSyntaxError as exc:
        return None, (
            "device-filter-syntax",
            f"{exc}; mig-parted ignores the parse error and the entry silently matches no GPU",
            "error",
        )
    if cat.by_device_id(device) is None and cat.known_non_mig(device) is None:
        return device, (
            "device-filter-unknown",
            f"{text} is no GPU migops knows (see `migops gpus`): it is taken as a GPU that "
            "cannot do MIG; if it is a typo, the entry selects nothing",
            "warning",
        )
    return device, None


def _device_indices(devices: Sequence[int], devices_path: str, out: list[_Finding]) -> frozenset[int]:
    """The GPU indices a `devices` list selects, with what is wrong with the list (negative or repeated
    indices, an empty list) added to `out`."""
    seen: set[int] = set()
    negative: list[tuple[int, int]] = []  # (position, value)
    repeated: list[tuple[int, int]] = []
    for i, value in enumerate(devices):
        if value < 0:
            negative.append((i, value))
        elif value in seen:
            repeated.append((i, value))
        seen.add(value)
    if negative:
        values = sorted({v for _, v in negative})
        out.append(
            _Finding(
                index_path(devices_path, negative[0][0]),
                "negative-device-index",
                f"GPU index {values[0]} is negative"
                if len(values) == 1
                else f"GPU indices {listed(values, 12)} are negative",
            )
        )
    if repeated:
        values = sorted({v for _, v in repeated})
        out.append(
            _Finding(
                index_path(devices_path, repeated[0][0]),
                "duplicate-device-index",
                f"GPU index {values[0]} is listed twice"
                if len(repeated) == 1
                else f"GPU index {values[0]} is listed more than once"
                if len(values) == 1
                else f"GPU indices {_ranges(values)} are listed more than once",
            )
        )
    if not devices:
        out.append(
            _Finding(devices_path, "no-devices", "the device list is empty: the entry selects no GPU", "warning")
        )
    return frozenset(v for v in devices if v >= 0)


def _prepare_entry(
    entry: MigConfigEntry, path: str, items: tuple[tuple[str, int], ...], ctx: _Context, out: list[_Finding]
) -> _Entry:
    """The entry with its filters parsed and its entry-level checks done; `items` are its mig-devices as
    (key, count) pairs (its `_entry_key`'s, made once)."""
    filters: list[DeviceId] = []
    filter_path = key_path(path, "device-filter")
    several = len(entry.device_filter) > 1
    for i, text in enumerate(entry.device_filter):
        device, problem = ctx.filter_item(text)
        if problem is not None:
            out.append(_Finding(index_path(filter_path, i) if several else filter_path, *problem))
        if device is not None:
            filters.append(device)
    indices = None
    if not isinstance(entry.devices, str):  # a str is "all" (the parser makes nothing else)
        indices = _device_indices(entry.devices, key_path(path, "devices"), out)
    for item in entry.mig_devices:
        if item.count == 0:
            out.append(
                _Finding(
                    key_path(key_path(path, "mig-devices"), item.key),
                    "zero-count",
                    "a count of 0 creates nothing, and mig-parted then never sees the config as "
                    "applied (it compares map sizes), so it reconfigures the GPU every time",
                    "warning",
                )
            )
    primaries = frozenset(f.primary for f in filters) if entry.device_filter else None
    return _Entry(
        entry,
        path,
        tuple(filters),
        indices,
        primaries,
        items,
        tuple(item.key for item in entry.mig_devices),
        tuple(gi_key(item.profile) for item in entry.mig_devices),
        geometries=ctx.geometry_table(path, items),
    )


# --------------------------------------------------------------------------------------------------
# One entry's geometry on one GPU model.

_Item = tuple[tuple["_Finding", ...], GiProfile | None]


# The GPU of a finding that holds on every model of a profile table: replaced by the model's name
# where it is reported (`_merge`, which credits a batch of them to the GPU model or the group's models).
_MODEL = "<model>"


class _Geometry:
    """One entry's geometry on one profile table: findings (about `_MODEL`), layout, MIG devices."""

    __slots__ = ("findings", "errors", "layout", "mig_devices", "instances")

    def __init__(
        self,
        findings: tuple[_Finding, ...],
        layout: tuple[Placement, ...] | None,
        mig_devices: tuple[str, ...],
        instances: Packing = (),
    ) -> None:
        self.findings = findings
        self.errors = list(map(_severity, findings)).count("error") if findings else 0
        self.layout = layout
        self.mig_devices = mig_devices
        self.instances = instances


def _did_you_mean(profile: MigProfile, gpu: GpuModel, cat: Catalogue) -> str:
    """Name the nearest profile of this GPU: same G and attributes first (driver name drift such as
    7g.79gb vs 7g.80gb), then the same G, then the nearest in G and memory."""
    key = gi_key(profile)
    names, best = _nearest(_table(gpu), key)
    hint = f"; did you mean {best!r}?"
    elsewhere = _owners(cat, key)
    if elsewhere:
        hint += f" ({profile.gi_name} exists on {elsewhere})"
    return f"profile {str(profile)!r} does not exist on this GPU (it has: {names}){hint}"


# Both depend on the profile only through its key (G, GB, attributes), and a large file's unknown
# profiles are hinted on each table: one answer per (table, key). Bounded: keys come from the input.
@lru_cache(maxsize=4096)
def _nearest(table: ProfileTable, key: _GiKey) -> tuple[str, str]:
    """(the table's profile names, the profile of the table nearest to the key)."""
    gpu, memory, attributes, negative = key

    def distance(gi: GiProfile) -> tuple[bool, int, int, int]:
        p = gi.profile
        return (
            p.attributes != attributes or p.negative != negative,
            abs(p.gpu - gpu),
            abs(p.memory_gb - memory),
            gi.memory_slices,
        )

    return ", ".join(table.names), min(table.profiles, key=distance).name


@lru_cache(maxsize=4096)
def _owners(cat: Catalogue, key: _GiKey) -> str:
    """The models that have the key, for a hint ("" when none has it)."""
    return listed(dict.fromkeys(g.name for g in cat.gpus_with_key(key)), 4)


def _pack(gi: GiProfile, sizes: dict[int, int]) -> int:
    """How many GPU instances of `gi` mig-parted creates for compute instances of these sizes (size ->
    count): it reuses the previous GI of the same profile while it has compute slices left (next-fit,
    largest first). Arithmetic over runs of equal sizes, so a count of 2^63-1 costs what a count of 1 does."""
    gis, room, slices = 0, 0, gi.compute_slices
    for c in sorted(sizes, reverse=True):
        n = sizes[c]
        fit = min(n, room // c) if room >= c else 0  # into the GI still open
        room -= fit * c
        n -= fit
        if n:
            per = max(slices // c, 1)  # a fresh GI takes this many (one, if c does not fit at all)
            full, rest = divmod(n, per)
            gis += full + (1 if rest else 0)
            room = slices - (rest or per) * c
    return gis


def _packed(layout: Sequence[Placement], wanted: dict[GiProfile, dict[int, int]]) -> Packing:
    """Which compute instances go into which GPU instance of the layout: mig-parted's reuse of the
    previous GI of a profile while it has compute slices left (next-fit, largest first), the packing
    `_pack` counted GIs by. Each GI of a profile, in placement order, takes CIs from the largest while
    they fit (a fresh GI takes one even when it is larger, as `_pack` allows)."""
    by_name = {gi.name: gi for gi in wanted}
    queues = {
        gi.name: sorted((c for c, n in sizes.items() for _ in range(n)), reverse=True) for gi, sizes in wanted.items()
    }
    out: list[tuple[Placement, tuple[int, ...]]] = []
    for placement in sorted(layout):
        mine: list[int] = []
        queue, room = queues[placement.profile], by_name[placement.profile].compute_slices
        while queue and (queue[0] <= room or not mine):
            room -= queue[0]
            mine.append(queue.pop(0))
        out.append((placement, tuple(mine)))
    return tuple(out)


def _resolve_item(path: str, item: ProfileCount, gpu: GpuModel, ctx: _Context) -> _Item:
    """One mig-devices key on one GPU model: its GI profile (None when it has none) and findings."""
    found = gpu.find_profile(item.profile)
    if found is None:
        return (_Finding(path, "unknown-profile", ctx.did_you_mean(item, gpu), gpu=_MODEL),), None
    gi, by_alias = found
    findings: tuple[_Finding, ...] = ()
    if by_alias:
        findings = (
            _Finding(
                path,
                "profile-name-drift",
                f"{item.key!r} is what some drivers call {gi.name!r}; the node's driver decides which "
                "name mig-parted accepts",
                "warning",
                _MODEL,
            ),
        )
    if not compute_subprofile_allowed(item.profile.compute, item.profile.gpu):
        return findings + (
            _Finding(
                path,
                "invalid-compute-instance",
                f"a {item.profile.gpu}g GPU instance offers no {item.profile.compute}c compute "
                f"instance (valid: C == G, or C < G with 2C <= G+1)",
                gpu=_MODEL,
            ),
        ), None
    return findings, gi


def _geometry(entry: _Entry, gpu: GpuModel, ctx: _Context) -> _Geometry:
    """Resolve the entry's profiles on this GPU, check counts, the media engine, and placement."""
    findings: list[_Finding] = []
    devices_path = key_path(entry.path, "mig-devices")
    mig_devices = entry.raw.mig_devices
    items = ctx.resolved_items(devices_path, gpu)
    looked_up = list(map(items.get, entry.keys))  # what this table has resolved of them (most, in a large file)
    if None in looked_up:
        for i, k in enumerate(looked_up):
            if k is None:
                item = mig_devices[i]
                looked_up[i] = items[item.key] = _resolve_item(key_path(devices_path, item.key), item, gpu, ctx)
    known = cast("list[_Item]", looked_up)  # none is missing now
    errors = False
    for found, gi in known:
        if found:
            findings += found
        if gi is None:
            errors = True
    if errors:  # most entries of a large file that fail on a model fail here: the rest is not needed
        return _Geometry(tuple(findings), None, ())
    resolved = cast("list[tuple[ProfileCount, GiProfile]]", [(item, k[1]) for item, k in zip(mig_devices, known)])
    # GI profile -> {CI size: count} requested in it; the first key that named it (for paths).
    wanted: dict[GiProfile, dict[int, int]] = {}
    first_key: dict[GiProfile, str] = {}
    devices: list[tuple[str, int]] = []
    for item, gi in resolved:
        first_key.setdefault(gi, item.key)
        sizes = wanted.setdefault(gi, {})
        sizes[item.profile.compute] = sizes.get(item.profile.compute, 0) + item.count
        devices.append((str(item.profile), item.count))
    request: dict[GiProfile, int] = {gi: _pack(gi, sizes) for gi, sizes in wanted.items()}
    for gi, count in request.items():
        if count > gi.max_count:
            findings.append(
                _Finding(
                    key_path(devices_path, first_key[gi]),
                    "count-exceeds-max",
                    f"{count} x {gi.name} requested; the GPU allows at most {gi.max_count}",
                    gpu=_MODEL,
                )
            )
            errors = True
    if errors:
        return _Geometry(tuple(findings), None, ())
    layout = place(_table(gpu), request)
    if layout is None:
        findings.append(_Finding(devices_path, "placement-infeasible", _why_infeasible(gpu, request), gpu=_MODEL))
        return _Geometry(tuple(findings), None, ())
    # Engines are judged on a geometry that fits, so the problem reported is the first that stops it.
    over = _over_budget(gpu, request)
    if over:
        findings.append(_Finding(devices_path, "engine-budget", over, gpu=_MODEL))
        return _Geometry(tuple(findings), None, ())
    # Every count is now within the GPU's maximum, so listing one string per MIG device is cheap.
    return _Geometry(
        tuple(findings), layout, tuple(name for name, count in devices for _ in range(count)), _packed(layout, wanted)
    )


def _plural(n: int, kind: str) -> str:
    name = ENGINE_NAMES[kind]
    return f"{n} {name}" if n == 1 else f"{n} {name}s"


def _and(parts: Sequence[str]) -> str:
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def _amounts(amounts: Sequence[tuple[str, int]]) -> str:
    """`4 of each` when the amounts agree (of several kinds), else `4 decoders and 1 OFA`."""
    values = {n for _, n in amounts}
    if len(values) == 1:
        return f"{amounts[0][1]}" + (
            " of each" if len(amounts) > 1 else f" {ENGINE_NAMES[amounts[0][0]]}" + ("" if amounts[0][1] == 1 else "s")
        )
    return _and([_plural(n, kind) for kind, n in amounts])


def _over_budget(gpu: GpuModel, request: dict[GiProfile, int]) -> str | None:
    """The engines the instances need beyond what the GPU has, or None when they fit (or are unknown).

    One mechanism for every engine: it is also what limits media extensions, since a GPU has one OFA
    that each +me instance takes, and +me.all takes every media engine (RTX PRO 6000: only -me
    instances, which take none, fit beside it)."""
    budget = _table(gpu).engines
    wanted = [(gi, count) for gi, count in request.items() if count]
    if budget is None or any(gi.engines is None for gi, _ in wanted):
        return None
    need = {kind: sum(count * getattr(gi.engines, kind) for gi, count in wanted) for kind, _ in budget.items()}
    over = [(kind, total) for kind, total in budget.items() if need[kind] > total]
    if not over:
        return None
    takers = []
    for gi, count in wanted:
        taken = [(kind, count * getattr(gi.engines, kind)) for kind, _ in over]
        if any(n for _, n in taken):
            takers.append(f"{count} x {gi.name} {'takes' if count == 1 else 'take'} {_amounts(taken)}")
    message = (
        f"the instances need {_and([_plural(need[kind], kind) for kind, _ in over])}; the GPU has "
        f"{_amounts(over)} ({', '.join(takers)})"
    )
    if any("me.all" in gi.profile.attributes and not gi.profile.negative for gi, _ in wanted):
        message += ". A +me.all instance takes every media engine: only -me instances fit beside it"
    elif sum(count for gi, count in wanted if gi.has_media_extensions) > 1:
        message += ". A GPU has one set of media extensions: at most one +me instance fits"
    return message


def _why_infeasible(gpu: GpuModel, request: dict[GiProfile, int]) -> str:
    table = _table(gpu)
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


class _GpuOutcome(NamedTuple):  # a tuple: one is made per GPU of every config (`gpu_index`: not to shadow tuple.index)
    """A GpuResult before its entry path is made absolute."""

    gpu_index: int
    gpu: GpuModel
    entry: str | None
    mig_enabled: bool | None
    layout: tuple[Placement, ...] | None = None
    mig_devices: tuple[str, ...] = ()
    instances: Packing = ()


# A _GpuOutcome past its index: (gpu, entry, mig_enabled, layout, mig_devices, instances).
_OutcomeTail = tuple[GpuModel, str, bool, tuple[Placement, ...] | None, tuple[str, ...], Packing]
# A _GpuOutcome from a tuple of all its fields, without the Python-level __new__ (one per GPU of every config).
_outcome: Callable[[tuple[object, ...]], _GpuOutcome] = partial(tuple.__new__, _GpuOutcome)


class _Selection(NamedTuple):
    """Which entries select each GPU index of a node (in entry order), and the overlaps that follow."""

    chosen: tuple[tuple[_Entry, ...], ...]
    overlaps: tuple[tuple[_Finding, ...], ...]  # per index; gpu set to the index's model name
    overlap_errors: tuple[int, ...]  # per index


def _select(entries: Sequence[_Entry], node: Sequence[GpuModel]) -> _Selection:
    chosen: list[list[_Entry]] = [[] for _ in node]
    for entry in entries:
        if entry.indices is None and entry.primaries is None:  # devices: all, no filter (most entries)
            for selected in chosen:
                selected.append(entry)
            continue
        for index, gpu in enumerate(node):
            if entry.selects(index, gpu):
                chosen[index].append(entry)
    if max(map(len, chosen), default=0) < 2:  # no GPU selected twice: no overlaps (most configs, one entry each)
        none = ((),) * len(node)
        return _Selection(tuple(map(tuple, chosen)), none, (0,) * len(node))
    # One finding per (entry, earlier entry, model), naming every GPU index the two both select; it is
    # reported where the first of those GPUs is.
    groups: dict[tuple[int, int, str], list[int]] = {}
    for index, gpu in enumerate(node):
        for earlier in chosen[index][:-1]:
            groups.setdefault((id(chosen[index][-1]), id(earlier), gpu.name), []).append(index)
    found: list[list[_Finding]] = [[] for _ in node]
    for index, gpu in enumerate(node):
        if not chosen[index]:
            continue
        last = chosen[index][-1]
        for earlier in chosen[index][:-1]:
            indices = groups.get((id(last), id(earlier), gpu.name))
            if not indices or indices[0] != index:
                continue
            same = earlier.raw.mig_enabled == last.raw.mig_enabled and earlier.counts == last.counts
            found[index].append(
                _Finding(
                    last.path,
                    "overlapping-entries",
                    _PathMessage(
                        "this entry and ",
                        earlier.path,
                        f" both select {_gpus(indices)}; "
                        + (
                            "they agree, so the earlier one is redundant"
                            if same
                            else "mig-parted applies both in turn (last wins) and its assert can never pass"
                        ),
                    ),
                    "warning" if same else "error",
                    gpu=gpu.name,
                )
            )
    overlaps = [tuple(f) for f in found]
    overlap_errors = tuple(sum(f.severity == "error" for f in fs) for fs in overlaps)
    return _Selection(tuple(map(tuple, chosen)), tuple(overlaps), overlap_errors)


def _strategy_findings(
    config_path: str, results: Sequence[_GpuOutcome], strategy: Strategy, out: list[_Finding]
) -> int:
    """Adds to `out` what the node's MIG strategy makes of its GPUs; returns how many of those are errors.
    A GPU whose geometry is invalid has its error already; judging its (absent) MIG devices against the
    strategy would only add noise. A GPU that cannot do MIG stays a whole GPU."""
    covered = [r for r in results if r.mig_enabled is not None and not (r.mig_enabled and r.layout is None)]
    enabled = [r for r in covered if r.mig_enabled and r.gpu.mig_capable]
    if strategy == "none":
        found = _whole_gpus_only(enabled)
    elif strategy == "single":
        found = _one_device_type(config_path, covered, enabled)
    else:
        found = _idle_mig_gpus(enabled)
    out.extend(found)
    return sum(f.severity == "error" for f in found)


def _whole_gpus_only(enabled: list[_GpuOutcome]) -> list[_Finding]:
    """Strategy none: MIG devices are never advertised."""
    return [
        _Finding(
            key_path(cast(str, r.entry), "mig-devices"),
            "strategy-mismatch",
            "MIG strategy 'none' advertises whole GPUs only (nvidia.com/gpu): the MIG devices this "
            "config creates cannot be scheduled; set the ClusterPolicy's mig.strategy to single or mixed",
            gpu=r.gpu.name,
        )
        for r in enabled
        if r.mig_devices
    ]


def _one_device_type(config_path: str, covered: list[_GpuOutcome], enabled: list[_GpuOutcome]) -> list[_Finding]:
    """Strategy single: every GPU of the node in MIG mode, with MIG devices of one type."""
    empty = [r for r in enabled if not r.mig_devices]
    profiles = sorted({d for r in enabled for d in r.mig_devices})
    why = []
    if empty:
        why.append(
            f"{_gpus([r.gpu_index for r in empty])} {'has' if len(empty) == 1 else 'have'} MIG enabled but "
            "no MIG devices"
        )
    if enabled and len(enabled) != len(covered):
        why.append("MIG-enabled and MIG-disabled GPUs are mixed on one node")
    if len(profiles) > 1:
        why.append(f"more than one MIG device type on the node ({', '.join(profiles)})")
    if not why:
        return []
    return [
        _Finding(
            config_path,
            "strategy-mismatch",
            "under MIG strategy 'single' " + "; ".join(why) + ": GFD labels the node "
            "nvidia.com/gpu.product=<model>-MIG-INVALID and it advertises 0 GPUs; use strategy 'mixed' "
            "or one profile type on every GPU",
            gpu=enabled[0].gpu.name if enabled else None,
        )
    ]


def _idle_mig_gpus(enabled: list[_GpuOutcome]) -> list[_Finding]:
    """Strategy mixed: a GPU in MIG mode without MIG devices advertises nothing."""
    idle: dict[tuple[str, str], list[int]] = {}  # (entry path, model) -> GPU indices without MIG devices
    for r in enabled:
        if not r.mig_devices:
            idle.setdefault((cast(str, r.entry), r.gpu.name), []).append(r.gpu_index)
    return [
        _Finding(
            path,
            "no-mig-devices",
            f"{_gpus(indices)} {'has' if len(indices) == 1 else 'have'} MIG enabled but no MIG "
            f"devices: {'it advertises' if len(indices) == 1 else 'they advertise'} nothing",
            "warning",
            gpu=gpu,
        )
        for (path, gpu), indices in idle.items()
    ]


def _out_of_range(entries: Sequence[_Entry], node: Sequence[GpuModel]) -> list[_Finding]:
    """Entries that list GPU indices the node lacks (mig-parted skips them silently)."""
    findings = []
    for entry in entries:
        if entry.indices is not None:
            missing = [v for v in entry.indices if v >= len(node)]
            if missing:
                findings.append(
                    _Finding(
                        key_path(entry.path, "devices"),
                        "device-index-out-of-range",
                        (
                            f"GPU index {missing[0]} does not exist"
                            if len(missing) == 1
                            else f"GPU indices {_ranges(missing)} do not exist"
                        )
                        + f" on a node with {len(node)} GPU(s); mig-parted skips "
                        + ("it" if len(missing) == 1 else "them")
                        + " silently",
                        "warning",
                    )
                )
    return findings


def _uncovered(selection: _Selection, node: Sequence[GpuModel], ctx: _Context) -> tuple[dict[str, list[int]], int]:
    """The node's GPUs no entry selects, by their label (one finding names them all), and the first of them
    (where that finding is reported; -1: none)."""
    uncovered: dict[str, list[int]] = {}
    labels = ctx.labels
    for index, gpu in enumerate(node):
        if not selection.chosen[index]:
            label = labels.get(id(gpu))
            if label is None:
                label = labels[id(gpu)] = gpu.label()
            uncovered.setdefault(label, []).append(index)
    return uncovered, min((i for indices in uncovered.values() for i in indices), default=-1)


def _listed(
    geometry: _Geometry, gpu: GpuModel, explicit: bool, findings: list[_Finding], batches: list[_Batch]
) -> list[_Finding]:
    """Lists a geometry's findings, and returns the list the node's next findings go to. On a given node
    they are a batch of their own, credited to the GPU's model, and a new batch follows; in catalogue
    mode they join the node's findings, credited to each model of the group when merging."""
    if not explicit:
        findings.extend(geometry.findings)
        return findings
    following: list[_Finding] = []
    batches += [(geometry.findings, (gpu,)), (following, None)]
    return following


def _not_mig_capable(path: str, index: int, gpu: GpuModel) -> _Finding:
    return _Finding(
        key_path(path, "mig-enabled"),
        "mig-not-capable",
        f"this entry enables MIG on GPU {index}, which cannot do MIG ({gpu.label()}): mig-parted's assert "
        "fails on it ('unable to assert MIG mode enabled on non MIG-capable GPU'), so the config never "
        "applies; give that GPU an entry with mig-enabled: false",
        gpu=gpu.name,
    )


def _evaluate_node(
    config_path: str,
    entries: Sequence[_Entry],
    selection: _Selection,
    node: Sequence[GpuModel],
    strategy: Strategy | None,
    explicit: bool,
    ctx: _Context,
) -> tuple[list[_Batch], tuple[_GpuOutcome, ...], int]:
    """Findings, per-GPU results and the number of errors of one config on one node (entry-level
    findings not included). `explicit`: the node is given (--gpu, the webhook), and a geometry's
    findings are one batch credited to its GPU's model; otherwise it is a catalogue-mode node of one
    model, whose findings (one batch) are credited to the group's models later."""
    findings = _out_of_range(entries, node) if explicit else []
    batches: list[_Batch] = [(findings, None)]
    uncovered, first_uncovered = _uncovered(selection, node, ctx) if explicit else ({}, -1)
    errors = 0
    results: list[_GpuOutcome] = []
    outcomes = explicit or strategy is not None  # catalogue mode without a strategy needs findings only
    # (entry, model) whose geometry's findings are listed already: on the next GPU of that model the
    # entry selects they are the same findings, which merging would drop (8 x H100: one listing, not 8).
    listed_geometries: set[tuple[int, str]] = set()
    # (entry, GPU model object) -> (errors, the outcome past its index) where a GPU before was decided
    # by the same entry on the same model: a node repeats one model (8 x H100), judged once.
    repeats: dict[tuple[int, int], tuple[int, _OutcomeTail]] = {}
    all_chosen, all_overlaps = selection.chosen, selection.overlaps
    for index, gpu in enumerate(node):
        chosen = all_chosen[index]
        if not chosen:
            if index == first_uncovered:
                findings.append(_Finding(config_path, "gpu-not-covered", ctx.not_covered(uncovered)))
                errors += 1
            if outcomes:
                results.append(_outcome((index, gpu, None, None, None, (), ())))
            continue
        last = chosen[-1]
        if overlaps := all_overlaps[index]:
            findings.extend(overlaps)
            errors += selection.overlap_errors[index]
        pair = (id(last), id(gpu))
        repeat = repeats.get(pair)
        if repeat is None:
            if not last.raw.mig_enabled:
                repeat = repeats[pair] = (0, (gpu, last.path, False, None, (), ()))
            elif not gpu.mig_capable:  # not kept in `repeats`: its finding names the GPU's index
                findings.append(_not_mig_capable(last.path, index, gpu))
                repeat = (1, (gpu, last.path, True, None, (), ()))
            else:
                geometry = ctx.geometry(last, gpu)
                tail = (gpu, last.path, True, geometry.layout, geometry.mig_devices, geometry.instances)
                repeat = repeats[pair] = (geometry.errors, tail)
                if geometry.findings and (id(last), gpu.name) not in listed_geometries:
                    listed_geometries.add((id(last), gpu.name))
                    findings = _listed(geometry, gpu, explicit, findings, batches)
        errors += repeat[0]
        if outcomes:
            results.append(_outcome((index, *repeat[1])))
    if strategy is not None:
        errors += _strategy_findings(config_path, results, strategy, findings)
    return batches, tuple(results), errors


def _config_findings(name: str) -> list[Problem]:
    if not _LABEL_VALUE.match(name) or len(name) > 63:
        return [
            Problem(
                key_path("mig-configs", name),
                "config-name-not-label",
                f"{name!r} is not a valid label value (63 characters of [A-Za-z0-9-_.], alphanumeric "
                "at both ends), so no node can select it with nvidia.com/mig.config",
                "warning",
            )
        ]
    return []


# --------------------------------------------------------------------------------------------------
# Catalogue mode: a config on every model it can apply to.


# A group of models in catalogue mode, judged: (members, findings, errors).
_Loose = tuple[list[GpuModel], Sequence[_Finding], int]
# Models judged as one: ((table id, or device ID without a table; indices of the entries selecting), members).
_Group = tuple[tuple[str, tuple[int, ...]], list[GpuModel]]


def _catalogue_models(entries: Sequence[_Entry], filtered: bool, ctx: _Context) -> list[GpuModel]:
    """The models a config is judged on: those its filters name when every entry has one (MIG-capable
    ones in catalogue order, then GPUs that cannot do MIG), else every known model; only the asked
    model when the question is one (validate_on_model)."""
    cat = ctx.cat
    if filtered:
        named = {f.primary: f for e in entries for f in e.filters}
        models = [g for g in cat.gpus if g.device_id in named]
        models += [cat.model(f) for primary, f in named.items() if cat.by_device_id(primary) is None]
    else:
        models = list(cat.gpus) if ctx.only is not None else ctx.everything
    if ctx.only is not None:
        models = [g for g in models if g.device_id == ctx.only.device_id]
    return models


def _node_size(config_path: str, entries: Sequence[_Entry], findings: list[_Finding]) -> tuple[int, list[_Finding]]:
    """How many GPUs the node of each model has: as many as the highest index asks for, at most
    MAX_GPUS_PER_NODE; and the entry-level findings, with a warning when an index is beyond that."""
    highest = max([max(e.indices, default=-1) + 1 for e in entries if e.indices is not None] + [1])
    if highest <= MAX_GPUS_PER_NODE:
        return highest, findings
    beyond = _Finding(
        config_path,
        "device-index-out-of-range",
        f"GPU index {highest - 1} is beyond the {MAX_GPUS_PER_NODE} GPUs any known node has",
        "warning",
    )
    return MAX_GPUS_PER_NODE, [*findings, beyond]


def _model_groups(
    entries: Sequence[_Entry], models: list[GpuModel], filtered_paths: tuple[str, ...], ctx: _Context
) -> list[_Group]:
    """Models with the same profile table that the same entries select behave identically: one of them
    is evaluated and the findings credited to all. Which entries select a GPU index depends only on
    which entries' filters admit the model, so selections are shared between such groups."""
    if not filtered_paths:
        return ctx.unfiltered_groups(len(entries))
    by_selection: dict[tuple[str, tuple[int, ...]], list[GpuModel]] = {}
    for gpu in models:
        selecting = tuple(i for i, e in enumerate(entries) if e.primaries is None or gpu.device_id in e.primaries)
        table = gpu.table.id if gpu.table is not None else gpu.device_id
        by_selection.setdefault((table, selecting), []).append(gpu)
    return list(by_selection.items())


def _deferred(
    entries: Sequence[_Entry], groups: list[_Group], size: int, filtered_paths: tuple[str, ...], ctx: _Context
) -> list[bool]:
    """Per group, whether it is judged only if no model fits: a group where only unfiltered entries apply
    and one of them names a profile the GPU lacks cannot fit, and its findings matter only then. (For a
    config whose every entry is filtered, nothing is deferred: the caller does not ask.)"""
    reaching = [e.raw.mig_enabled and (e.indices is None or any(i < size for i in e.indices)) for e in entries]
    if filtered_paths:
        return [
            all(entries[i].primaries is None for i in selecting)
            and any(reaching[i] and not entries[i].resolves_on(members[0]) for i in selecting)
            for (_, selecting), members in groups
        ]
    # Unfiltered: the groups are the context's table groups, and a bit per group says whether a profile
    # key that reaches the node is missing from its table (one OR per key instead of a look-up per table).
    unresolved = 0
    for e, reaches in zip(entries, reaching):
        if reaches:
            for key in e.gi_keys:
                unresolved |= ctx.missing(key)
    return [bool(unresolved >> position & 1) for position in range(len(groups))]


def _error_bound(selection: _Selection, table: ProfileTable, size: int) -> int:
    """The fewest errors a group can have: its overlaps, and each profile name its table lacks."""
    total = 0
    for index in range(size):
        chosen = selection.chosen[index]
        if chosen:
            total += selection.overlap_errors[index]
            if chosen[-1].raw.mig_enabled:
                total += chosen[-1].unresolved_on(table)
    return total


def _error_bounds(
    deferred: list[tuple[int, _Group]],
    select: Callable[[tuple[int, ...], list[GpuModel]], _Selection],
    size: int,
    filtered_paths: tuple[str, ...],
    ctx: _Context,
) -> list[int]:
    """_error_bound of each deferred group (position in the groups, group)."""
    if filtered_paths:
        return [
            _error_bound(select(selecting, members), _table(members[0]), size)
            for _, ((_, selecting), members) in deferred
        ]
    # One selection for every group; a key's bit per group counts it (`missing_lanes`).
    (_, ((_, selecting), members)) = deferred[0]
    selection, base, lanes = select(selecting, members), 0, 0
    for index in range(size):
        chosen = selection.chosen[index]
        if chosen:
            base += selection.overlap_errors[index]
            if chosen[-1].raw.mig_enabled:
                for key in chosen[-1].gi_keys:
                    lanes += ctx.missing_lanes(key)
    return [base + (lanes >> (_LANE * position) & _LANE_MASK) for position, _ in deferred]


def _judge_deferred(
    deferred: list[tuple[int, _Group]],
    bounds: list[int],
    loose: list[_Loose],
    evaluate: Callable[[tuple[int, ...], list[GpuModel]], _Loose | None],
) -> list[_Loose]:
    """The deferred groups worth showing, judged, in their own order. Only the groups with the fewest
    errors are shown. Each unknown profile is an error, so a group whose unknown profiles alone
    outnumber the fewest errors seen cannot be shown: it is skipped. Groups are judged from the smallest
    such bound up."""
    fewest = min((errors for _, _, errors in loose), default=None)
    judged: dict[int, _Loose | None] = {}
    for position in sorted(range(len(deferred)), key=bounds.__getitem__):
        if fewest is not None and bounds[position] > fewest:
            break
        (_, ((_, selecting), members)) = deferred[position]
        found = judged[position] = evaluate(selecting, members)
        if found:
            fewest = found[2] if fewest is None else min(fewest, found[2])
    return [found for _, found in sorted(judged.items()) if found]


def _catalogue_verdict(
    config_path: str, fits: list[GpuModel], loose: list[_Loose], filtered: bool, ctx: _Context
) -> list[_Batch]:
    """Beyond the findings pinned to filtered entries: the warnings on the models a config fits (name
    drift, ...: still worth showing); where an unfiltered config fits none, the findings of the closest
    groups and a finding saying it fits none."""
    if fits:
        return [([f for f in fs if f.severity == "warning"], members) for members, fs, errors in loose if not errors]
    if filtered or not loose:
        return []
    fewest = min(errors for _, _, errors in loose)
    closest: list[_Batch] = [(fs, members) for members, fs, errors in loose if errors == fewest]
    if ctx.only is None:
        why = _Finding(
            config_path,
            "fits-no-gpu",
            "the config fits no known GPU model (see the problems above for the closest ones)",
        )
    else:
        why = _Finding(
            config_path, "does-not-fit-model", f"the config does not fit {ctx.only.name} (see the problems above)"
        )
    return [*closest, ([why], None)]


def _against_catalogue(
    config_path: str, entries: Sequence[_Entry], findings: list[_Finding], ctx: _Context
) -> tuple[list[_Batch], tuple[GpuModel, ...]]:
    """The config's findings on the models it targets (after the entry-level `findings`), and the
    models it fits. Findings seen on one model of a group are credited to every model of the group."""
    # Entry-level errors (a malformed filter, a duplicate index) hold on every model: it fits none.
    entry_errors = any(f.severity == "error" for f in findings)
    filtered = all(e.raw.device_filter for e in entries)
    models = _catalogue_models(entries, filtered, ctx)
    size, listed = _node_size(config_path, entries, findings)
    batches: list[_Batch] = [(listed, None)]
    fits: list[GpuModel] = []
    filtered_paths = tuple(e.path for e in entries if e.raw.device_filter)

    def is_pinned(f: _Finding) -> bool:
        """A finding of a filtered entry on a model its filter names: always a real problem. When every
        entry is filtered, every model evaluated is one a filter names, so node-level findings
        (strategy-mismatch at the config's path) are real too."""
        return filtered or any(
            f.path == p or f.path.startswith(p + ".") or f.path.startswith(p + "[") for p in filtered_paths
        )

    selections: dict[tuple[int, ...], _Selection] = {}

    def select(selecting: tuple[int, ...], members: list[GpuModel]) -> _Selection:
        selection = selections.get(selecting)
        if selection is None:
            selection = selections[selecting] = _select(entries, [members[0]] * size)
        return selection

    def evaluate(selecting: tuple[int, ...], members: list[GpuModel]) -> _Loose | None:
        """Judge the group; record fits and pinned findings; return its (members, findings, errors)."""
        ((node_findings, _),), _, errors = _evaluate_node(
            config_path, entries, select(selecting, members), [members[0]] * size, ctx.strategy, False, ctx
        )
        if not errors:
            fits.extend(members)
        if not node_findings:
            return None
        if filtered_paths:
            batches.append(([f for f in node_findings if is_pinned(f)], members))
            return members, [f for f in node_findings if not is_pinned(f)], errors
        return members, node_findings, errors

    groups = _model_groups(entries, models, filtered_paths, ctx)
    defer = [False] * len(groups) if filtered else _deferred(entries, groups, size, filtered_paths, ctx)
    loose: list[_Loose] = []
    for position, ((_, selecting), members) in enumerate(groups):
        if not defer[position] and (found := evaluate(selecting, members)):
            loose.append(found)
    if not fits and any(defer):
        deferred = [(position, group) for position, group in enumerate(groups) if defer[position]]
        loose += _judge_deferred(deferred, _error_bounds(deferred, select, size, filtered_paths, ctx), loose, evaluate)
    batches += _catalogue_verdict(config_path, fits, loose, filtered, ctx)
    if entry_errors:
        fits.clear()
    if len(fits) > 1:
        order = ctx.order if models is ctx.everything else {id(gpu): i for i, gpu in enumerate(models)}
        fits.sort(key=lambda gpu: order[id(gpu)])
    return batches, tuple(fits)


# --------------------------------------------------------------------------------------------------
# One validate() call: configs with the same entries share one evaluation.

# The most problems listed for one config. NVIDIA's files have a handful at most; a generated file can
# have hundreds of thousands (a key no model has, on each of eight models of a node), whose messages
# would cost more time and memory than the verdict. The rest are counted in one `problems-truncated`
# problem, an error when any of them is, so a config's validity never depends on the limit.
MAX_PROBLEMS = 100


def _truncated(config_path: str, hidden: _Hidden) -> Problem:
    rules: Counter[str] = Counter()
    for (rule, _), n in hidden:
        rules[rule] += n
    errors = sum(n for (_, severity), n in hidden if severity == "error")
    total = sum(rules.values())
    shown = listed((f"{rule} x {n}" for rule, n in rules.most_common()), 5, more="more rules")
    return Problem(
        config_path,
        "problems-truncated",
        f"{total} more problems of this config are not listed ({errors} errors, "
        f"{total - errors} warnings: {shown}); migops lists at most {MAX_PROBLEMS} per config",
        "error" if errors else "warning",
    )


@dataclass(frozen=True)
class _Verdict:
    """A config's verdict with paths relative to the config (shared by configs with equal entries)."""

    problems: tuple[_Merged, ...]  # the first MAX_PROBLEMS
    hidden: _Hidden  # the rest, counted
    gpus: tuple[_GpuOutcome, ...]
    fits: tuple[GpuModel, ...]
    fits_no_gpu: bool = False  # catalogue mode: among the problems is `fits-no-gpu` (ConfigReport's)


# (devices, device-filter, mig-enabled, mig-devices as (key, count) pairs)
_EntryKey = tuple[str | tuple[int, ...], tuple[str, ...], bool, tuple[tuple[str, int], ...]]


def _relative_paths(entries: int) -> tuple[str, ...]:
    """The paths of a config's entries relative to the config's own: "[0]", "[1]", ..."""
    return _FEW_PATHS[entries] if entries < len(_FEW_PATHS) else tuple(index_path("", i) for i in range(entries))


_FEW_PATHS = tuple(
    tuple(index_path("", i) for i in range(n)) for n in range(17)
)  # most configs: one entry per GPU at most


def _entry_key(entry: MigConfigEntry) -> _EntryKey:
    """What an entry's verdict depends on (a profile is a function of its key)."""
    return (
        entry.devices if isinstance(entry.devices, str) else tuple(entry.devices),
        tuple(entry.device_filter),
        entry.mig_enabled,
        tuple((item.key, item.count) for item in entry.mig_devices),
    )


# Lanes of `_Context.missing_lanes`: a count per lane up to 2^32-1 (a file has at most 100,000 nodes,
# so no count of keys comes near it).
_LANE = 32
_LANE_MASK = (1 << _LANE) - 1


class _Context:
    """The question (node or catalogue, strategy) and the work shared by every config of one call:
    verdicts per distinct list of entries, geometries per (entry, profile table), did-you-mean hints."""

    def __init__(
        self,
        cat: Catalogue,
        node: Sequence[GpuModel] | None,
        strategy: Strategy | None,
        only: GpuModel | None = None,
        share: _Context | None = None,
    ) -> None:
        self.cat = cat
        self.node = tuple(node) if node else None
        self.strategy = strategy
        self.only = only  # catalogue mode on this one (MIG-capable) model
        # (root, entry paths or their number, entry keys) -> verdict: see `report`
        self._verdicts: dict[tuple[str, tuple[str, ...] | int, tuple[_EntryKey, ...]], _Verdict] = {}
        # What does not depend on the question (an entry's geometry on a profile table, a key resolved on
        # a table, a hint) is shared with `share`, another question on the same file (`Validation`).
        # (entry path, entry items) -> table id -> geometry: the entries of equal path and items share one
        # table (an entry's geometry depends on nothing else), so it is looked up by their key once per entry
        self.geometries: dict[tuple[str, tuple[tuple[str, int], ...]], dict[str, _Geometry]] = (
            {} if share is None else share.geometries
        )
        # (key, the table's profile names)
        self.hints: dict[tuple[str, tuple[str, ...]], _Lazy] = {} if share is None else share.hints
        # (mig-devices path, table id) -> key -> item
        self.items: dict[tuple[str, str], dict[str, _Item]] = {} if share is None else share.items
        # device-filter string -> what it is (`_filter_item`)
        self.filters: dict[str, _FilterItem] = {} if share is None else share.filters
        # (entry path, id of the entry) -> (the entry, it prepared, its entry-level findings): both
        # questions of a Validation prepare each entry once (the entry is kept to tell a reused id)
        self.prepared: dict[tuple[str, int], tuple[MigConfigEntry, _Entry, tuple[_Finding, ...]]] = (
            {} if share is None else share.prepared
        )
        # Catalogue models grouped by profile table, in catalogue order (what an unfiltered config sees).
        tables: dict[str, list[GpuModel]] = {}
        for gpu in cat.gpus:
            tables.setdefault(_table(gpu).id, []).append(gpu)
        self.table_groups = list(tables.items()) if only is None else [(_table(only).id, [only])]
        self._missing: dict[_GiKey, int] = {}  # profile key -> `missing`: bits of this context's groups
        self._missing_lanes: dict[_GiKey, int] = {}
        self._group_of = {table_id: position for position, (table_id, _) in enumerate(self.table_groups)}
        self._unfiltered: dict[int, list[tuple[tuple[str, tuple[int, ...]], list[GpuModel]]]] = {}
        self.everything = list(cat.gpus)  # what an unfiltered config is judged on, in catalogue order
        self.order = {id(gpu): i for i, gpu in enumerate(self.everything)}
        self._not_covered: dict[tuple[tuple[str, tuple[int, ...]], ...], str] = {}
        self._texts: _Texts = {}  # see `_render`
        self.labels: dict[int, str] = {}  # id(model) -> label, for `gpu-not-covered`: models of self.node only
        # Per index of the node, what a GPU no entry selects becomes: it names no path, so every report
        # shares it (a third of the GPUs of a large file's configs on a node of eight models).
        self._uncovered = tuple(GpuResult(i, gpu, None, None) for i, gpu in enumerate(self.node or ()))

    def unfiltered_groups(self, entries: int) -> list[tuple[tuple[str, tuple[int, ...]], list[GpuModel]]]:
        """The groups of `_against_catalogue` for a config of that many entries, none filtered: every
        table group, each selected by every entry."""
        found = self._unfiltered.get(entries)
        if found is None:
            everything = tuple(range(entries))
            found = self._unfiltered[entries] = [
                ((table_id, everything), members) for table_id, members in self.table_groups
            ]
        return found

    def missing_lanes(self, key: _GiKey) -> int:
        """`missing` with a _LANE-bit lane per group instead of a bit: summed over keys, each lane
        counts the keys its group's table lacks."""
        found = self._missing_lanes.get(key)
        if found is None:
            bits = self.missing(key)
            found = self._missing_lanes[key] = sum(
                1 << (_LANE * group) for group in range(len(self.table_groups)) if bits >> group & 1
            )
        return found

    def missing(self, key: _GiKey) -> int:
        """A bit per table group (`table_groups`, in order) whose table lacks the profile key."""
        found = self._missing.get(key)
        if found is None:
            if self.only is None:  # the catalogue's groups: the tables of the models that have the key are known
                present = 0
                for gpu in self.cat.gpus_with_key(key):
                    present |= 1 << self._group_of[_table(gpu).id]
                found = self._missing[key] = ((1 << len(self.table_groups)) - 1) & ~present
            else:
                found = self._missing[key] = 0 if key in _table(self.only).index else 1
        return found

    def not_covered(self, uncovered: dict[str, list[int]]) -> str:
        """The message of `gpu-not-covered` for these GPUs (label -> indices), made once per call."""
        key = tuple((label, tuple(indices)) for label, indices in uncovered.items())
        found = self._not_covered.get(key)
        if found is None:
            which = " or ".join(f"{_gpus(indices)} ({label})" for label, indices in uncovered.items())
            found = self._not_covered[key] = (
                f"no entry selects {which}; mig-parted's assert requires every GPU to "
                "match, so this config never reports as applied"
            )
        return found

    def filter_item(self, text: str) -> _FilterItem:
        found = self.filters.get(text)
        if found is None:
            found = self.filters[text] = _filter_item(text, self.cat)
        return found

    def prepare(self, entry: MigConfigEntry, path: str, key: _EntryKey, out: list[_Finding]) -> _Entry:
        """The entry prepared (`_prepare_entry`), once per Validation; its findings go to `out`. `key`
        is its `_entry_key`."""
        at = (path, id(entry))
        found = self.prepared.get(at)
        if found is None or found[0] is not entry:
            mine: list[_Finding] = []
            found = self.prepared[at] = (entry, _prepare_entry(entry, path, key[3], self, mine), tuple(mine))
        out.extend(found[2])
        return found[1]

    def geometry_table(self, path: str, items: tuple[tuple[str, int], ...]) -> dict[str, _Geometry]:
        """The geometries (table id -> geometry) of every entry with this path and these items."""
        key = (path, items)
        found = self.geometries.get(key)
        if found is None:
            found = self.geometries[key] = {}
        return found

    def geometry(self, entry: _Entry, gpu: GpuModel) -> _Geometry:
        table_id = _table(gpu).id
        found = entry.geometries.get(table_id)
        if found is None:
            found = entry.geometries[table_id] = _geometry(entry, gpu, self)
        return found

    def resolved_items(self, devices_path: str, gpu: GpuModel) -> dict[str, _Item]:
        """The keys of one mig-devices map resolved on one GPU model's table so far (key -> item): the
        caller adds what it resolves (`_resolve_item`), so each key is resolved once per call."""
        key = (devices_path, _table(gpu).id)
        found = self.items.get(key)
        if found is None:
            found = self.items[key] = {}
        return found

    def did_you_mean(self, item: ProfileCount, gpu: GpuModel) -> _Lazy:
        # Keyed by what the text depends on, so equal hints are one object (see `_merge`).
        key = (item.key, _table(gpu).names)
        found = self.hints.get(key)
        if found is None:
            cat = self.cat  # not `self`: the hint must not refer back to the context (no reference cycle)
            profile = item.profile
            found = self.hints[key] = _Lazy(lambda: _did_you_mean(profile, gpu, cat))
        return found

    def report(self, name: str, entries: Sequence[MigConfigEntry]) -> ConfigReport:
        config_path = key_path("mig-configs", name)
        relative = _relative_paths(len(entries))
        if all(e.path == config_path + p for e, p in zip(entries, relative)):
            prefix, root, paths = config_path, "", relative
        else:  # entry paths of another form: evaluate with absolute paths (nothing shared)
            prefix, root, paths = "", config_path, tuple(e.path for e in entries)
        keys = tuple(map(_entry_key, entries))
        key = (root, paths if root else len(paths), keys)
        verdict = self._verdicts.get(key)
        if verdict is None:
            verdict = self._verdicts[key] = self._evaluate(root, entries, paths, keys)
        uncovered = self._uncovered
        gpus = tuple(
            uncovered[index]
            if entry is None
            else GpuResult(index, gpu, prefix + entry, enabled, layout, devices, instances)
            for index, gpu, entry, enabled, layout, devices, instances in verdict.gpus
        )
        problems = _config_findings(name) + _render(verdict.problems, prefix, self._texts)
        if verdict.hidden:
            problems.append(_truncated(config_path, verdict.hidden))
        return ConfigReport(name, tuple(problems), gpus=gpus, fits=verdict.fits, fits_no_gpu=verdict.fits_no_gpu)

    def _evaluate(
        self, root: str, raw: Sequence[MigConfigEntry], paths: Sequence[str], keys: Sequence[_EntryKey]
    ) -> _Verdict:
        findings: list[_Finding] = []
        entries = [self.prepare(e, p, k, findings) for e, p, k in zip(raw, paths, keys)]
        if self.node is not None:
            selection = _select(entries, self.node)
            node_batches, results, _ = _evaluate_node(root, entries, selection, self.node, self.strategy, True, self)
            return _Verdict(*_merge([(findings, None), *node_batches]), results, ())
        batches, fits = _against_catalogue(root, entries, findings, self)
        shown, hidden = _merge(batches)
        no_gpu = any(m[1] == "fits-no-gpu" for m in shown) or any(rule == "fits-no-gpu" for (rule, _), _ in hidden)
        return _Verdict(shown, hidden, (), fits, no_gpu)


def validate_on_node(
    config: MigPartedConfig,
    name: str,
    node: Sequence[GpuModel],
    strategy: Strategy | None = None,
    cat: Catalogue | None = None,
) -> ConfigReport:
    """Is config `name` valid when applied to a node with these GPUs (index order)?"""
    with paused_gc():
        return _Context(cat or catalogue(), node, strategy).report(name, config.entries(name))


def validate_against_catalogue(
    config: MigPartedConfig, name: str, strategy: Strategy | None = None, cat: Catalogue | None = None
) -> ConfigReport:
    """Is config `name` valid on the GPU models it targets (or, unfiltered, on at least one model)?"""
    with paused_gc():
        return _Context(cat or catalogue(), None, strategy).report(name, config.entries(name))


def validate_on_model(
    config: MigPartedConfig, name: str, model: GpuModel, strategy: Strategy | None = None, cat: Catalogue | None = None
) -> ConfigReport:
    """Is config `name` valid on a node of this MIG-capable model whose GPU count is unknown (GFD under
    the single strategy)? Catalogue mode restricted to the model: `fits` is (model,) or (), and when
    it does not fit, the problems say why on that model (`does-not-fit-model` for an unfiltered config)."""
    if model.table is None:
        raise ValueError(f"{model.name} cannot do MIG: ask validate_on_node")
    with paused_gc():
        return _Context(cat or catalogue(), None, strategy, model).report(name, config.entries(name))


class Validation:
    """One file's configs judged on a node and against the catalogue, the work shared: each entry's
    geometry on a profile table, each key resolved on a table and each hint is computed once for both
    questions and every config (`migops.mig.fit.fit_all` asks both of each config). Configs with the
    same entries share one verdict per question.

    Call it with the cyclic collector paused (`paused_gc`) and drop it before the collector resumes, as
    `validate` does: the shared work is many small objects, which the collector would walk for nothing."""

    def __init__(
        self,
        config: MigPartedConfig,
        node: Sequence[GpuModel] | None = None,
        strategy: Strategy | None = None,
        cat: Catalogue | None = None,
    ) -> None:
        cat = cat or catalogue()
        self._by_name = config.by_name
        self._catalogue = _Context(cat, None, strategy)
        self._node = _Context(cat, node, strategy, share=self._catalogue) if node else None

    def entries(self, name: str) -> tuple[MigConfigEntry, ...]:
        """The entries of config `name` (KeyError if the file has none of that name)."""
        return self._by_name[name]

    def on_node(self, names: Sequence[str]) -> tuple[ConfigReport, ...]:
        """The named configs on the node (`validate_on_node` of each)."""
        if self._node is None:
            raise ValueError("no node to judge the configs on")
        return self._reports(self._node, names)

    def against_catalogue(self, names: Sequence[str]) -> tuple[ConfigReport, ...]:
        """The named configs against the catalogue (`validate_against_catalogue` of each)."""
        return self._reports(self._catalogue, names)

    def _reports(self, ctx: _Context, names: Sequence[str]) -> tuple[ConfigReport, ...]:
        for n in names:
            if n not in self._by_name:
                raise KeyError(n)
        return tuple(ctx.report(n, self._by_name[n]) for n in names)


def validate(
    config: MigPartedConfig,
    names: Sequence[str] | None = None,
    node: Sequence[GpuModel] | None = None,
    strategy: Strategy | None = None,
    cat: Catalogue | None = None,
) -> tuple[ConfigReport, ...]:
    """Validate the named configs (all of them by default), on a node when one is given."""
    chosen = list(names) if names is not None else [n for n, _ in config.configs]
    with paused_gc():
        validation = Validation(config, node or None, strategy, cat)
        reports = validation.on_node(chosen) if node else validation.against_catalogue(chosen)
        del validation  # free the shared work before the collector resumes, or its first pass would walk it all
    return reports

"""The GPU catalogue, loaded once from mig/data/gpus.yaml: MIG-capable models keyed by PCI device ID,
and the only place that knows which IDs can do MIG. Any other well-formed ID is a GPU that cannot."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cache, lru_cache
from pathlib import Path
from typing import Literal, NotRequired, TypedDict, cast

from migops.mig.devices import DeviceId, DeviceIdSyntaxError, parse_device_id
from migops.mig.profile import MigProfile, parse_profile
from migops.mig.text import did_you_mean
from migops.mig.yamlsafe import load_yaml


class UnknownGpuError(LookupError):
    """A GPU named on the command line or in a label that the catalogue does not know."""


ENGINE_KINDS = ("copy", "decoder", "encoder", "jpeg", "ofa")
ENGINE_NAMES = {"copy": "copy engine", "decoder": "decoder", "encoder": "encoder", "jpeg": "JPEG decoder", "ofa": "OFA"}


# The data file's shape, as mig/data/gpus.schema.json describes it (tests/mig/test_catalogue.py checks
# the packaged file against that schema; nothing else is ever loaded here).
class RawEngines(TypedDict):
    copy: int
    decoder: int
    encoder: int
    jpeg: int
    ofa: int


class RawProfile(TypedDict):
    name: str
    c: int
    m: int
    max: int
    starts: list[int]
    sms: int | None
    memory_mib: int | None
    engines: RawEngines | None
    nvml: int | None
    smi: int | None
    aliases: NotRequired[list[str]]
    inferred: NotRequired[list[str]]


class RawTable(TypedDict):
    compute_slices: int
    memory_slices: int
    naming_memory_gib: int
    engines: RawEngines | None
    inferred: list[str]
    profiles: list[RawProfile]


class RawGpu(TypedDict):
    device_id: str
    name: str
    product: str
    table: str  # a key of RawCatalogue.profile_tables
    architecture: str
    compute_capability: str
    memory_mib: int
    inferred: NotRequired[list[str]]
    in_default_config: NotRequired[bool]


class RawNonMigGpu(TypedDict):
    device_id: str
    name: str
    product: str
    architecture: str
    compute_capability: str
    inferred: NotRequired[list[str]]


class RawCatalogue(TypedDict):
    schema_version: Literal[1]
    profile_tables: dict[str, RawTable]
    gpus: list[RawGpu]
    non_mig_gpus: list[RawNonMigGpu]


@dataclass(frozen=True)
class Engines:
    """Engines a GPU instance takes, or (per table) that the whole GPU has in MIG mode."""

    copy: int
    decoder: int
    encoder: int
    jpeg: int
    ofa: int

    def items(self) -> tuple[tuple[str, int], ...]:
        return tuple((kind, getattr(self, kind)) for kind in ENGINE_KINDS)


# Catalogue objects are built once and compared by identity (eq=False): they are dict keys on hot
# paths (placement requests, per-table caches), where hashing every field would dominate the cost.
@dataclass(frozen=True, eq=False)
class GiProfile:
    """One GPU-instance profile of one profile table."""

    name: str
    profile: MigProfile
    compute_slices: int
    memory_slices: int
    max_count: int
    starts: tuple[int, ...]
    sms: int | None
    memory_mib: int | None
    engines: Engines | None
    nvml_profile: int | None  # NVML GPU_INSTANCE_PROFILE_* enum index (what CreateGpuInstance takes)
    smi_id: int | None  # the ID nvidia-smi prints: a different number space from nvml_profile
    aliases: tuple[str, ...] = ()
    inferred: tuple[str, ...] = ()  # fields of this profile no source confirms (besides the table's)

    @property
    def has_media_extensions(self) -> bool:
        return self.profile.has_media_extensions


@dataclass(frozen=True, eq=False)
class ProfileTable:
    """A MIG geometry shared by several GPUs: slice counts and the profiles with their valid starts."""

    id: str
    compute_slices: int
    memory_slices: int
    naming_memory_gib: int
    profiles: tuple[GiProfile, ...]
    inferred: tuple[str, ...]
    engines: Engines | None = None  # the whole GPU's, shared by its instances; None: unknown
    # (G, GB, attributes, negative) -> (profile, matched by alias): mig-parted's Matches() as a lookup.
    index: dict[GiKey, tuple[GiProfile, bool]] = field(default_factory=dict, repr=False)

    names: tuple[str, ...] = field(init=False, repr=False)  # the profile names, in table order

    def __post_init__(self) -> None:
        object.__setattr__(self, "names", tuple(gi.name for gi in self.profiles))
        for gi in self.profiles:
            for alias in gi.aliases:
                self.index.setdefault(gi_key(parse_profile(alias)), (gi, True))
            self.index[gi_key(gi.profile)] = (gi, False)


@dataclass(frozen=True, eq=False)
class GpuModel:
    """One PCI device ID with its MIG profile table and the values GFD publishes for it.

    A GPU that cannot do MIG has no table (`mig_capable` is False); one the catalogue does not list at
    all (`known` False) has no architecture, compute capability or memory either."""

    device_id: str  # "0x233010DE"
    name: str
    product: str  # nvidia.com/gpu.product value
    architecture: str | None
    compute_capability: str | None
    memory_mib: int | None
    table: ProfileTable | None
    inferred: tuple[str, ...] = ()
    in_default_config: bool = False
    known: bool = True
    pci: DeviceId = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "pci", parse_device_id(self.device_id))

    # A model is its device ID (the catalogue's key): two readings of the same GPU are one model wherever
    # they were built (another process's answer, a catalogue loaded again), and hashing never walks the table.
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, GpuModel):
            return NotImplemented
        return self.device_id == other.device_id and self.known == other.known

    def __hash__(self) -> int:
        return hash(self.device_id)

    @property
    def mig_capable(self) -> bool:
        return self.table is not None

    @property
    def profiles(self) -> tuple[GiProfile, ...]:
        return self.table.profiles if self.table is not None else ()

    def find_profile(self, profile: MigProfile) -> tuple[GiProfile, bool] | None:
        """The GI profile a profile string names on this GPU, and whether it matched only by alias.

        Matching is mig-parted's: G, GB and the attribute set; the C part only picks a compute instance.
        """
        return self.table.index.get(gi_key(profile)) if self.table is not None else None

    def label(self) -> str:
        if not self.known:
            return f"unknown GPU {self.device_id}, taken as not MIG-capable"
        return f"{self.name} ({self.device_id}{'' if self.mig_capable else ', not MIG-capable'})"


GiKey = tuple[int, int, tuple[str, ...], bool]  # what mig-parted matches a profile string on (gi_key)


def gi_key(profile: MigProfile) -> GiKey:
    return (profile.gpu, profile.memory_gb, profile.attributes, profile.negative)


@dataclass(frozen=True, eq=False)
class Catalogue:
    gpus: tuple[GpuModel, ...]  # the MIG-capable models
    tables: tuple[ProfileTable, ...]
    non_mig: tuple[GpuModel, ...] = ()  # NVIDIA datacenter GPUs known to have no MIG

    def gpus_with_profile(self, profile: MigProfile) -> tuple[GpuModel, ...]:
        """Every GPU on which a profile string resolves (used for "exists on ..." hints)."""
        return self.gpus_with_key(gi_key(profile))

    def gpus_with_key(self, key: GiKey) -> tuple[GpuModel, ...]:
        """Every GPU whose profile table has this key (`gi_key`), in catalogue order."""
        return _profile_owners(self).get(key, ())

    def by_device_id(self, device: DeviceId | str) -> GpuModel | None:
        """The MIG-capable model with this PCI device ID, or None."""
        key = device.primary if isinstance(device, DeviceId) else device.upper().replace("0X", "0x", 1)
        return _device_index(self).get(key)

    def known_non_mig(self, device: DeviceId | str) -> GpuModel | None:
        """The listed GPU without MIG that has this PCI device ID, or None."""
        key = device.primary if isinstance(device, DeviceId) else device.upper().replace("0X", "0x", 1)
        return _non_mig_index(self).get(key)

    def model(self, device: DeviceId) -> GpuModel:
        """The GPU a well-formed PCI device ID names: a MIG-capable model, a GPU listed as having no MIG,
        or (any other ID) a GPU that cannot do MIG and that migops does not know (`known` False)."""
        return self.by_device_id(device) or self.known_non_mig(device) or _unknown_gpu(device.primary)

    def resolve(self, text: str) -> GpuModel:
        """A GPU given by a person: PCI device ID (`0x233010DE`, `0x2330`, with an optional subsystem
        part) or a GFD product label value (`NVIDIA-H100-80GB-HBM3`), case-insensitive."""
        candidate = text.strip()
        try:
            pci = parse_device_id(candidate.split(":")[0])
            if pci.vendor != 0x10DE and pci.device == 0 and pci.vendor <= 0xFFFF:
                pci = DeviceId(pci.vendor, 0x10DE)  # short form 0x2330 means device 0x2330 of NVIDIA
            if pci.vendor != 0x10DE:  # NVML lists NVIDIA GPUs only: another vendor is a typo, not a GPU
                raise UnknownGpuError(
                    f"unknown GPU {text!r}: vendor 0x{pci.vendor:04X} is not NVIDIA's (0x10DE); "
                    "give a PCI device ID such as 0x233010DE (device, then vendor)"
                )
            return self.model(pci)  # an ID the catalogue does not list is a GPU that cannot do MIG
        except DeviceIdSyntaxError:
            pass
        found = _product_index(self).get(candidate.lower())
        if found:
            return found
        near = [
            g for g in self.gpus + self.non_mig if candidate and candidate.lower() in (g.product + " " + g.name).lower()
        ]
        if near:
            hint = "; matching models: " + ", ".join(f"{g.product} ({g.device_id})" for g in near[:6])
        else:
            hint = did_you_mean(candidate, [g.product for g in self.gpus + self.non_mig])
        raise UnknownGpuError(
            f"unknown GPU {text!r}: give a PCI device ID such as 0x233010DE or a GFD product such as "
            f"NVIDIA-H100-80GB-HBM3 (see `migops gpus`){hint}"
        )


@cache
def _profile_owners(cat: Catalogue) -> dict[GiKey, tuple[GpuModel, ...]]:
    owners: dict[GiKey, list[GpuModel]] = {}
    for gpu in cat.gpus:
        table = cast(ProfileTable, gpu.table)  # Catalogue.gpus are the MIG-capable models: each has one
        for key in table.index:
            owners.setdefault(key, []).append(gpu)
    return {key: tuple(gpus) for key, gpus in owners.items()}


@cache
def _device_index(cat: Catalogue) -> dict[str, GpuModel]:
    return {gpu.device_id: gpu for gpu in cat.gpus}


@cache
def _non_mig_index(cat: Catalogue) -> dict[str, GpuModel]:
    return {gpu.device_id: gpu for gpu in cat.non_mig}


@lru_cache(maxsize=1024)  # bounded: IDs come from untrusted input
def _unknown_gpu(device_id: str) -> GpuModel:
    return GpuModel(
        device_id=device_id,
        name=device_id,
        product=f"unknown-{device_id}",
        architecture=None,
        compute_capability=None,
        memory_mib=None,
        table=None,
        known=False,
    )


@cache
def _product_index(cat: Catalogue) -> dict[str, GpuModel]:
    index: dict[str, GpuModel] = {}
    for gpu in cat.gpus + cat.non_mig:
        index.setdefault(gpu.product.lower(), gpu)
        index.setdefault(gpu.name.lower(), gpu)
    return index


# The packaged data beside this module (installed with it: pyproject.toml's package data). Read by path, not
# through importlib.resources, whose imports (zipfile, tempfile) weigh on `migops validate`'s start-up
# (bench/cli_startup.py); migops is never run from a zip archive.
_DATA = Path(__file__).resolve().parent / "data"


def _read_data(name: str) -> str:
    return (_DATA / name).read_text(encoding="utf-8")


def raw_catalogue() -> RawCatalogue:
    """The data file as loaded (for the schema test and `migops gpus -o json`)."""
    return cast(RawCatalogue, load_yaml(_read_data("gpus.yaml")))


def catalogue_schema() -> dict[str, object]:
    schema: dict[str, object] = json.loads(_read_data("gpus.schema.json"))  # a JSON Schema: an object
    return schema


def _build_table(table_id: str, raw: RawTable) -> ProfileTable:
    profiles = tuple(
        GiProfile(
            name=p["name"],
            profile=parse_profile(p["name"]),
            compute_slices=p["c"],
            memory_slices=p["m"],
            max_count=p["max"],
            starts=tuple(p["starts"]),
            sms=p["sms"],
            memory_mib=p["memory_mib"],
            engines=Engines(**p["engines"]) if p["engines"] else None,
            nvml_profile=p["nvml"],
            smi_id=p["smi"],
            aliases=tuple(p.get("aliases", ())),
            inferred=tuple(p.get("inferred", ())),
        )
        for p in raw["profiles"]
    )
    return ProfileTable(
        table_id,
        raw["compute_slices"],
        raw["memory_slices"],
        raw["naming_memory_gib"],
        profiles,
        tuple(raw["inferred"]),
        Engines(**raw["engines"]) if raw["engines"] else None,
    )


def build_catalogue(raw: RawCatalogue) -> Catalogue:
    tables = {tid: _build_table(tid, t) for tid, t in raw["profile_tables"].items()}
    gpus = tuple(
        GpuModel(
            device_id=g["device_id"],
            name=g["name"],
            product=g["product"],
            architecture=g["architecture"],
            compute_capability=g["compute_capability"],
            memory_mib=g["memory_mib"],
            table=tables[g["table"]],
            inferred=tuple(g.get("inferred", ())),
            in_default_config=g.get("in_default_config", True),
        )
        for g in raw["gpus"]
    )
    non_mig = tuple(
        GpuModel(
            device_id=g["device_id"],
            name=g["name"],
            product=g["product"],
            architecture=g["architecture"],
            compute_capability=g["compute_capability"],
            memory_mib=None,
            table=None,
            inferred=tuple(g.get("inferred", ())),
        )
        for g in raw.get("non_mig_gpus", ())
    )
    return Catalogue(gpus, tuple(tables.values()), non_mig)


@cache
def catalogue() -> Catalogue:
    """The packaged catalogue, loaded once per process."""
    return build_catalogue(raw_catalogue())

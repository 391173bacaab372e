"""mig-parted's config format, v1 (api/spec/v1), decoded as mig-parted decodes it, with all of its rules.

The reader (mig/yamlsafe.py) turns the text into the JSON that sigs.k8s.io/yaml hands to encoding/json;
this module applies encoding/json's rules and mig-parted's UnmarshalJSON methods to it: a null is the
zero value (`mig-enabled:` is false, a `null` index is GPU 0, `devices:` is the string "" and refused), a
whole float is an int (`7.0`), an int must fit in 64 bits, keys match exactly. Where that reading is not
what the text looks like, a warning says what the node will see. mig-parted stops at the first error;
here every problem is collected, each with its path, rule and (from the text) line and column.

Input is YAML or JSON text, or a ConfigMap manifest whose `data` holds the config under `config.yaml`
(the key the GPU Operator mounts). Rule numbers in comments refer to mig-hardware.md section 1.3.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal, TypeGuard

from migops.mig.gcpause import paused_gc
from migops.mig.problems import MigError, Problem, index_path, key_part, key_path
from migops.mig.profile import MigProfile, ProfileSyntaxError, parse_profile
from migops.mig.text import did_you_mean, listed
from migops.mig.yamlsafe import (
    DEFAULT_LIMITS,
    Document,
    InputLimits,
    Location,
    LocationIndex,
    Scalar,
    json_int,
    locate,
    read_first,
    to_json_value,
)

CONFIGMAP_KEY = "config.yaml"
_TOP_FIELDS = ("version", "mig-configs")
_ENTRY_FIELDS = ("device-filter", "devices", "mig-enabled", "mig-devices")
_FIELD = {name: "." + key_part(name) for name in _ENTRY_FIELDS}  # key_path(entry, name) is entry + this


@dataclass(frozen=True)
class ProfileCount:
    key: str  # as written in the file, for paths and messages
    profile: MigProfile
    count: int


@dataclass(frozen=True)
class MigConfigEntry:
    """One item of a named config: which GPUs it selects and what they should become."""

    path: str  # e.g. mig-configs.custom[1]
    devices: Literal["all"] | tuple[int, ...]  # "all" or GPU indices
    device_filter: tuple[str, ...]  # raw strings: mig-parted never checks them, the validator does
    mig_enabled: bool
    mig_devices: tuple[ProfileCount, ...]

    def profile_counts(self) -> dict[MigProfile, int]:
        """Counts per profile; counts of 0 dropped (they create nothing)."""
        counts: dict[MigProfile, int] = {}
        for item in self.mig_devices:
            if item.count:
                counts[item.profile] = counts.get(item.profile, 0) + item.count
        return counts


@dataclass(frozen=True)
class MigPartedConfig:
    """A whole file: named configs in file order, as mig-parted names them.

    `notes` are warnings from reading (what the node will see where the text says something else);
    `locations` maps problem paths to where they are written (see `locate`). Neither takes part in
    equality: two spellings of the same configs are equal."""

    configs: tuple[tuple[str, tuple[MigConfigEntry, ...]], ...]
    notes: tuple[Problem, ...] = field(default=(), compare=False)
    locations: Mapping[str, Location] = field(default_factory=dict, compare=False, hash=False, repr=False)

    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.configs)

    @cached_property  # asked per config of a file: a search of the list each time made 1,666 configs cost 1.4M steps
    def by_name(self) -> Mapping[str, tuple[MigConfigEntry, ...]]:
        """Config name -> its entries; the first config of a name where the file repeats one (as mig-parted's
        map keeps one of them, and `entries` finds the first)."""
        out: dict[str, tuple[MigConfigEntry, ...]] = {}
        for config_name, entries in self.configs:
            out.setdefault(config_name, entries)
        return out

    def entries(self, name: str) -> tuple[MigConfigEntry, ...]:
        found = self.by_name.get(name)
        if found is None:
            raise KeyError(name)
        return found

    def digest(self, name: str) -> str:
        """A content hash of one named config, as the node sees it: the same for any spelling of the
        same entries (key order, YAML style, other configs in the file), different when what the
        GPUs become changes. The agent records it on the Node when it applies a config, so the
        reconciler can tell "success" for this content from "success" for an earlier one."""
        canonical = [
            {
                "devices": entry.devices if entry.devices == "all" else sorted(set(entry.devices)),
                "device-filter": sorted(entry.device_filter),
                "mig-enabled": entry.mig_enabled,
                "mig-devices": sorted((str(item.profile), item.count) for item in entry.mig_devices if item.count),
            }
            for entry in self.entries(name)
        ]
        text = json.dumps(canonical, sort_keys=True, separators=(",", ":"))
        return "sha256:" + hashlib.sha256(text.encode()).hexdigest()

    def select(self, name: str | None) -> tuple[str, tuple[MigConfigEntry, ...]]:
        """mig-parted's GetSelectedMigConfig: `-c` is required unless the file holds exactly one config."""
        if name is None:
            if len(self.configs) == 1:
                return self.configs[0]
            raise MigError(
                self.place(
                    [
                        Problem(
                            "mig-configs",
                            "config-not-selected",
                            f"the file holds {len(self.configs)} configs; select one with "
                            f"-c ({', '.join(self.names())})",
                        )
                    ]
                )
            )
        try:
            return name, self.entries(name)
        except KeyError:
            raise MigError(
                self.place(
                    [
                        Problem(
                            key_path("mig-configs", name),
                            "config-not-found",
                            f"selected mig-config not present: {name!r} (have: {listed(self.names(), 8)})"
                            + did_you_mean(name, self.names()),
                        )
                    ]
                )
            ) from None

    def locate(self, path: str) -> Location | None:
        """Where `path`, or its nearest ancestor that is written in the file, is."""
        return locate(self.locations, path)

    def place(self, problems: list[Problem] | tuple[Problem, ...]) -> tuple[Problem, ...]:
        """The problems with line and column from this file (problems from the validator carry none)."""
        if not self.locations:
            return tuple(problems)
        locations = self.locations
        out = []
        for p in problems:
            loc = locate(locations, p.path)
            out.append(p.at(loc.line, loc.column) if loc else p)
        return tuple(out)


def no_config_problems(config: MigPartedConfig) -> tuple[Problem, ...]:
    """mig-parted accepts a file with no config at all (empty, only comments, `{version: v1}`), but then
    no node label can select anything and mig-manager fails: an error for every caller that checks a
    file meant for nodes."""
    if config.configs:
        return ()
    return config.place(
        [
            Problem(
                "mig-configs",
                "no-configs",
                "the file holds no config: mig-parted reads it, but no node can select "
                "a config from it (selected mig-config not present)",
            )
        ]
    )


# ---------------------------------------------------------------------------------------------------
# encoding/json into api/spec/v1, one field at a time


class _DocumentFindings:
    """Problems and warnings of one document, and how its scalars were written."""

    def __init__(self, surprises: Mapping[str, Scalar]) -> None:
        self.problems: list[Problem] = []
        self.notes: list[Problem] = []
        self.surprises = surprises
        self.plain = not surprises  # nothing is written in a way that reads otherwise: no note to look for
        # (profile key, count) -> its ProfileCount: files repeat a few of them thousands of times
        self.counts: dict[tuple[str, int], ProfileCount] = {}

    def error(self, path: str, rule: str, message: str) -> None:
        self.problems.append(Problem(path, rule, message))

    def note(self, path: str, message: str, rule: str = "yaml-reading") -> None:
        self.notes.append(Problem(path, rule, message, "warning"))

    def written(self, path: str) -> Scalar | None:
        return self.surprises.get(path)


def _shown(value: object) -> str:
    """A value as a person wrote it in JSON terms, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return "a mapping" if isinstance(value, dict) else "a list"
    return json.dumps(value) if isinstance(value, str) else repr(value)


def _json_type(value: object) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    return {str: "string", list: "array", dict: "object", type(None): "null"}.get(type(value), "value")


def _read_as(ctx: _DocumentFindings, path: str, value: object, what: str) -> None:
    """Warn when a scalar that decoded fine was written in a way that reads differently."""
    src = ctx.written(path)
    if src is None:
        return
    text = src.text if src.text else "(empty)"
    if src.kind == "bool":
        ctx.note(path, f"{text} is YAML 1.1 for {_shown(value)}: mig-parted reads {what} {_shown(value)}")
    elif src.kind == "null":
        ctx.note(path, f"{text} is null: mig-parted reads {what} as {_shown(value)}")
    elif src.kind == "int":
        ctx.note(
            path,
            f"{src.text} is the integer {value} in YAML 1.1 (base prefix, leading zero or "
            f"underscores): mig-parted reads {what} {value}",
        )
    elif src.kind == "float":
        ctx.note(path, f"{src.text} is a float; mig-parted reads {what} as the integer {value}")
    elif src.kind == "tagged":
        ctx.note(path, f"the tag on {src.text!r} is ignored: mig-parted reads {what} {_shown(value)}")


def _int_field(ctx: _DocumentFindings, path: str, value: object, what: str) -> int | None:
    """encoding/json into a Go int: null is 0, a whole float is an int, anything else is refused."""
    if value is None:
        _read_as(ctx, path, 0, what)
        return 0
    n = json_int(value)
    if n is not None:
        _read_as(ctx, path, n, what)
    return n


def _int_refusal(value: object) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value} does not fit in mig-parted's int (64 bits): cannot unmarshal number into Go value of type int"
    if isinstance(value, float):
        return (
            f"{value!r} is not a whole number (or is 1e21 or more): cannot unmarshal number into Go value of type int"
        )
    return f"cannot unmarshal {_json_type(value)} {_shown(value)} into Go value of type int"


def _parse_devices(ctx: _DocumentFindings, value: object, path: str) -> Literal["all"] | tuple[int, ...]:
    if isinstance(value, str):
        if value != "all":  # rule 8
            ctx.error(
                path,
                "invalid-devices",
                f"invalid string input {value!r}: devices must be 'all' or a list of GPU indices",
            )
        else:
            _read_as(ctx, path, value, "devices")
        return "all"
    if value is None:
        ctx.error(
            path,
            "invalid-devices",
            "devices is null (empty): mig-parted reads it as the string '' and "
            "refuses it (invalid string input); write 'all' or a list of GPU indices",
        )
        return "all"
    if isinstance(value, list):
        out = []
        plain = not ctx.surprises  # nothing written oddly anywhere: ints need no per-item look-up
        for i, item in enumerate(value):
            if plain and type(item) is int and -(1 << 63) <= item < 1 << 63:
                out.append(item)
                continue
            n = _int_field(ctx, index_path(path, i), item, "GPU index")
            if n is None:
                ctx.error(
                    path,
                    "invalid-devices",
                    f"devices must be 'all' or a list of integer GPU indices; item {i}: {_int_refusal(item)}",
                )
                return ()
            out.append(n)
        return tuple(out)
    ctx.error(path, "invalid-devices", f"devices must be 'all' or a list of integer GPU indices, not {_shown(value)}")
    return ()


_MATCHES_ALL = "so the entry matches every GPU"


def _parse_filter(ctx: _DocumentFindings, value: object, path: str) -> tuple[str, ...]:
    if value is None:  # mig-parted stores the string "": no filter
        ctx.note(path, f"device-filter is null (empty): mig-parted reads no filter, {_MATCHES_ALL}")
        return ()
    if isinstance(value, str):
        if value == "":
            ctx.note(path, f"device-filter is the empty string: mig-parted reads no filter, {_MATCHES_ALL}")
            return ()
        _read_as(ctx, path, value, "device-filter")
        return (value,)
    if isinstance(value, list) and all(isinstance(v, str) or v is None for v in value):
        if not value:
            ctx.note(path, f"device-filter is an empty list: mig-parted reads no filter, {_MATCHES_ALL}")
        for i, v in enumerate(value):
            if v is None:
                ctx.note(
                    index_path(path, i), "null is read as the empty string \"\" (a filter that is not a PCI device ID)"
                )
        return tuple("" if v is None else v for v in value)
    ctx.error(
        path,
        "invalid-device-filter",  # rule 9
        "device-filter must be a string or a list of strings such as \"0x233010DE\"",
    )
    return ()


def _parse_mig_devices(ctx: _DocumentFindings, value: object, path: str) -> tuple[ProfileCount, ...] | None:
    if value is None:
        return None  # a nil map: as if absent
    if not isinstance(value, Mapping):  # rule 11
        ctx.error(path, "invalid-mig-devices", f"mig-devices must map profile names to counts, not {_shown(value)}")
        return ()
    items: list[ProfileCount] = []
    ok = True
    seen = ctx.counts
    for key, count in value.items():
        if ctx.plain and type(count) is int:
            known = seen.get((key, count))
            if known is not None:
                items.append(known)
                continue
        item_path = key_path(path, key)
        try:
            profile = parse_profile(key)
        except ProfileSyntaxError as exc:
            ctx.error(item_path, "profile-syntax", f"invalid MIG profile {key!r}: {exc}")
            ok = False
            continue
        n = _int_field(ctx, item_path, count, "the count")
        if n is None:
            ctx.error(item_path, "invalid-count", f"count must be an integer: {_int_refusal(count)}")
            ok = False
            continue
        if n < 0:
            ctx.error(item_path, "negative-count", f"count {n} is negative")
            ok = False
            continue
        item = ProfileCount(key, profile, n)
        items.append(item)
        if ctx.plain and type(count) is int:
            seen[key, count] = item
    if ok and items and all(item.count == 0 for item in items):
        ctx.error(path, "all-counts-zero", "all counts for all MigProfiles are 0")
    return tuple(items)


def _parse_entry(ctx: _DocumentFindings, raw: object, path: str) -> MigConfigEntry | None:
    if raw is None:  # mig-parted's UnmarshalJSON gets null: an empty map
        for name in ("devices", "mig-enabled"):
            ctx.error(
                key_path(path, name), "missing-required-field", f"missing required field {name!r} (the entry is null)"
            )
        return None
    if not isinstance(raw, Mapping):
        ctx.error(
            path, "invalid-entry", f"each entry must be a mapping with devices and mig-enabled, not {_shown(raw)}"
        )
        return None
    start = len(ctx.problems)
    for name in raw:
        if name not in _ENTRY_FIELDS:  # rule 7
            ctx.error(
                key_path(path, name),
                "unexpected-field",
                f"unexpected field {name!r} (allowed: {', '.join(_ENTRY_FIELDS)})",
            )
    for name in ("devices", "mig-enabled"):
        if name not in raw:  # rule 6
            ctx.error(key_path(path, name), "missing-required-field", f"missing required field {name!r}")
    devices = _parse_devices(ctx, raw["devices"], path + _FIELD["devices"]) if "devices" in raw else "all"
    device_filter = (
        _parse_filter(ctx, raw["device-filter"], path + _FIELD["device-filter"]) if "device-filter" in raw else ()
    )
    enabled = False
    enabled_path = path + _FIELD["mig-enabled"]
    known = "mig-enabled" in raw  # present and a boolean (or null)
    if known:
        value = raw["mig-enabled"]
        if value is None or isinstance(value, bool):
            enabled = bool(value)
            if not ctx.plain:
                _read_as(ctx, enabled_path, enabled, "mig-enabled")
        else:  # rule 10
            known = False
            ctx.error(enabled_path, "invalid-mig-enabled", f"mig-enabled must be true or false, not {_shown(value)}")
    devices_path = path + _FIELD["mig-devices"]
    mig_devices = _parse_mig_devices(ctx, raw.get("mig-devices"), devices_path)
    if enabled and mig_devices is None:  # rule 12
        ctx.error(
            devices_path, "mig-devices-required", "missing required field 'mig-devices' when 'mig-enabled' is true"
        )
    elif not enabled and mig_devices and known:  # rule 13
        ctx.error(devices_path, "mig-devices-when-disabled", "MIG devices included when 'mig-enabled' is false")
    if len(ctx.problems) > start:
        return None
    return MigConfigEntry(path, devices, device_filter, enabled, mig_devices or ())


_NAME_WORDS = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


def _check_top_level(ctx: _DocumentFindings, doc: Mapping[object, object]) -> None:
    """The document's version, and no field beside version and mig-configs."""
    if "version" not in doc:  # rule 1
        ctx.error("version", "missing-version", "unable to parse with missing 'version' field")
    else:
        version = doc["version"]
        if version is None:
            ctx.error("version", "unknown-version", "unknown version: '' (version is null; it must be \"v1\")")
        elif not isinstance(version, str):
            ctx.error(
                "version",
                "unknown-version",
                f"unknown version: {_shown(version)} is not the string \"v1\" "
                f"(mig-parted: cannot unmarshal {_json_type(version)} into Go value of type string)",
            )
        elif version != "v1":  # rule 2
            ctx.error("version", "unknown-version", f"unknown version: {version!r} (must be \"v1\")")
        else:
            _read_as(ctx, "version", version, "version")
    for name in doc:
        if name not in _TOP_FIELDS:  # rule 3
            ctx.error(
                key_path("", name), "unexpected-field", f"unexpected field {name!r} (allowed: version, mig-configs)"
            )


def _parse_configs(ctx: _DocumentFindings, doc: object) -> tuple[tuple[str, tuple[MigConfigEntry, ...]], ...]:
    if doc is None:
        return ()  # encoding/json leaves the spec empty for a null document: mig-parted reads no config
    if not isinstance(doc, Mapping):
        ctx.error(
            "",
            "not-a-mapping",
            f"a mig-parted config is a mapping with version and mig-configs, not "
            f"{_shown(doc)} (cannot unmarshal {_json_type(doc)} into Go value of type map)",
        )
        return ()
    if not doc:
        ctx.error("version", "unknown-version", "unknown version: '' (the document is an empty mapping)")  # rule 2
        return ()
    _check_top_level(ctx, doc)
    if "mig-configs" not in doc:
        return ()  # accepted by mig-parted, with no config to select (see no_config_problems)
    raw_configs = doc["mig-configs"]
    if raw_configs is None or isinstance(raw_configs, Mapping) and not raw_configs:  # rule 4
        ctx.error("mig-configs", "empty-mig-configs", "at least one entry in 'mig-configs' is required")
        return ()
    if not isinstance(raw_configs, Mapping):
        ctx.error(
            "mig-configs",
            "invalid-mig-configs",
            f"mig-configs must map config names to lists of entries, not {_shown(raw_configs)}",
        )
        return ()
    configs: list[tuple[str, tuple[MigConfigEntry, ...]]] = []
    for name, raw_entries in raw_configs.items():
        config_path = key_path("mig-configs", name)
        src = ctx.written(config_path)
        if src is not None and src.kind == "key":
            ctx.note(
                config_path,
                f"the config name {src.text} is not a string in YAML 1.1: mig-parted names "
                f"this config {name!r}, so only the node label nvidia.com/mig.config={name} selects it "
                f"(quote the name to keep it as written)",
                "config-name-converted",
            )
        if raw_entries is None or isinstance(raw_entries, list) and not raw_entries:  # rule 5
            ctx.error(config_path, "empty-config", f"at least one entry in {name!r} is required")
            continue
        if not isinstance(raw_entries, list):
            ctx.error(
                config_path, "invalid-config", f"config {name!r} must be a list of entries, not {_shown(raw_entries)}"
            )
            continue
        entries = [_parse_entry(ctx, raw, index_path(config_path, i)) for i, raw in enumerate(raw_entries)]
        configs.append((name, tuple(e for e in entries if e is not None)))
    return tuple(configs)


@paused_gc()
def decode_document(doc: Document) -> MigPartedConfig:
    """encoding/json's decoding of one document the reader produced into mig-parted's spec; raises
    MigError with every problem, located; reading surprises become warnings in `notes`."""
    ctx = _DocumentFindings(doc.surprises)
    configs = _parse_configs(ctx, doc.value)
    for path, src in doc.surprises.items():
        if src.kind == "merge-override":
            ctx.note(
                path,
                "a value merged with << after this key replaces it (go-yaml applies merges in "
                "document order): mig-parted reads the merged value",
            )
    if doc.rest is not None:
        ctx.note(
            "",
            f"mig-parted reads only the first document of a file; the document at line {doc.rest.line} is ignored",
            "trailing-document",
        )
    config = MigPartedConfig(configs, (), doc.locations)
    if ctx.problems:
        raise MigError(config.place(ctx.problems))
    notes = config.place(ctx.notes)
    return MigPartedConfig(configs, notes, doc.locations)


def parse_config_object(doc: object) -> MigPartedConfig:
    """Parse an already-loaded document as a mig-parted v1 config (keys and values are taken as
    sigs.k8s.io/yaml would have converted them); raises MigError."""
    try:
        value = to_json_value(doc)
    except (ValueError, RecursionError) as exc:
        raise MigError([Problem("", "yaml-syntax", f"cannot be converted to JSON as mig-parted does: {exc}")]) from None
    return decode_document(Document(value, {}, {}, Location(1, 1)))


# ---------------------------------------------------------------------------------------------------
# ConfigMap manifests and the config text inside them


def is_kubernetes_object(value: object) -> TypeGuard[Mapping[str, object]]:
    """A mapping with apiVersion and kind: a manifest, not a bare mig-parted config.

    Called on JSON values (a Document's), whose mappings have string keys."""
    return (
        isinstance(value, Mapping) and isinstance(value.get("kind"), str) and isinstance(value.get("apiVersion"), str)
    )


def is_configmap(doc: object) -> TypeGuard[Mapping[str, object]]:
    return is_kubernetes_object(doc) and doc.get("kind") == "ConfigMap"


_PAYLOAD = key_path("data", CONFIGMAP_KEY)


def configmap_payload(doc: Mapping[str, object]) -> str:
    """The config text inside a ConfigMap manifest (key `config.yaml`); MigError if there is none."""
    data = doc.get("data")
    if not isinstance(data, Mapping) or CONFIGMAP_KEY not in data:
        keys = ", ".join(map(str, data)) if isinstance(data, Mapping) else "none"
        raise MigError(
            [
                Problem(
                    _PAYLOAD,
                    "configmap-key",
                    f"the ConfigMap has no data key {CONFIGMAP_KEY!r} (keys: {keys}); the GPU "
                    "Operator's mig-manager reads the config from that key",
                )
            ]
        )
    payload = data[CONFIGMAP_KEY]
    if not isinstance(payload, str):
        raise MigError(
            [Problem(_PAYLOAD, "configmap-key", "ConfigMap data values must be strings holding the YAML config")]
        )
    return payload


_LINE_BREAK = re.compile(r"\r\n|[\r\n\x85\u2028\u2029]")


def _payload_shift(text: str, manifest: Document, prefix: str) -> tuple[int, int] | None:
    """(lines, columns) to add to a location inside the ConfigMap's config.yaml to make it a location in
    the whole file: exact for a literal block scalar (`config.yaml: |`), whose lines are the file's lines
    shifted right by the block's indentation; None for other styles (quoted, folded)."""
    where = manifest.strings.get(key_path(key_path(prefix, "data"), CONFIGMAP_KEY))
    if where is None:
        return None
    line, _, style = where
    if style != "|":
        return None
    payload = _payload_of(manifest.value, prefix)
    if payload is None:
        return None
    lines = _LINE_BREAK.split(text)
    for i, inner in enumerate(payload.split("\n")):
        if inner.strip():
            if line + i >= len(lines):
                return None
            outer = lines[line + i]  # the block's content starts on the line after the indicator
            indent = len(outer) - len(inner)
            if indent < 0 or outer[indent:] != inner or outer[:indent].strip():
                return None
            return line, indent
    return line, 0


def _payload_of(value: object, prefix: str) -> str | None:
    obj = value
    if prefix:  # an item of a List: items[i]
        index = int(prefix[prefix.rindex("[") + 1 : -1])
        obj = value.get("items", [])[index] if isinstance(value, Mapping) else None
    if not isinstance(obj, Mapping):
        return None
    data = obj.get("data")
    payload = data.get(CONFIGMAP_KEY) if isinstance(data, Mapping) else None
    return payload if isinstance(payload, str) else None


def _shifted(
    locations: LocationIndex, shift: tuple[int, int] | None, fallback: Location | None
) -> Mapping[str, Location]:
    if shift is not None:
        return locations.shifted(*shift)
    if fallback is None:
        return {}
    return locations.pinned(fallback)


def parse_embedded(
    text: str, manifest: Document, obj: Mapping[str, object], prefix: str = "", limits: InputLimits = DEFAULT_LIMITS
) -> MigPartedConfig:
    """The config inside a ConfigMap object of `manifest` (at `prefix`: "" or `items[i]` of a List),
    with every location given in the whole file `text`."""
    fallback = manifest.locate(key_path(key_path(prefix, "data"), CONFIGMAP_KEY))
    try:
        payload = configmap_payload(obj)
    except MigError as exc:
        raise MigError([p.at(fallback.line, fallback.column) if fallback else p for p in exc.problems]) from None
    shift = _payload_shift(text, manifest, prefix)
    try:
        inner = read_first(payload, limits)
    except MigError as exc:
        raise MigError([_moved(p, shift, fallback) for p in exc.problems]) from None
    moved = Document(
        inner.value,
        _shifted(inner.locations, shift, fallback),  # type: ignore[arg-type]
        inner.surprises,
        inner.start,
        inner.index,
        inner.rest and _moved_location(inner.rest, shift, fallback),
        inner.strings,
    )
    return decode_document(moved)


def _moved_location(loc: Location, shift: tuple[int, int] | None, fallback: Location | None) -> Location:
    if shift is not None:
        return Location(loc.line + shift[0], loc.column + shift[1])
    return fallback or loc


def _moved(p: Problem, shift: tuple[int, int] | None, fallback: Location | None) -> Problem:
    if p.line is not None and shift is not None:
        return Problem(p.path, p.rule, p.message, p.severity, p.line + shift[0], (p.column or 1) + shift[1])
    if fallback is not None:
        return Problem(p.path, p.rule, p.message, p.severity, fallback.line, fallback.column)
    return p


@paused_gc()
def parse_config(text: str | bytes, limits: InputLimits = DEFAULT_LIMITS) -> MigPartedConfig:
    """Parse YAML/JSON text, either a mig-parted config (read as mig-parted reads it: the first document)
    or a ConfigMap manifest holding one; raises MigError."""
    doc = read_first(text, limits)
    if is_configmap(doc.value):
        source = text if isinstance(text, str) else text.decode("utf-8")  # read_first checked it is UTF-8
        return parse_embedded(source, doc, doc.value, "", limits)
    return decode_document(doc)

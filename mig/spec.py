"""mig-parted's config format, v1 (api/spec/v1), parsed with all 13 of its rules.

Input is YAML or JSON text, or a ConfigMap manifest whose `data` holds the config under `config.yaml`
(the key the GPU Operator mounts). Every problem is collected, not only the first, each with its path
and rule. Rule numbers in comments refer to mig-hardware.md section 1.3; the messages are mig-parted's.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass

from migops.mig.problems import MigError, Problem, index_path, key_path
from migops.mig.profile import MigProfile, ProfileSyntaxError, parse_profile
from migops.mig.yamlsafe import DEFAULT_LIMITS, Limits, load_yaml

CONFIGMAP_KEY = "config.yaml"
_TOP_FIELDS = ("version", "mig-configs")
_ENTRY_FIELDS = ("device-filter", "devices", "mig-enabled", "mig-devices")


@dataclass(frozen=True)
class ProfileCount:
    key: str  # as written in the file, for paths and messages
    profile: MigProfile
    count: int


@dataclass(frozen=True)
class MigConfigEntry:
    """One item of a named config: which GPUs it selects and what they should become."""

    path: str  # e.g. mig-configs.custom[1]
    devices: str | tuple[int, ...]  # "all" or GPU indices
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
    """A whole file: named configs in file order."""

    configs: tuple[tuple[str, tuple[MigConfigEntry, ...]], ...]

    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.configs)

    def entries(self, name: str) -> tuple[MigConfigEntry, ...]:
        for config_name, entries in self.configs:
            if config_name == name:
                return entries
        raise KeyError(name)

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
            raise MigError([Problem("mig-configs", "config-not-selected",
                                    f"the file holds {len(self.configs)} configs; select one with -c "
                                    f"({', '.join(self.names())})")])
        try:
            return name, self.entries(name)
        except KeyError:
            raise MigError([Problem(key_path("mig-configs", name), "config-not-found",
                                    f"selected mig-config not present: {name!r} "
                                    f"(have: {', '.join(self.names())})")]) from None


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _parse_devices(value: object, path: str, problems: list[Problem]) -> str | tuple[int, ...]:
    if isinstance(value, str):
        if value != "all":  # rule 8
            problems.append(Problem(path, "invalid-devices",
                                    f"invalid string input {value!r}: devices must be 'all' or a list of GPU indices"))
        return "all"
    if isinstance(value, list) and all(_is_int(v) for v in value):
        return tuple(value)
    problems.append(Problem(path, "invalid-devices", "devices must be 'all' or a list of integer GPU indices"))
    return ()


def _parse_filter(value: object, path: str, problems: list[Problem]) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    problems.append(Problem(path, "invalid-device-filter",  # rule 9
                            "device-filter must be a string or a list of strings such as \"0x233010DE\""))
    return ()


def _parse_mig_devices(value: object, path: str, problems: list[Problem]) -> tuple[ProfileCount, ...]:
    if not isinstance(value, Mapping):  # rule 11
        problems.append(Problem(path, "invalid-mig-devices", "mig-devices must map profile names to counts"))
        return ()
    items: list[ProfileCount] = []
    ok = True
    for key, count in value.items():
        item_path = key_path(path, key)
        if not isinstance(key, str):
            problems.append(Problem(item_path, "profile-syntax", f"profile name {key!r} must be a string"))
            ok = False
            continue
        try:
            profile = parse_profile(key)
        except ProfileSyntaxError as exc:
            problems.append(Problem(item_path, "profile-syntax", f"invalid MIG profile {key!r}: {exc}"))
            ok = False
            continue
        if not _is_int(count):
            problems.append(Problem(item_path, "invalid-count", f"count must be an integer, not {count!r}"))
            ok = False
            continue
        if count < 0:
            problems.append(Problem(item_path, "negative-count", f"count {count} is negative"))
            ok = False
            continue
        items.append(ProfileCount(key, profile, count))
    if ok and items and all(item.count == 0 for item in items):
        problems.append(Problem(path, "all-counts-zero", "all counts for all MigProfiles are 0"))
    return tuple(items)


def _parse_entry(raw: object, path: str, problems: list[Problem]) -> MigConfigEntry | None:
    if not isinstance(raw, Mapping):
        problems.append(Problem(path, "invalid-entry", "each entry must be a mapping with devices and mig-enabled"))
        return None
    start = len(problems)
    for field in raw:
        if field not in _ENTRY_FIELDS:  # rule 7
            problems.append(Problem(key_path(path, field), "unexpected-field",
                                    f"unexpected field {field!r} (allowed: {', '.join(_ENTRY_FIELDS)})"))
    for field in ("devices", "mig-enabled"):
        if field not in raw:  # rule 6
            problems.append(Problem(key_path(path, field), "missing-required-field", f"missing required field {field!r}"))
    devices = _parse_devices(raw.get("devices", "all"), key_path(path, "devices"), problems)
    device_filter = _parse_filter(raw.get("device-filter"), key_path(path, "device-filter"), problems)
    enabled = raw.get("mig-enabled", False)
    if "mig-enabled" in raw and not isinstance(enabled, bool):  # rule 10
        problems.append(Problem(key_path(path, "mig-enabled"), "invalid-mig-enabled",
                                f"mig-enabled must be true or false, not {enabled!r}"))
        enabled = False
    mig_devices: tuple[ProfileCount, ...] = ()
    devices_path = key_path(path, "mig-devices")
    raw_devices = raw.get("mig-devices")
    if enabled is True and raw_devices is None:  # rule 12
        problems.append(Problem(devices_path, "mig-devices-required",
                                "missing required field 'mig-devices' when 'mig-enabled' is true"))
    elif raw_devices is not None:
        mig_devices = _parse_mig_devices(raw_devices, devices_path, problems)
        if enabled is False and "mig-enabled" in raw and (raw_devices or mig_devices):  # rule 13
            problems.append(Problem(devices_path, "mig-devices-when-disabled",
                                    "MIG devices included when 'mig-enabled' is false"))
    if len(problems) > start:
        return None
    return MigConfigEntry(path, devices, device_filter, bool(enabled), mig_devices)


def parse_config_object(doc: object) -> MigPartedConfig:
    """Parse an already-loaded document (dict) as a mig-parted v1 config; raises MigError."""
    problems: list[Problem] = []
    if doc is None or (isinstance(doc, Mapping) and not doc):
        raise MigError([Problem("version", "unknown-version", "unknown version: '' (the document is empty)")])  # rule 2
    if not isinstance(doc, Mapping):
        raise MigError([Problem("", "not-a-mapping",
                                f"a mig-parted config is a mapping with version and mig-configs, not {type(doc).__name__}")])
    if "version" not in doc:  # rule 1
        problems.append(Problem("version", "missing-version", "unable to parse with missing 'version' field"))
    elif doc["version"] != "v1":  # rule 2
        problems.append(Problem("version", "unknown-version", f"unknown version: {doc['version']!r} (must be \"v1\")"))
    for field in doc:
        if field not in _TOP_FIELDS:  # rule 3
            problems.append(Problem(key_path("", field), "unexpected-field",
                                    f"unexpected field {field!r} (allowed: version, mig-configs)"))
    configs: list[tuple[str, tuple[MigConfigEntry, ...]]] = []
    raw_configs = doc.get("mig-configs")
    if "mig-configs" not in doc:
        problems.append(Problem("mig-configs", "missing-mig-configs", "missing 'mig-configs': the file names no config"))
    elif not isinstance(raw_configs, Mapping):
        problems.append(Problem("mig-configs", "invalid-mig-configs", "mig-configs must map config names to lists of entries"))
    elif not raw_configs:  # rule 4
        problems.append(Problem("mig-configs", "empty-mig-configs", "at least one entry in 'mig-configs' is required"))
    else:
        for name, raw_entries in raw_configs.items():
            config_path = key_path("mig-configs", name)
            if not isinstance(name, str):
                problems.append(Problem(config_path, "invalid-config-name", f"config name {name!r} must be a string"))
                continue
            if not isinstance(raw_entries, list):
                problems.append(Problem(config_path, "invalid-config", f"config {name!r} must be a list of entries"))
                continue
            if not raw_entries:  # rule 5
                problems.append(Problem(config_path, "empty-config", f"at least one entry in {name!r} is required"))
                continue
            entries = [_parse_entry(raw, index_path(config_path, i), problems) for i, raw in enumerate(raw_entries)]
            configs.append((name, tuple(e for e in entries if e is not None)))
    if problems:
        raise MigError(problems)
    return MigPartedConfig(tuple(configs))


def _configmap_payload(doc: Mapping) -> str:
    """The config text inside a ConfigMap manifest (key `config.yaml`)."""
    data = doc.get("data")
    if not isinstance(data, Mapping) or CONFIGMAP_KEY not in data:
        keys = ", ".join(map(str, data)) if isinstance(data, Mapping) else "none"
        raise MigError([Problem(key_path("data", CONFIGMAP_KEY), "configmap-key",
                                f"the ConfigMap has no data key {CONFIGMAP_KEY!r} (keys: {keys}); the GPU "
                                "Operator's mig-manager reads the config from that key")])
    payload = data[CONFIGMAP_KEY]
    if not isinstance(payload, str):
        raise MigError([Problem(key_path("data", CONFIGMAP_KEY), "configmap-key",
                                "ConfigMap data values must be strings holding the YAML config")])
    return payload


def is_configmap(doc: object) -> bool:
    return isinstance(doc, Mapping) and doc.get("kind") == "ConfigMap" and "apiVersion" in doc


def parse_config(text: str | bytes, limits: Limits = DEFAULT_LIMITS) -> MigPartedConfig:
    """Parse YAML/JSON text, either a mig-parted config or a ConfigMap manifest holding one."""
    doc = load_yaml(text, limits)
    if is_configmap(doc):
        doc = load_yaml(_configmap_payload(doc), limits)
    return parse_config_object(doc)

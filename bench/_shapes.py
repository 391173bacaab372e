"""Large but admissible mig-parted config files: the worst cases the input bounds admit.

Used by bench/mig_worst_case.py (timings, memory) and tests/mig/test_golden_verdicts.py (the verdicts
must not change when the validator gets faster). The text is a pure function of the arguments: no
`random`, no catalogue lookups, so the golden data recorded from it stays valid when the catalogue or
Python changes. Every file stays within migops's input bounds (1 MiB, 100,000 YAML nodes after alias
expansion, depth 32); bench/mig_worst_case.py prints each file's size.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

INT64_MAX = (1 << 63) - 1

# Profile names per MIG geometry as NVIDIA's default config spells them (mig-hardware.md 4.5/4.8),
# plus compute-instance sub-profiles, driver-drift names and names no GPU has.
MODEL_PROFILES: tuple[tuple[str, ...], ...] = (
    ("1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"),
    ("1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
    ("1g.6gb", "1g.6gb+me", "2g.12gb", "2g.12gb+me", "4g.24gb"),
    ("1g.12gb", "1g.12gb+me", "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb", "7g.94gb"),
    ("1g.12gb", "1g.12gb+me", "1g.24gb", "2g.24gb", "3g.48gb", "4g.48gb", "7g.96gb"),
    ("1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"),
    ("1g.18gb", "1g.18gb+me", "1g.36gb", "2g.36gb", "3g.72gb", "4g.72gb", "7g.144gb"),
    ("1g.23gb", "1g.23gb+me", "1g.45gb", "2g.45gb", "3g.90gb", "4g.90gb", "7g.180gb"),
    ("1g.23gb", "1g.23gb+me", "1g.47gb", "2g.47gb", "3g.93gb", "4g.93gb", "7g.186gb", "1g.24gb", "7g.189gb"),
    ("1g.34gb", "1g.34gb+me", "1g.67gb", "2g.67gb", "3g.135gb", "4g.135gb", "7g.269gb"),
    ("1g.35gb", "1g.35gb+me", "1g.70gb", "2g.70gb", "3g.139gb", "4g.139gb", "7g.278gb"),
    (
        "1g.24gb",
        "1g.24gb+me",
        "1g.24gb+gfx",
        "1g.24gb+me.all",
        "1g.24gb-me",
        "2g.48gb",
        "2g.48gb+gfx",
        "2g.48gb+me.all",
        "2g.48gb-me",
        "4g.96gb",
        "4g.96gb+gfx",
    ),
)
EXTRA_PROFILES = (
    "1c.2g.20gb",
    "1c.3g.40gb",
    "2c.3g.40gb",
    "1c.7g.80gb",
    "3c.7g.80gb",
    "1c.4g.40gb",
    "2c.4g.40gb",
    "3c.4g.40gb",
    "1c.3g.20gb",
    "7g.79gb",
    "1g.11gb",
    "5g.50gb",
    "1g.10gb+gfx",
    "1g.10gb-me",
    "1g.24gb+gfx,me",
)
# Known IDs, a non-MIG GPU (DGX Station display), a typo, a subsystem form, and one that does not parse.
FILTERS = (
    "0x233010DE",
    "0x20B010DE",
    "0x20B710DE",
    "0x2BB510DE",
    "0x294110DE",
    "0x290110DE",
    "0x233510DE",
    "0x20B210DE",
    "0x232110DE",
    "0x31C210DE",
    "0x1FB010DE",
    "0x23301DE",
    "0x233010DE:0x16C110DE",
    "MODEL",
)

HEADER = "version: v1\nmig-configs:\n"


def _lcg(seed: int) -> Iterator[int]:
    """A fixed pseudo-random stream (Numerical Recipes LCG): the same numbers on every Python."""
    state = seed & 0xFFFFFFFF
    while True:
        state = (1664525 * state + 1013904223) & 0xFFFFFFFF
        yield state >> 8


def _devices_map(items: dict[str, int], indent: str, flow: bool) -> str:
    if not items:
        return " {}\n"
    if flow:
        return " {" + ", ".join(f'"{k}": {v}' for k, v in items.items()) + "}\n"
    return "\n" + "".join(f'{indent}"{k}": {v}\n' for k, v in items.items())


def _entry(
    devices: str, enabled: bool, items: dict[str, int] | None, device_filter: str | None = None, flow: bool = True
) -> str:
    """One entry of a config's list; `flow` writes mig-devices on one line, as many real files do."""
    out = "    - "
    if device_filter is not None:
        out += f"device-filter: {device_filter}\n      "
    out += f"devices: {devices}\n      mig-enabled: {'true' if enabled else 'false'}\n"
    if items is not None:
        out += "      mig-devices:" + _devices_map(items, "        ", flow)
    return out


# A handful of geometries, as real files repeat them: one profile type per GPU (so that ~9,000 configs
# fit in the 100,000-node bound: 11 nodes each), some filtered, some on a few indices.
_HANDFUL: tuple[str, ...] = (
    _entry("all", True, {"1g.10gb": 7}),
    _entry("all", True, {"3g.40gb": 2}),
    _entry("all", True, {"2g.20gb": 3}),
    _entry("all", True, {"1g.5gb": 7}),
    _entry("all", True, {"1g.24gb": 4}),
    _entry("all", True, {"7g.80gb": 1}),
    _entry("[0]", True, {"4g.20gb": 1}),
    _entry("all", True, {"1g.10gb": 8}),
)


def repeated(configs: int = 8900) -> str:
    """Many configs repeating a handful of geometries (~9,000 configs, 680 KB)."""
    parts = [HEADER]
    for i in range(configs):
        parts.append(f"  cfg-{i:05d}:\n{_HANDFUL[i % len(_HANDFUL)]}")
    return "".join(parts)


def _geometry(rng: Iterator[int]) -> tuple[str, dict[str, int]]:
    model = MODEL_PROFILES[next(rng) % len(MODEL_PROFILES)]
    pool = model + EXTRA_PROFILES[: next(rng) % 4]
    items: dict[str, int] = {}
    for _ in range(2 + next(rng) % 3):
        items[pool[next(rng) % len(pool)]] = 1 + next(rng) % 3
    return ("all" if next(rng) % 4 else f"[{next(rng) % 8}]"), items


def distinct(configs: int = 6000, seed: int = 11) -> str:
    """Many configs, each a different multi-profile geometry (~6,000 configs, 590 KB)."""
    rng = _lcg(seed)
    seen: set[tuple] = set()
    parts = [HEADER]
    while len(seen) < configs:
        devices, items = _geometry(rng)
        key = (devices, tuple(sorted(items.items())))
        if key in seen:
            continue
        seen.add(key)
        choice = next(rng) % 10
        device_filter = f'"{FILTERS[next(rng) % len(FILTERS)]}"' if choice == 0 else None
        parts.append(f"  geo-{len(seen):05d}:\n{_entry(devices, True, items, device_filter)}")
    return "".join(parts)


def aliases(configs: int = 6000) -> str:
    """A few anchored entry lists, each config an alias of one: tiny text, the node budget spent."""
    anchors = [
        _entry("all", True, {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}, flow=False),
        _entry("all", True, {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}),
        _entry("all", True, {"1g.24gb": 2, "2g.48gb": 1}),
        _entry("all", True, {"9g.99gb": 1, "1g.10gb": 9}),
    ]
    parts = [HEADER]
    for a, text in enumerate(anchors):
        parts.append(f"  anchor-{a}: &g{a}\n{text}")
    for i in range(configs):
        parts.append(f"  alias-{i:05d}: *g{i % len(anchors)}\n")
    return "".join(parts)


def entries(configs: int = 4, per_config: int = 1200, seed: int = 5) -> str:
    """Few configs with very many entries: overlapping selections, per-index geometries, filters."""
    rng = _lcg(seed)
    parts = [HEADER]
    for c in range(configs):
        parts.append(f"  many-{c}:\n")
        for e in range(per_config):
            devices = "all" if c == 0 else f"[{e % 8}]"
            _, items = _geometry(rng)
            device_filter = f'"{FILTERS[e % len(FILTERS)]}"' if c == 2 else None
            parts.append(_entry(devices, e % 7 != 3, None if e % 7 == 3 else items, device_filter))
    return "".join(parts)


def indices(configs: int = 4, per_config: int = 21000) -> str:
    """Very long `devices` lists: indices far beyond any node, and repeated ones."""
    parts = [HEADER]
    for c in range(configs):
        values = [i if c % 2 == 0 else i % 50 for i in range(per_config)]
        parts.append(f"  idx-{c}:\n" + _entry("[" + ", ".join(map(str, values)) + "]", True, {"1g.10gb": 7}))
    return "".join(parts)


def counts(configs: int = 6000, count: int = INT64_MAX) -> str:
    """Huge counts in every config (a count of 2^63-1 must be judged by arithmetic), on GPU
    instances and on compute instances packed into them."""
    parts = [HEADER]
    for i in range(configs):
        model = MODEL_PROFILES[i % len(MODEL_PROFILES)]
        extra = EXTRA_PROFILES[i % len(EXTRA_PROFILES)]
        items = {model[i % len(model)]: count - (i % 3), model[0]: 1 + i % 2, extra: count // (1 + i % 5)}
        parts.append(f"  huge-{i:05d}:\n{_entry('all', True, items)}")
    return "".join(parts)


def profiles(configs: int = 500, per_config: int = 60, seed: int = 7) -> str:
    """Configs with many profile keys, most of which no GPU has (did-you-mean hints for each)."""
    rng = _lcg(seed)
    parts = [HEADER]
    for c in range(configs):
        items: dict[str, int] = {}
        while len(items) < per_config:
            r = next(rng)
            kind = r % 5
            if kind == 0:
                model = MODEL_PROFILES[r % len(MODEL_PROFILES)]
                name = model[(r >> 4) % len(model)]
            elif kind == 1:
                name = EXTRA_PROFILES[(r >> 4) % len(EXTRA_PROFILES)]
            else:
                g = 1 + (r >> 4) % 8
                name = f"{g}g.{(r >> 8) % 300}gb" + ("+me" if r % 7 == 0 else "")
            items[name] = 1 + (r >> 12) % 2
        parts.append(f"  prof-{c:04d}:\n{_entry('all', True, items)}")
    return "".join(parts)


def filters(configs: int = 400, per_entry: int = 60) -> str:
    """Long device-filter lists, known, unknown, malformed and subsystem IDs mixed."""
    parts = [HEADER]
    for c in range(configs):
        ids = [
            FILTERS[(c + i) % len(FILTERS)] if i % 3 else f"0x{0x2000 + (c * per_entry + i) % 4096:04X}10DE"
            for i in range(per_entry)
        ]
        text = "[" + ", ".join(f'"{i}"' for i in ids) + "]"
        items = {MODEL_PROFILES[c % len(MODEL_PROFILES)][0]: 2}
        parts.append(f"  filt-{c:04d}:\n{_entry('all', True, items, text)}")
    return "".join(parts)


# name -> (generator, one-line description). The bench runs every one at full size.
SHAPES: dict[str, tuple[Callable[[], str], str]] = {
    "repeated": (repeated, "8,900 configs repeating a handful of geometries"),
    "distinct": (distinct, "~6,000 configs, each a different multi-profile geometry"),
    "aliases": (aliases, "6,000 configs, each a YAML alias of one of 4 anchored entries"),
    "entries": (entries, "4 configs x 1,200 entries (overlapping selections, filters)"),
    "indices": (indices, "4 configs, each devices: [21,000 indices] (out of range, repeated)"),
    "counts": (counts, "6,000 configs with counts up to 2^63-1 (GPU and compute instances)"),
    "profiles": (profiles, "500 configs x 60 profile keys, mostly unknown (did-you-mean hints)"),
    "filters": (filters, "400 configs, each with a 60-ID device-filter"),
}

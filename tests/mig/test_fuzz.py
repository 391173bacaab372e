"""Robustness: untrusted input reaches the parser and validator from a webhook, so nothing but MigError
(or, for profiles, ProfileSyntaxError) may escape, whatever the input."""

from __future__ import annotations

import json

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from migops.mig.catalogue import catalogue
from migops.mig.fit import NodeGpus, fit, fit_all
from migops.mig.gfd import advertise
from migops.mig.problems import MigError
from migops.mig.profile import ProfileSyntaxError, parse_profile
from migops.mig.sources import read_file
from migops.mig.spec import parse_config, parse_config_object
from migops.mig.validate import STRATEGIES, validate, validate_on_node

CAT = catalogue()
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# --- building blocks ---------------------------------------------------------------------------------

PROFILE_NAMES = sorted(
    {gi.name for t in CAT.tables for gi in t.profiles}
    | {a for t in CAT.tables for gi in t.profiles for a in gi.aliases}
    | {
        "1c.3g.20gb",
        "2c.7g.80gb",
        "5c.7g.40gb",
        "1c.1g.10gb",
        "9g.99gb",
        "0g.0gb",
        "1g.10gb+gfx",
        "1g.10gb-me",
        "1g.24gb+me,gfx",
        "bad",
        "",
        " 1g.10gb",
        "1g.10gb+",
    }
)
DEVICE_IDS = [g.device_id for g in CAT.gpus] + [
    "0x123410DE",
    "0xZZZ",
    "MODEL",
    "0x233010DE:0x16C110DE",
    "0x2330",
    "",
    "99999999999999999999",
    "-1",
    "0x",
]
KEYS = [
    "version",
    "mig-configs",
    "devices",
    "mig-enabled",
    "mig-devices",
    "device-filter",
    "config.yaml",
    "data",
    "kind",
    "apiVersion",
    "ConfigMap",
    "v1",
    "all",
    "1g.10gb",
    "x",
]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-10, 10),
    st.integers(),
    st.floats(allow_nan=True),
    st.text(max_size=12),
    st.sampled_from(KEYS + PROFILE_NAMES + DEVICE_IDS),
)
json_like = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=5),
        st.dictionaries(st.one_of(st.sampled_from(KEYS), st.text(max_size=8)), children, max_size=5),
    ),
    max_leaves=30,
)


def _grammatical(name: str) -> bool:
    try:
        parse_profile(name)
    except ProfileSyntaxError:
        return False
    return True


GRAMMATICAL = [n for n in PROFILE_NAMES if _grammatical(n)]


def _entry():
    """Mostly entries that parse (so the validator gets exercised), some that break a parse rule."""
    devices = st.one_of(st.just("all"), st.lists(st.integers(-2, 20), max_size=4))
    device_filter = st.one_of(st.sampled_from(DEVICE_IDS), st.lists(st.sampled_from(DEVICE_IDS), max_size=3))
    enabled = st.fixed_dictionaries(
        {
            "devices": devices,
            "mig-enabled": st.just(True),
            "mig-devices": st.dictionaries(st.sampled_from(GRAMMATICAL), st.integers(0, 8), max_size=4),
        },
        optional={"device-filter": device_filter},
    )
    disabled = st.fixed_dictionaries(
        {"devices": devices, "mig-enabled": st.just(False)}, optional={"device-filter": device_filter}
    )
    loose = st.fixed_dictionaries(
        {"devices": st.one_of(devices, st.sampled_from(["0", "some"])), "mig-enabled": st.booleans()},
        optional={
            "device-filter": device_filter,
            "mig-devices": st.one_of(
                st.dictionaries(st.sampled_from(PROFILE_NAMES), st.integers(-1, 9), max_size=4), st.none()
            ),
        },
    )
    return st.one_of(enabled, enabled, enabled, disabled, loose)


config_docs = st.fixed_dictionaries(
    {
        "version": st.just("v1"),
        "mig-configs": st.dictionaries(
            st.one_of(st.sampled_from(["all-balanced", "c", "Bad Name!", "a" * 70]), st.text(max_size=6)),
            st.lists(_entry(), min_size=1, max_size=4),
            min_size=1,
            max_size=3,
        ),
    }
)


# Errors that do not depend on the GPU model.
ENTRY_RULES = {"device-filter-syntax", "device-filter-unknown", "duplicate-device-index", "negative-device-index"}


def _parse_or_none(text):
    try:
        return parse_config(text)
    except MigError as exc:
        assert exc.problems and all(p.rule and isinstance(p.path, str) for p in exc.problems)
        return None


# --- parser ------------------------------------------------------------------------------------------


@FUZZ
@given(st.text(max_size=300))
def test_parse_arbitrary_text(text):
    _parse_or_none(text)


@FUZZ
@given(st.text(alphabet=st.characters(categories=["Cs", "Cc", "Zs", "Lu", "Nd", "Po"]), max_size=50))
def test_parse_text_with_surrogates_and_controls(text):
    _parse_or_none(text)
    _parse_or_none("version: v1\nmig-configs:\n  " + text + ":\n    - devices: all\n      mig-enabled: false\n")


@FUZZ
@given(st.binary(max_size=200))
def test_parse_arbitrary_bytes(data):
    _parse_or_none(data)


@FUZZ
@given(
    st.lists(
        st.sampled_from(
            [
                "[",
                "]",
                "{",
                "}",
                ":",
                ",",
                "-",
                " ",
                "\n",
                "&a",
                "*a",
                "? ",
                "!!binary",
                "'",
                '"',
                "a",
                "1",
                "#",
                "|",
                ">",
                "<<:",
                "---",
                "\t",
            ]
        ),
        max_size=80,
    )
)
def test_parse_yaml_punctuation_soup(tokens):
    _parse_or_none("".join(tokens))


@FUZZ
@given(json_like)
def test_parse_arbitrary_nested_objects(doc):
    _parse_or_none(yaml.safe_dump(doc))
    _parse_or_none(json.dumps(doc))


@FUZZ
@given(json_like)
def test_parse_arbitrary_configmap(payload):
    manifest = {"apiVersion": "v1", "kind": "ConfigMap", "data": {"config.yaml": payload}}
    _parse_or_none(yaml.safe_dump(manifest))
    if isinstance(payload, (dict, list)):
        manifest["data"]["config.yaml"] = yaml.safe_dump(payload)
        _parse_or_none(yaml.safe_dump(manifest))


TRICKY_SCALARS = [
    "2001-02-30",
    "2001-13-01",
    "2001-02-03",
    "2001-02-03T04:05:06Z",
    "99999-01-01",
    "9" * 5000,
    "0x" + "f" * 40,
    "1_000",
    "0o17",
    "0b1",
    "1e400",
    ".inf",
    ".nan",
    "~",
    "null",
    "yes",
    "no",
    "on",
    "off",
    "=",
    "<<",
    "!!bool",
    "!!int",
    "!!float",
    "!!timestamp",
    "!!binary",
    "!!set",
    "!!omap",
    "!!pairs",
    "!!str",
    "!!null",
    "!!map",
    "!!seq",
    "!custom",
    "&a",
    "*a",
    "'",
    '"',
    "|",
    ">",
]


@FUZZ
@given(
    st.lists(st.one_of(st.sampled_from(TRICKY_SCALARS), st.text(max_size=6)), min_size=1, max_size=3),
    st.sampled_from(["devices", "mig-enabled", "device-filter", "version", "mig-devices"]),
)
def test_parse_tricky_scalars_in_place(parts, field):
    """Typed YAML scalars (dates, huge ints, explicit tags) where the parser reads a value."""
    value = " ".join(parts)
    entry = {"devices": "all", "mig-enabled": "false", "mig-devices": "{}"}
    entry[field] = value
    text = (
        "version: "
        + (value if field == "version" else "v1")
        + "\nmig-configs:\n  c:\n    - "
        + "\n      ".join(f"{k}: {v}" for k, v in entry.items() if k != "version")
        + "\n"
    )
    _parse_or_none(text)


def _spellings(n: int) -> st.SearchStrategy[str]:
    """The ways YAML 1.1 (go-yaml v2) can write an integer, and some it reads as floats or strings."""
    sign = "-" if n < 0 else ""
    m = abs(n)
    return st.sampled_from(
        [
            str(n),
            f"{sign}0x{m:x}",
            f"{sign}0o{m:o}",
            f"{sign}0b{m:b}",
            f"{sign}0{m:o}",
            f"{n}.0",
            f"{n}e0",
            f"{n:_}",
            f"+{m}",
            f"{n}.5",
            f"{sign}{m}e20",
            f'"{n}"',
        ]
    )


huge_ints = st.one_of(
    st.integers(-(2**64) - 5, 2**64 + 5),
    st.integers(-(10**40), 10**40),
    st.sampled_from([2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 2**64 - 1, 2**64, 10**21, 10**20]),
)


@FUZZ
@given(huge_ints.flatmap(_spellings), st.sampled_from(["count", "device", "name", "profile-key", "version"]))
def test_parse_huge_integers_anywhere(number, place):
    """An integer of any size, in any spelling, where the parser reads a number, a name or a key: a
    verdict or MigError, never an OverflowError or a count beyond mig-parted's int64."""
    count, device, name, key = "1", "0", "c", "1g.10gb"
    if place == "count":
        count = number
    elif place == "device":
        device = number
    elif place == "name":
        name = number
    elif place == "profile-key":
        key = number
    version = number if place == "version" else "v1"
    text = (
        f"version: {version}\nmig-configs:\n  {name}:\n    - devices: [{device}]\n      mig-enabled: true\n"
        f"      mig-devices:\n        {key}: {count}\n"
    )
    cfg = _parse_or_none(text)
    if cfg is not None:
        for _, entries in cfg.configs:
            for entry in entries:
                assert all(-(2**63) <= d < 2**63 for d in entry.devices)
                assert all(0 <= item.count < 2**63 for item in entry.mig_devices)


@FUZZ
@given(
    st.lists(
        st.one_of(
            st.text(max_size=40),
            st.sampled_from(
                [
                    "---\n",
                    "apiVersion: v1\n",
                    "kind: ConfigMap\n",
                    "kind: List\n",
                    "data:\n  config.yaml: |\n",
                    "    mig-configs: {}\n",
                    "items:\n  - ",
                    "...\n",
                ]
            ),
        ),
        max_size=12,
    )
)
def test_read_any_stream(parts):
    """Whatever a file holds, reading it gives sources (problems located inside the file), never an exception."""
    text = "".join(parts)
    contents = read_file(text)
    lines = text.count("\n") + 2
    for source in contents.sources:
        assert source.config is not None or source.problems
        for p in source.problems:
            assert p.line is None or 1 <= p.line <= lines, (p, text)


@FUZZ
@given(config_docs)
def test_every_entry_is_located_on_its_first_key(doc):
    text = yaml.safe_dump(doc, sort_keys=False)
    cfg = _parse_or_none(text)
    if cfg is None:
        return
    lines = text.split("\n")
    # The configs as written, in file order: a name YAML 1.1 reads as another scalar (`Y` is true) is
    # named as mig-parted reads it ('true'), so the written entries are found by position, not by name.
    written = list(doc["mig-configs"].values())
    assert len(cfg.configs) == len(written)
    for (_name, entries), raw in zip(cfg.configs, written):
        for entry in entries:
            loc = cfg.locate(entry.path)
            assert loc is not None
            index = int(entry.path.rsplit("[", 1)[1][:-1])
            first = next(iter(raw[index]))  # the entry's first key, as dumped
            assert lines[loc.line - 1][loc.column - 1 :].startswith(first), (entry.path, loc, text)


@FUZZ
@given(json_like)
def test_parse_config_object_of_anything(doc):
    try:
        parse_config_object(doc)
    except MigError as exc:
        assert exc.problems


# --- validator ---------------------------------------------------------------------------------------


@FUZZ
@given(config_docs, st.lists(st.sampled_from(CAT.gpus), min_size=1, max_size=4), st.sampled_from((None,) + STRATEGIES))
def test_validate_never_raises(doc, node, strategy):
    config = _parse_or_none(yaml.safe_dump(doc))
    if config is None:
        return
    for report in validate(config, strategy=strategy):
        assert report.valid == (not report.errors)
        assert {g for g in report.fits if g.mig_capable} <= set(CAT.gpus)  # and GPUs without MIG a filter names
        if report.valid:
            assert report.fits, "a valid config fits some model"
        if {p.rule for p in report.errors} & ENTRY_RULES:
            assert report.fits == (), "an entry-level error holds on every model"
    for report in validate(config, node=node, strategy=strategy):
        assert len(report.gpus) == len(node)
        for result in report.gpus:
            if report.valid and result.mig_enabled:
                assert result.layout is not None
        if strategy is not None:
            advertise(report.gpus, strategy)


@FUZZ
@given(
    config_docs,
    st.lists(st.sampled_from(CAT.gpus), min_size=1, max_size=4),
    st.booleans(),
    st.sampled_from((None,) + STRATEGIES),
)
def test_fit_all_is_fit_for_each_config(doc, node, exact, strategy):
    """fit_all skips the catalogue reports that cannot change a verdict (mig.fit.needs_catalogue); fit
    never does: the verdicts agree."""
    config = _parse_or_none(yaml.safe_dump(doc))
    if config is None:
        return
    gpus = NodeGpus(tuple(node), True) if exact else NodeGpus(tuple(node[:1]), False)
    names = [n for n, _ in config.configs]
    assert [f.report for f in fit_all(config, None, gpus, strategy)] == [
        fit(config, n, gpus, strategy).report for n in names
    ]


@FUZZ
@given(json_like)
def test_validate_whatever_parses(doc):
    config = _parse_or_none(yaml.safe_dump({"version": "v1", "mig-configs": {"c": doc}}))
    if config is None:
        return
    validate(config)
    validate_on_node(config, "c", [CAT.gpus[0], CAT.gpus[-1]], "mixed")


# --- profile grammar ---------------------------------------------------------------------------------


@FUZZ
@given(st.text(max_size=30))
def test_parse_profile_arbitrary_text(text):
    try:
        profile = parse_profile(text)
    except ProfileSyntaxError:
        return
    # anything accepted round-trips through its canonical form
    assert parse_profile(str(profile)) == profile


@FUZZ
@given(st.text(alphabet="0123456789cgb.+-,meal x", max_size=20))
def test_parse_profile_near_miss_text(text):
    try:
        profile = parse_profile(text)
    except ProfileSyntaxError:
        return
    assert parse_profile(str(profile)) == profile
    assert profile.gpu >= 0 and profile.compute >= 0 and profile.memory_gb >= 0


@FUZZ
@given(scalars)
def test_parse_profile_arbitrary_values(value):
    try:
        parse_profile(value)
    except ProfileSyntaxError:
        pass


@FUZZ
@given(
    config_docs.map(
        lambda doc: {
            **doc,
            "mig-configs": {
                name: [{**e, "devices": "all"} for e in entries] for name, entries in doc["mig-configs"].items()
            },
        }
    ),
    st.sampled_from((None,) + STRATEGIES),
)
def test_catalogue_mode_agrees_with_node_mode(doc, strategy):
    """With `devices: all` everywhere, catalogue mode's `fits` is exactly the set of models on which a
    one-GPU node validates."""
    config = _parse_or_none(yaml.safe_dump(doc))
    if config is None:
        return
    for report in validate(config, strategy=strategy):
        on_node = {g.device_id for g in CAT.gpus if validate_on_node(config, report.name, [g], strategy).valid}
        assert {g.device_id for g in report.fits if g.mig_capable} == on_node, report.problems
        # GPUs that cannot do MIG are models too where a filter names them
        for g in report.fits:
            if not g.mig_capable:
                assert validate_on_node(config, report.name, [g], strategy).valid

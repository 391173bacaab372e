"""The validator: NVIDIA's default config against every model, strategies, and the checks mig-parted skips.

Expected results are built here from the reference tables (mig-hardware.md 4.7 and 4.8), not from
the catalogue, so a wrong catalogue row or a wrong validator rule shows up as a mismatch.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from migops.mig.catalogue import catalogue
from migops.mig.spec import parse_config
from migops.mig.validate import validate, validate_on_node

CAT = catalogue()
ROOT = Path(__file__).resolve().parents[2]
DEFAULT = parse_config((ROOT / "examples" / "nvidia-default-config.yaml").read_text())


def gpu(device_id: str):
    found = CAT.by_device_id(device_id)
    assert found is not None, device_id
    return found


H100 = gpu("0x233010DE")
A100_40 = gpu("0x20B010DE")
A100_80 = gpu("0x20B210DE")
A30 = gpu("0x20B710DE")
GB200 = gpu("0x294110DE")
RTX = gpu("0x2BB510DE")

# --- device-ID groups of the default config --------------------------------------------------------

IDS_A100_40 = {"0x20B010DE", "0x20B110DE", "0x20F110DE", "0x20F610DE"}
IDS_80 = {
    "0x233010DE",
    "0x233110DE",
    "0x232210DE",
    "0x232410DE",
    "0x20B210DE",
    "0x20B510DE",
    "0x20F310DE",
    "0x20F510DE",
}
IDS_A30 = {"0x20B710DE"}
IDS_NVL = {"0x232110DE", "0x233A10DE"}
IDS_96 = {"0x234210DE", "0x233D10DE", "0x20B610DE", "0x232910DE"}
IDS_H200 = {"0x233510DE", "0x233B10DE"}
IDS_GH200_144 = {"0x234810DE"}
IDS_B200 = {"0x290110DE"}
IDS_GB200 = {"0x294110DE"}
IDS_B300 = {"0x318210DE"}
IDS_GB300 = {"0x31C210DE"}
IDS_RTX = {"0x2BB510DE"}
ALL_DEFAULT_IDS = (
    IDS_A100_40
    | IDS_80
    | IDS_A30
    | IDS_NVL
    | IDS_96
    | IDS_H200
    | IDS_GH200_144
    | IDS_B200
    | IDS_GB200
    | IDS_B300
    | IDS_GB300
    | IDS_RTX
)

# --- named configs per model row, and which profile table each row is ------------------------------

ROWS = {
    # row: (profile table id, single-profile configs without a filter)
    "A100-40GB": (
        "a100-40gb",
        ["all-1g.5gb", "all-1g.5gb.me", "all-2g.10gb", "all-3g.20gb", "all-4g.20gb", "all-7g.40gb"],
    ),
    "A100-80/H100-80": (
        "a100-80gb h100-80gb",
        ["all-1g.10gb.me", "all-1g.20gb", "all-2g.20gb", "all-3g.40gb", "all-4g.40gb", "all-7g.80gb"],
    ),
    "A30": ("a30-24gb", ["all-1g.6gb", "all-1g.6gb.me", "all-2g.12gb", "all-2g.12gb.me", "all-4g.24gb"]),
    # all-1g.24gb.me sits under the H100 NVL comment in the file, but H100 NVL has no 1g.24gb+me
    # profile (4.5): it is RTX PRO 6000's config, handled below.
    "H100 NVL": (
        "h100-94gb",
        ["all-1g.12gb", "all-1g.12gb.me", "all-1g.24gb", "all-2g.24gb", "all-3g.47gb", "all-4g.47gb", "all-7g.94gb"],
    ),
    # PG506-232 (GA100) shares the names in the default config but has its own table (Ampere SMs/engines).
    "H100-96": (
        "h100-96gb pg506-96gb",
        ["all-1g.12gb", "all-1g.12gb.me", "all-1g.24gb", "all-2g.24gb", "all-3g.48gb", "all-4g.48gb", "all-7g.96gb"],
    ),
    "H200": (
        "h200-141gb",
        ["all-1g.18gb", "all-1g.18gb.me", "all-2g.35gb", "all-3g.71gb", "all-4g.71gb", "all-7g.141gb"],
    ),
    "GH200 144G": (
        "gh200-144gb",
        ["all-1g.18gb", "all-1g.18gb.me", "all-1g.36gb", "all-2g.36gb", "all-3g.72gb", "all-4g.72gb", "all-7g.144gb"],
    ),
    "B200": (
        "b200-180gb",
        ["all-1g.23gb", "all-1g.23gb.me", "all-1g.45gb", "all-2g.45gb", "all-3g.90gb", "all-4g.90gb", "all-7g.180gb"],
    ),
    # GB200: the (no model comment) configs all-3g.95gb, all-4g.95gb, all-7g.189gb and all-1g.24gb,
    # all-1g.24gb.me use the early-driver names of its profiles (aliases, with a drift warning).
    "GB200": (
        "gb200-186gb",
        [
            "all-1g.23gb",
            "all-1g.23gb.me",
            "all-1g.47gb",
            "all-2g.47gb",
            "all-3g.93gb",
            "all-4g.93gb",
            "all-7g.186gb",
            "all-1g.24gb",
            "all-1g.24gb.me",
            "all-3g.95gb",
            "all-4g.95gb",
            "all-7g.189gb",
        ],
    ),
    "B300": (
        "b300-269gb",
        ["all-1g.34gb", "all-1g.34gb.me", "all-1g.67gb", "all-2g.67gb", "all-3g.135gb", "all-4g.135gb", "all-7g.269gb"],
    ),
    "GB300": (
        "gb300-278gb",
        ["all-1g.35gb.me", "all-1g.70gb", "all-2g.70gb", "all-3g.139gb", "all-4g.139gb", "all-7g.278gb"],
    ),
    "RTX PRO 6000": (
        "rtx-pro-6000-96gb",
        [
            "all-1g.24gb",
            "all-1g.24gb.gfx",
            "all-1g.24gb.me",
            "all-1g.24gb.me.all",
            "all-1g.24gb-me",
            "all-2g.48gb",
            "all-2g.48gb.gfx",
            "all-2g.48gb.me.all",
            "all-2g.48gb-me",
            "all-4g.96gb",
            "all-4g.96gb.gfx",
        ],
    ),
}

# Filtered configs: valid exactly on the device IDs their filters name.
FILTERED = {
    "all-1g.10gb": IDS_80 | IDS_A100_40,
    "all-1g.35gb": {"0x233510DE", "0x31C210DE"},  # H200 SXM only (not H200 NVL 0x233B), and GB300
    "all-balanced": ALL_DEFAULT_IDS,
}
DRIFT = {
    "all-1g.24gb": {"0x294110DE"},
    "all-1g.24gb.me": {"0x294110DE"},
    "all-3g.95gb": {"0x294110DE"},
    "all-4g.95gb": {"0x294110DE"},
    "all-7g.189gb": {"0x294110DE"},
}


def expected_ids(name: str) -> set[str]:
    if name in ("all-disabled", "all-enabled"):
        return {g.device_id for g in CAT.gpus}
    if name in FILTERED:
        return FILTERED[name]
    tables = {t for table_ids, names in ROWS.values() if name in names for t in table_ids.split()}
    assert tables, f"{name} is in no row of ROWS"
    return {g.device_id for g in CAT.gpus if g.table.id in tables}


def test_default_config_has_81_configs_and_every_name_is_expected():
    assert len(DEFAULT.names()) == 81
    listed = {n for _, names in ROWS.values() for n in names} | set(FILTERED) | {"all-disabled", "all-enabled"}
    assert listed == set(DEFAULT.names())


@pytest.mark.parametrize("name", DEFAULT.names())
def test_default_config_on_every_gpu(name):
    expected = expected_ids(name)
    got = set()
    for model in CAT.gpus:
        report = validate_on_node(DEFAULT, name, [model])
        if report.valid:
            got.add(model.device_id)
            drift = [p for p in report.problems if p.rule == "profile-name-drift"]
            assert bool(drift) == (model.device_id in DRIFT.get(name, ())), (model.name, report.problems)
            assert all(p.severity == "warning" for p in report.problems)
            assert all(p.rule == "profile-name-drift" for p in report.problems), report.problems
        else:
            assert report.errors
    assert got == expected, f"unexpected: {sorted(got - expected)}; missing: {sorted(expected - got)}"


def test_default_config_catalogue_mode_all_valid():
    reports = validate(DEFAULT)
    assert [r.name for r in reports] == list(DEFAULT.names())
    invalid = [(r.name, r.errors) for r in reports if not r.valid]
    assert invalid == []
    fits = {r.name: {g.device_id for g in r.fits} for r in reports}
    for name in DEFAULT.names():
        assert fits[name] == expected_ids(name), name


def test_all_1g_35gb_misses_h200_nvl():
    report = validate_on_node(DEFAULT, "all-1g.35gb", [gpu("0x233B10DE")])
    assert [p.rule for p in report.errors] == ["gpu-not-covered"]
    on_gb300 = validate_on_node(DEFAULT, "all-1g.35gb", [gpu("0x31C210DE")])
    assert on_gb300.valid and len(on_gb300.gpus[0].mig_devices) == 7
    on_h200 = validate_on_node(DEFAULT, "all-1g.35gb", [gpu("0x233510DE")])
    assert on_h200.valid and len(on_h200.gpus[0].mig_devices) == 4


def test_all_1g_10gb_count_per_model():
    assert len(validate_on_node(DEFAULT, "all-1g.10gb", [A100_40]).gpus[0].mig_devices) == 4
    assert len(validate_on_node(DEFAULT, "all-1g.10gb", [H100]).gpus[0].mig_devices) == 7


def test_heterogeneous_node_with_filtered_config():
    report = validate_on_node(DEFAULT, "all-balanced", [H100, A100_40, A30, RTX])
    assert report.valid, report.problems
    assert [len(r.mig_devices) for r in report.gpus] == [4, 4, 3, 3]


# --- helpers for small configs -----------------------------------------------------------------------


def cfg(*entries, name: str = "c"):
    return parse_config(json.dumps({"version": "v1", "mig-configs": {name: list(entries)}}))


def enabled(mig_devices: dict, **extra):
    entry = {"devices": extra.pop("devices", "all"), "mig-enabled": True, "mig-devices": mig_devices}
    entry.update({k.replace("_", "-"): v for k, v in extra.items()})
    return entry


def disabled(devices="all"):
    return {"devices": devices, "mig-enabled": False}


def rules(report, severity: str | None = None) -> list[str]:
    return [p.rule for p in report.problems if severity is None or p.severity == severity]


def on(node, *entries, strategy=None, name="c"):
    return validate_on_node(cfg(*entries, name=name), name, node, strategy)


# --- strategies --------------------------------------------------------------------------------------


def test_all_balanced_single_vs_mixed():
    single = validate_on_node(DEFAULT, "all-balanced", [H100], "single")
    assert not single.valid and rules(single, "error") == ["strategy-mismatch"]
    assert "more than one MIG device type" in single.errors[0].message
    mixed = validate_on_node(DEFAULT, "all-balanced", [H100], "mixed")
    assert mixed.valid and mixed.problems == ()


def test_single_profile_valid_under_single():
    report = validate_on_node(DEFAULT, "all-1g.10gb", [H100, H100], "single")
    assert report.valid and report.problems == ()


def test_single_rejects_enabled_and_disabled_gpus_mixed():
    report = on([H100, H100], enabled({"1g.10gb": 7}, devices=[0]), disabled([1]), strategy="single")
    assert rules(report, "error") == ["strategy-mismatch"]
    assert "mixed" in report.errors[0].message
    assert on([H100, H100], enabled({"1g.10gb": 7}, devices=[0]), disabled([1]), strategy="mixed").valid


def test_single_rejects_enabled_gpu_without_devices():
    report = validate_on_node(DEFAULT, "all-enabled", [H100], "single")
    assert rules(report, "error") == ["strategy-mismatch"]
    mixed = validate_on_node(DEFAULT, "all-enabled", [H100], "mixed")
    assert mixed.valid and rules(mixed) == ["no-mig-devices"]


@pytest.mark.parametrize("config_name", ["all-1g.10gb", "all-balanced", "all-7g.80gb"])
def test_none_strategy_rejects_mig_devices(config_name):
    report = validate_on_node(DEFAULT, config_name, [H100], "none")
    assert rules(report, "error") == ["strategy-mismatch"]


@pytest.mark.parametrize("config_name", ["all-disabled", "all-enabled"])
def test_none_strategy_fine_without_mig_devices(config_name):
    assert validate_on_node(DEFAULT, config_name, [H100], "none").valid


def test_all_disabled_valid_under_every_strategy():
    for strategy in ("none", "single", "mixed"):
        assert validate_on_node(DEFAULT, "all-disabled", [H100, A30], strategy).valid


# --- device selection --------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["0xZZZ", "MODEL", "0x2330 10DE", [""], "+0x233010DE"])
def test_device_filter_syntax(text):
    report = on([H100], enabled({"1g.10gb": 7}, device_filter=text))
    assert "device-filter-syntax" in rules(report, "error")
    assert next(p for p in report.problems if p.rule == "device-filter-syntax").path == "mig-configs.c[0].device-filter"


def test_device_filter_list_item_path():
    report = on([H100], enabled({"1g.10gb": 7}, device_filter=["0x233010DE", "0xZZZ"]))
    (p,) = [p for p in report.problems if p.rule == "device-filter-syntax"]
    assert p.path == "mig-configs.c[0].device-filter[1]"
    assert report.valid is False


def test_device_filter_unknown_is_a_gpu_without_mig():
    """An ID migops does not know is taken as a GPU that cannot do MIG: a warning (a typo is likely)."""
    report = on([H100], enabled({"1g.10gb": 7}, device_filter="0x123410DE"), disabled())
    assert report.valid and rules(report) == ["device-filter-unknown"]
    assert "cannot do MIG" in report.problems[0].message
    # the typo'd filter then selects nothing: the H100 is left uncovered
    assert rules(on([H100], enabled({"1g.10gb": 7}, device_filter="0x23301DE")), "error") == ["gpu-not-covered"]


def test_device_filter_with_subsystem():
    # the node's GPU is known by its primary ID only: a filter with a subsystem part naming that model
    # selects it, and its geometry is checked
    assert on([H100], enabled({"1g.10gb": 7}, device_filter="0x233010DE:0x16C110DE")).valid
    report = on([H100], enabled({"1g.10gb": 9}, device_filter="0x233010DE:0x16C110DE"))
    assert rules(report, "error") == ["count-exceeds-max"]
    assert rules(on([H100], enabled({"1g.10gb": 7}, device_filter="0x233110DE:0x16C110DE")), "error") == [
        "gpu-not-covered"
    ]


def test_catalogue_mode_device_filter_with_subsystem():
    (report,) = validate(cfg(enabled({"1g.10gb": 9}, device_filter="0x233010DE:0x16C110DE")))
    assert not report.valid and rules(report, "error") == ["count-exceeds-max"] and report.fits == ()
    (report,) = validate(cfg(enabled({"1g.10gb": 7}, device_filter="0x233010DE:0x16C110DE")))
    assert report.valid and [g.device_id for g in report.fits] == ["0x233010DE"]


def test_device_filter_decimal_and_lowercase():
    assert on([H100], enabled({"1g.10gb": 7}, device_filter="0x233010de")).valid
    assert on([H100], enabled({"1g.10gb": 7}, device_filter=str(0x233010DE))).valid


def test_duplicate_index():
    report = on([H100, H100], enabled({"1g.10gb": 7}, devices=[0, 1, 0]))
    (p,) = report.errors
    assert (p.rule, p.path) == ("duplicate-device-index", "mig-configs.c[0].devices[2]")


def test_negative_index():
    report = on([H100], enabled({"1g.10gb": 7}, devices=[0, -1]))
    (p,) = report.errors
    assert (p.rule, p.path) == ("negative-device-index", "mig-configs.c[0].devices[1]")


def test_index_out_of_range_is_a_warning():
    report = on([H100], enabled({"1g.10gb": 7}, devices=[0, 3]))
    assert report.valid and rules(report) == ["device-index-out-of-range"]


def test_empty_device_list_is_a_warning_but_leaves_gpu_uncovered():
    report = on([H100], enabled({"1g.10gb": 7}, devices=[]), disabled())
    assert report.valid and rules(report) == ["no-devices"]


def test_overlapping_entries_with_different_geometry():
    report = on([H100], enabled({"1g.10gb": 7}), enabled({"3g.40gb": 2}))
    (p,) = report.errors
    assert (p.rule, p.path) == ("overlapping-entries", "mig-configs.c[1]")
    assert "mig-configs.c[0]" in p.message


def test_overlapping_entries_enabled_then_disabled():
    report = on([H100], enabled({"1g.10gb": 7}), disabled())
    assert rules(report, "error") == ["overlapping-entries"]


def test_overlapping_entries_identical_is_a_warning():
    report = on([H100], enabled({"1g.10gb": 7}), enabled({"1g.10gb": 7}, devices=[0]))
    assert report.valid and rules(report) == ["overlapping-entries"]
    assert report.problems[0].severity == "warning"


def test_last_entry_wins():
    report = on([H100], enabled({"1g.10gb": 7}), enabled({"3g.40gb": 2}))
    assert report.gpus[0].entry == "mig-configs.c[1]"
    assert report.gpus[0].mig_devices == ("3g.40gb", "3g.40gb")


def test_gpu_not_covered():
    report = on([H100, H100], enabled({"1g.10gb": 7}, devices=[0]))
    (p,) = report.errors
    assert (p.rule, p.path) == ("gpu-not-covered", "mig-configs.c")
    assert "GPU 1" in p.message
    assert report.gpus[1].entry is None and report.gpus[1].mig_enabled is None


def test_gpu_not_covered_by_filter_on_mixed_node():
    report = on([H100, A30], enabled({"1g.10gb": 7}, device_filter="0x233010DE"))
    assert rules(report, "error") == ["gpu-not-covered"]
    assert "A30" in report.errors[0].message


# --- profiles ----------------------------------------------------------------------------------------


def test_name_drift_on_a100_80():
    report = on([A100_80], enabled({"7g.79gb": 1}))
    assert report.valid and rules(report) == ["profile-name-drift"]
    assert "7g.80gb" in report.problems[0].message
    assert report.problems[0].path == 'mig-configs.c[0].mig-devices."7g.79gb"'
    # on H100-80GB the same name is simply unknown
    assert rules(on([H100], enabled({"7g.79gb": 1})), "error") == ["unknown-profile"]


def test_unknown_profile_suggests_same_g():
    report = on([H100], enabled({"4g.20gb": 1}))
    (p,) = report.errors
    assert (p.rule, p.path) == ("unknown-profile", 'mig-configs.c[0].mig-devices."4g.20gb"')
    assert "did you mean '4g.40gb'" in p.message
    assert "A100-SXM4-40GB" in p.message  # where 4g.20gb does exist


def test_unknown_profile_hint_names_nearest():
    (p,) = on([H100], enabled({"7g.81gb": 1})).errors
    assert p.rule == "unknown-profile" and "did you mean '7g.80gb'" in p.message
    (p,) = on([A30], enabled({"1g.10gb": 1})).errors
    assert p.rule == "unknown-profile" and "did you mean '1g.6gb'" in p.message


def test_unknown_attribute():
    (p,) = on([H100], enabled({"1g.10gb+gfx": 1})).errors
    assert p.rule == "unknown-profile"
    assert on([RTX], enabled({"1g.24gb+gfx": 4})).valid


def test_count_exceeds_max():
    report = on([H100], enabled({"1g.10gb": 8}))
    (p,) = report.errors
    assert (p.rule, p.path) == ("count-exceeds-max", 'mig-configs.c[0].mig-devices."1g.10gb"')
    assert "at most 7" in p.message
    assert on([H100], enabled({"1g.10gb": 7})).valid
    assert rules(on([A100_40], enabled({"1g.10gb": 5})), "error") == ["count-exceeds-max"]
    assert on([A100_40], enabled({"1g.10gb": 4})).valid


def test_me_profile_count():
    assert "count-exceeds-max" in rules(on([H100], enabled({"1g.10gb+me": 2})), "error")


def test_media_extensions_once_by_the_engine_budget():
    """One mechanism: a GPU has one OFA and each +me instance takes it."""
    report = on([A30], enabled({"1g.6gb+me": 1, "2g.12gb+me": 1}))
    (p,) = report.errors
    assert (p.rule, p.path) == ("engine-budget", "mig-configs.c[0].mig-devices")
    assert p.message.startswith(
        "on A30: the instances need 2 JPEG decoders and 2 OFAs; the GPU has 1 of each "
        "(1 x 1g.6gb+me takes 1 of each, 1 x 2g.12gb+me takes 1 of each)"
    )
    assert "at most one +me instance fits" in p.message
    assert on([A30], enabled({"1g.6gb+me": 1, "2g.12gb": 1})).valid
    assert rules(on([RTX], enabled({"1g.24gb+me": 1, "2g.48gb+me.all": 1})), "error") == ["engine-budget"]
    # -me (no media engines) does not count
    assert on([RTX], enabled({"1g.24gb+me": 1, "1g.24gb-me": 2})).valid


@pytest.mark.parametrize("beside", ["1g.24gb", "1g.24gb+gfx", "1g.24gb+me", "2g.48gb", "2g.48gb+gfx"])
def test_rtx_pro_6000_me_all_takes_every_media_engine(beside):
    """+me.all takes the GPU's 4 decoders, 4 encoders, 4 JPEG and its OFA; plain, +gfx and +me instances each
    need a decoder, so only -me instances fit beside it (MIG User Guide, RTX PRO 6000 table)."""
    report = on([RTX], enabled({"1g.24gb+me.all": 1, beside: 1}))
    (p,) = report.errors
    assert p.rule == "engine-budget"
    assert "the instances need 5 decoders" in p.message or "the instances need 6 decoders" in p.message
    assert "(1 x 1g.24gb+me.all takes 4" in p.message
    assert "only -me instances fit beside it" in p.message
    assert report.gpus[0].layout is None


def test_rtx_pro_6000_me_all_beside_me_less_instances():
    assert on([RTX], enabled({"1g.24gb+me.all": 1, "1g.24gb-me": 3})).valid
    assert on([RTX], enabled({"2g.48gb+me.all": 1, "2g.48gb-me": 1})).valid
    assert on([RTX], enabled({"1g.24gb+me.all": 1, "1g.24gb-me": 1, "2g.48gb-me": 1})).valid
    assert on([RTX], enabled({"1g.24gb": 4})).valid  # 4 decoders: exactly the GPU's
    (report,) = validate(cfg(enabled({"1g.24gb+me.all": 1, "1g.24gb": 1}), name="c"))
    assert not report.valid and report.fits == ()


def test_engine_budget_is_checked_after_placement():
    """A geometry that does not fit is reported as such, not as an engine shortage it also has."""
    report = on([H100], enabled({"3g.40gb": 1, "4g.40gb": 1, "1g.10gb": 1}))
    assert rules(report, "error") == ["placement-infeasible"]


@pytest.mark.parametrize(
    "node,devices",
    [
        ([H100], {"3g.40gb": 2, "1g.10gb": 1}),
        ([A100_40], {"4g.20gb": 1, "2g.10gb": 2}),
        ([A100_40], {"2g.10gb": 3, "1g.5gb": 2}),  # memory 8 fits, compute 8 does not
        ([A100_40], {"4g.20gb": 1, "3g.20gb": 1, "1g.5gb": 1}),
        ([H100], {"4g.40gb": 1, "1g.20gb": 2, "1g.10gb": 1}),
        ([H100], {"7g.80gb": 1, "1g.10gb": 1}),
        ([A30], {"2g.12gb": 1, "1g.6gb": 2, "1g.6gb+me": 1}),
        ([RTX], {"2g.48gb": 1, "1g.24gb": 3}),
    ],
)
def test_placement_infeasible(node, devices):
    report = on(node, enabled(devices))
    (p,) = report.errors
    assert (p.rule, p.path) == ("placement-infeasible", "mig-configs.c[0].mig-devices")
    assert report.gpus[0].layout is None


def test_placement_at_the_limits():
    # every memory slice used; the 1g.20gb must take the only start left (6)
    report = on([H100], enabled({"2g.20gb": 3, "1g.20gb": 1}))
    assert report.valid and ("1g.20gb", 6) in [(p.profile, p.start) for p in report.gpus[0].layout]
    report = on([H100], enabled({"3g.40gb": 1, "2g.20gb": 1, "1g.20gb": 1}))
    assert report.valid
    report = on([H100], enabled({"4g.40gb": 1, "2g.20gb": 1, "1g.20gb": 1}))
    assert report.valid  # 4g@0, 2g@4, 1g.20gb@6


@pytest.mark.parametrize(
    "node,devices,n_gis",
    [
        ([A100_40], {"4g.20gb": 1, "3g.20gb": 1}, 2),
        ([A100_40], {"3g.20gb": 1, "2g.10gb": 1, "1g.5gb": 2}, 4),
        ([A100_40], {"1g.5gb": 7}, 7),
        ([A30], {"2g.12gb": 1, "1g.6gb": 1, "1g.6gb+me": 1}, 3),
        ([RTX], {"2g.48gb": 1, "1g.24gb": 1, "1g.24gb+me": 1}, 3),
    ],
)
def test_placement_feasible(node, devices, n_gis):
    report = on(node, enabled(devices))
    assert report.valid, report.problems
    layout = report.gpus[0].layout
    assert len(layout) == n_gis
    masks = [p.mask for p in layout]
    assert sum(masks) == _or(masks)  # disjoint


def _or(masks):
    out = 0
    for m in masks:
        out |= m
    return out


def test_compute_instance_profiles_share_one_gi():
    report = on([A100_40], enabled({"1c.3g.20gb": 3}))
    assert report.valid
    (gi,) = report.gpus[0].layout
    assert gi.profile == "3g.20gb"
    assert report.gpus[0].mig_devices == ("1c.3g.20gb",) * 3
    # 4 x 1c need a second 3g GI; 2 x 3g on 8 memory slices still fits
    report = on([A100_40], enabled({"1c.3g.20gb": 4}))
    assert report.valid and [p.profile for p in report.gpus[0].layout] == ["3g.20gb", "3g.20gb"]
    # 7 x 1c need three 3g GIs: more than the max of 2
    assert rules(on([A100_40], enabled({"1c.3g.20gb": 7})), "error") == ["count-exceeds-max"]


def test_mixed_ci_sizes_in_one_gi():
    report = on([A100_40], enabled({"2c.3g.20gb": 1, "1c.3g.20gb": 1}))
    assert report.valid and len(report.gpus[0].layout) == 1


@pytest.mark.parametrize("profile", ["5c.7g.40gb", "6c.7g.40gb", "3c.4g.20gb", "4c.3g.20gb"])
def test_invalid_compute_instance(profile):
    report = on([A100_40], enabled({profile: 1}))
    (p,) = report.errors
    assert (p.rule, p.path) == ("invalid-compute-instance", f'mig-configs.c[0].mig-devices."{profile}"')


def test_zero_count_warning():
    report = on([A100_40], enabled({"1g.5gb": 0, "2g.10gb": 1}))
    assert report.valid and rules(report) == ["zero-count"]
    assert report.problems[0].path == 'mig-configs.c[0].mig-devices."1g.5gb"'
    assert report.gpus[0].mig_devices == ("2g.10gb",)


@pytest.mark.parametrize("name", ["Bad Name!", "-leading", "trailing-", "x" * 64, "a+b"])
def test_config_name_not_a_label_value(name):
    report = on([A100_40], enabled({"1g.5gb": 1}), name=name)
    assert report.valid and rules(report) == ["config-name-not-label"]


@pytest.mark.parametrize("name", ["all-1g.10gb", "x" * 63, "A_b.c-9"])
def test_config_name_label_value_ok(name):
    assert on([A100_40], enabled({"1g.5gb": 1}), name=name).problems == ()


# --- catalogue mode ----------------------------------------------------------------------------------


def test_catalogue_mode_profile_that_exists_nowhere():
    (report,) = validate(cfg(enabled({"9g.99gb": 1})))
    assert not report.valid and report.fits == ()
    assert "fits-no-gpu" in rules(report, "error")
    assert "unknown-profile" in rules(report, "error")


def test_catalogue_mode_unfiltered_fits_some_models():
    (report,) = validate(cfg(enabled({"1g.10gb": 7})))
    assert report.valid
    assert {g.table.id for g in report.fits} == {"a100-80gb", "h100-80gb"}


def test_catalogue_mode_filtered_entry_pinned_problem():
    # the filter names A100-40GB, where 1g.10gb has max 4: an error even though other models fit 7
    (report,) = validate(cfg(enabled({"1g.10gb": 7}, device_filter="0x20B010DE")))
    assert not report.valid and rules(report, "error") == ["count-exceeds-max"]


def test_catalogue_mode_fits_lists_models_where_it_is_valid():
    # one filtered entry broken on A100-40GB, one fine on H100: invalid overall, fits H100 only
    (report,) = validate(
        cfg(enabled({"1g.10gb": 7}, device_filter="0x20B010DE"), enabled({"1g.10gb": 7}, device_filter="0x233010DE"))
    )
    assert not report.valid and rules(report, "error") == ["count-exceeds-max"]
    assert "A100-SXM4-40GB" in report.errors[0].message
    assert [g.device_id for g in report.fits] == ["0x233010DE"]


def test_catalogue_mode_drift_warning_shown():
    (report,) = validate(DEFAULT, names=["all-7g.189gb"])
    assert report.valid and rules(report) == ["profile-name-drift"]
    assert [g.name for g in report.fits] == ["GB200"]


def test_catalogue_mode_overlap_with_index_lists():
    (report,) = validate(cfg(enabled({"1g.10gb": 7}, devices=[0, 1]), enabled({"3g.40gb": 2}, devices=[1])))
    assert not report.valid and "overlapping-entries" in rules(report, "error")


def test_catalogue_mode_strategy_on_filtered_config():
    # all-balanced is filtered on every entry; under `single` it is invalid on every model it names
    (report,) = validate(DEFAULT, names=["all-balanced"], strategy="single")
    assert not report.valid and report.fits == ()
    assert set(rules(report, "error")) == {"strategy-mismatch"}
    (report,) = validate(DEFAULT, names=["all-balanced"], strategy="mixed")
    assert report.valid and len(report.fits) == len(FILTERED["all-balanced"])
    (report,) = validate(DEFAULT, names=["all-1g.10gb"], strategy="single")
    assert report.valid


def test_catalogue_mode_strategy_whole_default_config():
    single = {r.name for r in validate(DEFAULT, strategy="single") if not r.valid}
    assert single == {"all-balanced", "all-enabled"}
    assert all(r.valid for r in validate(DEFAULT, strategy="mixed"))
    none = {r.name for r in validate(DEFAULT, strategy="none") if not r.valid}
    assert none == set(DEFAULT.names()) - {"all-disabled", "all-enabled"}


def test_catalogue_mode_entry_error_fits_nothing():
    (report,) = validate(cfg(disabled(), {"devices": "all", "mig-enabled": False, "device-filter": "0xZZZ"}))
    assert not report.valid and rules(report, "error") == ["device-filter-syntax"]
    assert report.fits == ()
    (report,) = validate(cfg(enabled({"1g.10gb": 7}, devices=[0, 0])))
    assert rules(report, "error") == ["duplicate-device-index"] and report.fits == ()


def test_validate_with_node_and_names():
    reports = validate(DEFAULT, names=["all-1g.10gb", "all-1g.5gb"], node=[H100])
    assert [(r.name, r.valid) for r in reports] == [("all-1g.10gb", True), ("all-1g.5gb", False)]


def test_report_as_dict():
    report = validate_on_node(DEFAULT, "all-balanced", [H100])
    d = report.gpus[0].as_dict()
    assert d["device_id"] == "0x233010DE" and d["mig_enabled"] is True
    assert sorted((i["profile"], i["start"]) for i in d["instances"]) == [
        ("1g.10gb", 0),
        ("1g.10gb", 1),
        ("2g.20gb", 2),
        ("3g.40gb", 4),
    ]
    assert sorted(d["mig_devices"]) == ["1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"]


# --- GPUs that cannot do MIG -----------------------------------------------------------------------

# A DGX Station A100 (80 GB): four A100-SXM4-80GB and a display GPU (0x1FB010DE) that cannot do MIG. Written
# here after the station's public description and mig-parted's rule that its assert wants every GPU of the
# node matched by an entry, the display GPU included (one with mig-enabled: false).
DGX_STATION = """
version: v1
mig-configs:
  station-mig-off:
    - device-filter: "0x20B210DE"
      devices: all
      mig-enabled: false
    - device-filter: "0x1FB010DE"
      devices: all
      mig-enabled: false
      mig-devices: {}
  station-7x1g:
    - device-filter: ["0x20B210DE"]
      devices: all
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}
    - device-filter: "0x1FB010DE"
      devices: all
      mig-enabled: false
  station-split:
    - device-filter: "0x20B210DE"
      devices: [0, 1]
      mig-enabled: true
      mig-devices: {"3g.40gb": 2}
    - device-filter: "0x20B210DE"
      devices: [2, 3]
      mig-enabled: true
      mig-devices: {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}
    - device-filter: "0x1FB010DE"
      devices: all
      mig-enabled: false
"""
DISPLAY = CAT.resolve("0x1FB010DE")
STATION = [A100_80] * 4 + [DISPLAY]


def test_dgx_station_a100_config_on_its_five_gpus():
    config = parse_config(DGX_STATION)
    for strategy in (None, "mixed"):
        for report in validate(config, node=STATION, strategy=strategy):
            assert report.valid and report.problems == (), (report.name, report.problems)
            assert report.gpus[4].mig_enabled is False and report.gpus[4].gpu is DISPLAY
    (split,) = validate(config, ["station-split"], node=STATION)
    assert [len(g.mig_devices) for g in split.gpus] == [2, 2, 4, 4, 0]


def test_dgx_station_a100_config_against_the_catalogue():
    reports = validate(parse_config(DGX_STATION))
    assert all(r.valid and r.problems == () for r in reports), [r.problems for r in reports]
    assert [g.device_id for g in reports[0].fits] == ["0x20B210DE", "0x1FB010DE"]


def test_mig_enabled_on_a_gpu_that_cannot_do_mig():
    report = on([A100_80, DISPLAY], enabled({"1g.10gb": 7}))
    (p,) = report.errors
    assert (p.rule, p.path) == ("mig-not-capable", "mig-configs.c[0].mig-enabled")
    assert "GPU 1, which cannot do MIG (DGX-Display (0x1FB010DE, not MIG-capable))" in p.message
    # catalogue mode: a filter naming it with mig-enabled: true is the same error
    (report,) = validate(cfg(enabled({"1g.10gb": 7}, device_filter=["0x20B210DE", "0x1FB010DE"])))
    assert rules(report, "error") == ["mig-not-capable"] and report.fits == (A100_80,)


def test_display_gpu_must_be_covered_too():
    """mig-parted's assert counts every GPU, so an entry must select the display GPU as well."""
    report = on(STATION, enabled({"1g.10gb": 7}, device_filter="0x20B210DE"))
    (p,) = report.errors
    assert p.rule == "gpu-not-covered" and "GPU 4 (DGX-Display (0x1FB010DE, not MIG-capable))" in p.message


def test_unknown_gpu_on_the_node():
    unknown = CAT.resolve("0x123410DE")
    assert on([H100, unknown], enabled({"1g.10gb": 7}, device_filter="0x233010DE"), disabled([1])).valid
    report = on([unknown], enabled({"1g.10gb": 7}))
    assert rules(report, "error") == ["mig-not-capable"] and "unknown" in report.errors[0].message


def test_single_strategy_counts_a_gpu_without_mig_as_a_whole_gpu():
    report = validate_on_node(parse_config(DGX_STATION), "station-7x1g", STATION, "single")
    assert rules(report, "error") == ["strategy-mismatch"] and "mixed on one node" in report.errors[0].message
    assert validate_on_node(parse_config(DGX_STATION), "station-mig-off", STATION, "single").valid


def test_cli_accepts_the_dgx_station_config_with_all_five_gpus(tmp_path, capsys):
    from migops.cli import main

    path = tmp_path / "dgx-station.yaml"
    path.write_text(DGX_STATION)
    gpus = [arg for gpu_id in ["0x20B210DE"] * 4 + ["0x1FB010DE"] for arg in ("--gpu", gpu_id)]
    assert main(["validate", str(path), *gpus]) == 0
    out = capsys.readouterr().out
    assert "3 valid, 0 invalid" in out and "DGX-Display (0x1FB010DE, not MIG-capable)" in out
    assert main(["validate", str(path)]) == 0


# --- repeated findings merge into one line ---------------------------------------------------------


def test_missing_indices_are_one_warning():
    report = on([H100], enabled({"1g.10gb": 7}, devices=[0, 1, 2, 3, 4, 5, 6, 7]))
    (p,) = report.problems
    assert p.rule == "device-index-out-of-range"
    assert p.message.startswith("GPU indices 1-7 do not exist on a node with 1 GPU(s)")
    (p,) = on([H100], enabled({"1g.10gb": 7}, devices=[0, 3, 5, 6, 9])).problems
    assert "GPU indices 3, 5-6, 9 do not exist" in p.message


def test_repeated_and_negative_indices_are_one_finding_each():
    report = on([H100, H100], enabled({"1g.10gb": 7}, devices=[0, 1, 0, 1, 0, -1, -2]))
    assert sorted((p.rule, p.path, p.message) for p in report.errors) == [
        ("duplicate-device-index", "mig-configs.c[0].devices[2]", "GPU indices 0-1 are listed more than once"),
        ("negative-device-index", "mig-configs.c[0].devices[5]", "GPU indices -2, -1 are negative"),
    ]


def test_overlaps_and_uncovered_gpus_name_every_gpu_once():
    report = on([H100] * 4, enabled({"1g.10gb": 7}, devices=[0, 1]), enabled({"3g.40gb": 2}, devices=[0, 1]))
    overlaps = [p for p in report.errors if p.rule == "overlapping-entries"]
    (p,) = overlaps
    assert "this entry and mig-configs.c[0] both select GPUs 0-1;" in p.message
    (p,) = [p for p in report.errors if p.rule == "gpu-not-covered"]
    assert "no entry selects GPUs 2-3 (H100-SXM5-80GB (0x233010DE))" in p.message


def test_gpus_without_mig_devices_are_one_warning():
    report = validate_on_node(DEFAULT, "all-enabled", [H100] * 8, "mixed")
    (p,) = report.problems
    assert (p.rule, p.message) == (
        "no-mig-devices",
        "on H100-SXM5-80GB: GPUs 0-7 have MIG enabled but no MIG devices: they advertise nothing",
    )


def test_problems_of_one_config_are_listed_up_to_a_limit():
    """A generated config with hundreds of problems lists the first MAX_PROBLEMS and counts the rest; the
    summary is an error when a hidden problem is, so validity does not depend on the limit."""
    from migops.mig.validate import MAX_PROBLEMS

    keys = {f"1g.{gb}gb": 1 for gb in range(200, 200 + MAX_PROBLEMS + 50)}
    report = on([H100], enabled(keys))
    assert len(report.problems) == MAX_PROBLEMS + 1 and not report.valid
    last = report.problems[-1]
    assert (last.rule, last.severity, last.path) == ("problems-truncated", "error", "mig-configs.c")
    assert last.message.startswith(
        "50 more problems of this config are not listed (50 errors, 0 warnings: unknown-profile x 50)"
    )
    # more than MAX_PROBLEMS zero-count warnings first, the only error hidden: still invalid
    zeros = {f"{g}g.{gb}gb": 0 for g in (1, 2) for gb in range(60)}
    report = on([A100_80], enabled({**zeros, "1g.10gb": 1}))
    assert [p.rule for p in report.problems[:-1]] == ["zero-count"] * MAX_PROBLEMS
    assert report.problems[-1].rule == "problems-truncated" and report.problems[-1].severity == "error"
    assert not report.valid

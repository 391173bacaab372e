"""The GPU catalogue: schema, per-table invariants, coverage of the models in the issue, lookups.

Facts are from /work/shared/reference/mig-hardware.md sections 4.2-4.9.
"""
from __future__ import annotations

import pytest
from jsonschema import Draft202012Validator

from migops.mig.catalogue import UnknownGpuError, catalogue, catalogue_schema, raw_catalogue
from migops.mig.profile import memory_gb_for_fraction, parse_profile

CAT = catalogue()
RAW = raw_catalogue()
TABLES = {t.id: t for t in CAT.tables}


def _profile_cases():
    return [pytest.param(t, gi, id=f"{t.id}:{gi.name}") for t in CAT.tables for gi in t.profiles]


# --- schema ------------------------------------------------------------------------------------------


def test_schema_is_a_valid_draft_2020_12_schema():
    Draft202012Validator.check_schema(catalogue_schema())


def test_data_file_validates_against_schema():
    validator = Draft202012Validator(catalogue_schema())
    errors = sorted(validator.iter_errors(RAW), key=lambda e: list(e.path))
    assert errors == [], [f"{list(e.path)}: {e.message}" for e in errors]


def test_schema_rejects_a_broken_entry():
    """The schema is not vacuous: a profile without `max` and a lower-case device ID are refused."""
    import copy

    broken = copy.deepcopy(RAW)
    first_table = next(iter(broken["profile_tables"].values()))
    del first_table["profiles"][0]["max"]
    broken["gpus"][0]["device_id"] = "0x20b010de"
    messages = [e.message for e in Draft202012Validator(catalogue_schema()).iter_errors(broken)]
    assert any("'max' is a required property" in m for m in messages)
    assert any("does not match" in m for m in messages)


# --- per-table invariants ----------------------------------------------------------------------------


@pytest.mark.parametrize("table,gi", _profile_cases())
def test_starts_fit_in_memory(table, gi):
    assert gi.starts, "a profile needs at least one start"
    for start in gi.starts:
        assert start >= 0
        assert start + gi.memory_slices <= table.memory_slices, (start, gi.memory_slices)


@pytest.mark.parametrize("table,gi", _profile_cases())
def test_starts_ascending_and_counts_sane(table, gi):
    assert list(gi.starts) == sorted(set(gi.starts))
    assert gi.max_count >= 1
    assert 1 <= gi.compute_slices <= table.compute_slices
    # max_count instances must fit in memory and compute at the same time (else the max is a lie)
    assert gi.max_count * gi.memory_slices <= table.memory_slices
    assert gi.max_count * gi.compute_slices <= table.compute_slices
    assert gi.max_count <= len(gi.starts)


@pytest.mark.parametrize("table,gi", _profile_cases())
def test_name_follows_naming_formula(table, gi):
    gb = memory_gb_for_fraction(gi.memory_slices, table.memory_slices, table.naming_memory_gib)
    profile = parse_profile(gi.name)
    assert profile.memory_gb == gb, f"{gi.name}: formula gives {gb}gb"
    assert profile.gpu == gi.compute_slices, f"{gi.name}: <c>g must equal c={gi.compute_slices}"
    assert profile.compute == profile.gpu  # catalogue names are GI profiles, no CI part
    assert str(profile) == gi.name  # canonical form
    assert gi.profile == profile


@pytest.mark.parametrize("table,gi", [c for c in _profile_cases() if c.values[1].aliases])
def test_aliases_are_drifted_names_of_the_same_profile(table, gi):
    canonical = {g.name for g in table.profiles}
    for alias in gi.aliases:
        parsed = parse_profile(alias)
        assert parsed.gpu == gi.profile.gpu
        assert parsed.compute == gi.profile.compute
        assert parsed.attributes == gi.profile.attributes
        assert parsed.negative == gi.profile.negative
        assert alias not in canonical, f"alias {alias} shadows a real profile"
        # a drifted name is the formula applied to a nearby reported total
        near = {memory_gb_for_fraction(gi.memory_slices, table.memory_slices, total)
                for total in range(table.naming_memory_gib - 5, table.naming_memory_gib + 6)}
        assert parsed.memory_gb in near


@pytest.mark.parametrize("table", CAT.tables, ids=lambda t: t.id)
def test_profile_names_unique_per_table(table):
    names = [gi.name for gi in table.profiles]
    assert len(names) == len(set(names))
    keys = [(gi.profile.gpu, gi.profile.memory_gb, gi.profile.attributes, gi.profile.negative)
            for gi in table.profiles]
    assert len(keys) == len(set(keys))


def test_media_extension_profiles_are_limited_to_one():
    for table in CAT.tables:
        for gi in table.profiles:
            if gi.has_media_extensions:
                assert gi.max_count == 1, (table.id, gi.name)


def test_device_ids_unique_and_tables_exist():
    ids = [g["device_id"] for g in RAW["gpus"]]
    assert len(ids) == len(set(ids))
    for g in RAW["gpus"]:
        assert g["table"] in RAW["profile_tables"], g
    used = {g["table"] for g in RAW["gpus"]}
    assert used == set(RAW["profile_tables"]), "every table is used by some GPU"
    assert len(CAT.gpus) == len(RAW["gpus"]) == 28


# --- coverage of the models in the issue -------------------------------------------------------------

MODELS = {
    # model: (device ID, table id, whole-GiB naming total)
    "A100-40GB": ("0x20B010DE", "a100-40gb", 40),
    "A100-80GB": ("0x20B210DE", "a100-80gb", 80),
    "A800-40GB": ("0x20F610DE", "a100-40gb", 40),
    "A800-80GB": ("0x20F310DE", "a100-80gb", 80),
    "A30": ("0x20B710DE", "a30-24gb", 24),
    "H100-80GB": ("0x233010DE", "h100-80gb", 80),
    "H100-94GB (NVL)": ("0x232110DE", "h100-94gb", 94),
    "H100-96GB": ("0x233D10DE", "h100-96gb", 96),
    "H800": ("0x232410DE", "h100-80gb", 80),
    "H20": ("0x232910DE", "h100-96gb", 96),
    "GH200 96GB": ("0x234210DE", "h100-96gb", 96),
    "GH200 144GB": ("0x234810DE", "gh200-144gb", 144),
    "H200": ("0x233510DE", "h200-141gb", 141),
    "H200 NVL": ("0x233B10DE", "h200-141gb", 141),
    "B200": ("0x290110DE", "b200-180gb", 180),
    "GB200": ("0x294110DE", "gb200-186gb", 186),
    "B300": ("0x318210DE", "b300-269gb", 269),
    "GB300": ("0x31C210DE", "gb300-278gb", 278),
    "RTX PRO 6000": ("0x2BB510DE", "rtx-pro-6000-96gb", 96),
}


@pytest.mark.parametrize("model", MODELS)
def test_model_present(model):
    device_id, table_id, gib = MODELS[model]
    gpu = CAT.by_device_id(device_id)
    assert gpu is not None, f"{model} ({device_id}) missing"
    assert gpu.table.id == table_id
    assert gpu.table.naming_memory_gib == gib


def test_slice_counts_per_family():
    for table in CAT.tables:
        if table.id == "a30-24gb":
            assert (table.compute_slices, table.memory_slices) == (4, 4)
        elif table.id == "rtx-pro-6000-96gb":
            assert (table.compute_slices, table.memory_slices) == (4, 12)
        else:
            assert (table.compute_slices, table.memory_slices) == (7, 8)


COMMON_8_SLICE = {  # reference 4.2: (compute, memory, max, starts) by kind
    "1g": (1, 1, 7, (0, 1, 2, 3, 4, 5, 6)),
    "1g+me": (1, 1, 1, (0, 1, 2, 3, 4, 5, 6)),
    "1g-rev2": (1, 2, 4, (0, 2, 4, 6)),
    "2g": (2, 2, 3, (0, 2, 4)),
    "3g": (3, 4, 2, (0, 4)),
    "4g": (4, 4, 1, (0,)),
    "7g": (7, 8, 1, (0,)),
}


@pytest.mark.parametrize("table", [t for t in CAT.tables if t.memory_slices == 8], ids=lambda t: t.id)
def test_common_placement_table(table):
    assert len(table.profiles) == 7
    seen = set()
    for gi in table.profiles:
        if gi.profile.gpu == 1 and gi.has_media_extensions:
            kind = "1g+me"
        elif gi.profile.gpu == 1 and gi.memory_slices == 2:
            kind = "1g-rev2"
        else:
            kind = f"{gi.profile.gpu}g"
        seen.add(kind)
        assert (gi.compute_slices, gi.memory_slices, gi.max_count, gi.starts) == COMMON_8_SLICE[kind], gi.name
    assert seen == set(COMMON_8_SLICE)


def test_a30_and_rtx_tables():
    a30 = {gi.name: (gi.compute_slices, gi.memory_slices, gi.max_count, gi.starts) for gi in TABLES["a30-24gb"].profiles}
    assert a30 == {
        "1g.6gb": (1, 1, 4, (0, 1, 2, 3)), "1g.6gb+me": (1, 1, 1, (0, 1, 2, 3)),
        "2g.12gb": (2, 2, 2, (0, 2)), "2g.12gb+me": (2, 2, 1, (0, 2)), "4g.24gb": (4, 4, 1, (0,)),
    }
    rtx = {gi.name: (gi.memory_slices, gi.max_count, gi.starts) for gi in TABLES["rtx-pro-6000-96gb"].profiles}
    assert rtx["1g.24gb"] == (3, 4, (0, 3, 6, 9))
    assert rtx["1g.24gb+me"] == (3, 1, (0, 3, 6, 9))
    assert rtx["1g.24gb+me.all"][1] == 1
    assert rtx["2g.48gb"] == (6, 2, (0, 6))
    assert rtx["2g.48gb+me.all"][1] == 1
    assert rtx["4g.96gb"] == (12, 1, (0,))
    assert set(rtx) >= {"1g.24gb+gfx", "1g.24gb-me", "2g.48gb+gfx", "2g.48gb-me", "4g.96gb+gfx"}


# --- resolve() ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["0x233010DE", "0x233010de", "0x2330", "0x233010DE:0x16C110DE",
                                  " 0x233010DE ", "NVIDIA-H100-80GB-HBM3", "nvidia-h100-80gb-hbm3"])
def test_resolve_h100(text):
    assert CAT.resolve(text).device_id == "0x233010DE"


def test_resolve_other_models():
    assert CAT.resolve("0x2BB5").table.id == "rtx-pro-6000-96gb"
    assert CAT.resolve("0x31c210de").name == "GB300"
    assert CAT.resolve("NVIDIA-A100-SXM4-40GB").device_id == "0x20B010DE"
    assert CAT.resolve("nvidia-h200-nvl").device_id == "0x233B10DE"


@pytest.mark.parametrize("text", ["garbage", "", "0x123410DE", "0x1234", "NVIDIA-H100", "0xZZZZ10DE",
                                  "0x233010DE0", "H100-80GB-HBM3-MIG-1g.10gb"])
def test_resolve_unknown(text):
    with pytest.raises(UnknownGpuError):
        CAT.resolve(text)


def test_by_device_id_matches_primary_ids_only():
    assert CAT.by_device_id("0x233010DE").name == "H100-SXM5-80GB"
    assert CAT.by_device_id("0x123410DE") is None


# --- name collisions (reference 4.9) -----------------------------------------------------------------


def _gi(device_id: str, name: str):
    found = CAT.by_device_id(device_id).find_profile(parse_profile(name))
    assert found is not None, (device_id, name)
    return found


def test_1g_10gb_collision():
    a100_40, by_alias = _gi("0x20B010DE", "1g.10gb")
    assert not by_alias
    assert (a100_40.memory_slices, a100_40.max_count) == (2, 4)
    h100, by_alias = _gi("0x233010DE", "1g.10gb")
    assert not by_alias
    assert (h100.memory_slices, h100.max_count) == (1, 7)
    a100_80, _ = _gi("0x20B210DE", "1g.10gb")
    assert (a100_80.memory_slices, a100_80.max_count) == (1, 7)


def test_1g_35gb_and_1g_24gb_collisions():
    h200, _ = _gi("0x233510DE", "1g.35gb")
    gb300, _ = _gi("0x31C210DE", "1g.35gb")
    assert (h200.memory_slices, h200.max_count) == (2, 4)
    assert (gb300.memory_slices, gb300.max_count) == (1, 7)
    nvl, by_alias = _gi("0x232110DE", "1g.24gb")
    assert (nvl.memory_slices, nvl.max_count, by_alias) == (2, 4, False)
    rtx, by_alias = _gi("0x2BB510DE", "1g.24gb")
    assert (rtx.memory_slices, rtx.max_count, by_alias) == (3, 4, False)
    gb200, by_alias = _gi("0x294110DE", "1g.24gb")
    assert (gb200.name, gb200.memory_slices, gb200.max_count, by_alias) == ("1g.23gb", 1, 7, True)


def test_gpus_with_profile():
    owners = {g.table.id for g in CAT.gpus_with_profile(parse_profile("1g.10gb"))}
    assert owners == {"a100-40gb", "a100-80gb", "h100-80gb"}
    assert CAT.gpus_with_profile(parse_profile("9g.999gb")) == ()


def test_h100_nvl_has_no_1g_24gb_me():
    assert CAT.by_device_id("0x232110DE").find_profile(parse_profile("1g.24gb+me")) is None

"""The GPU catalogue: schema, invariants that catch a class of data error (not one instance), coverage of
the models in the issues, lookups, GPUs that cannot do MIG.

Facts are from the sources in docs/catalogue.md (the MIG User Guide's tables, nvidia-smi outputs quoted in
NVIDIA's pull requests and issues, mig-parted's default config).
"""

from __future__ import annotations

import math

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
        near = {
            memory_gb_for_fraction(gi.memory_slices, table.memory_slices, total)
            for total in range(table.naming_memory_gib - 5, table.naming_memory_gib + 6)
        }
        assert parsed.memory_gb in near


@pytest.mark.parametrize("table", CAT.tables, ids=lambda t: t.id)
def test_profile_names_unique_per_table(table):
    names = [gi.name for gi in table.profiles]
    assert len(names) == len(set(names))
    keys = [(gi.profile.gpu, gi.profile.memory_gb, gi.profile.attributes, gi.profile.negative) for gi in table.profiles]
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
    assert len(CAT.gpus) == len(RAW["gpus"]) == 32
    non_mig = [g["device_id"] for g in RAW["non_mig_gpus"]]
    assert len(non_mig) == len(set(non_mig)) and not set(non_mig) & set(ids), "an ID is MIG-capable or not, once"


# --- invariants: each catches a class of data error --------------------------------------------------
# Tolerance for memory: 1 MiB (integer division); every value in MiB as NVML and GFD report it.


def _gpu_profile_cases():
    return [pytest.param(g, gi, id=f"{g.device_id}:{gi.name}") for g in CAT.gpus for gi in g.profiles]


@pytest.mark.parametrize("gpu,gi", _gpu_profile_cases())
def test_profile_memory_within_its_share_of_the_gpu(gpu, gi):
    """No profile holds more memory than its memory slices' share of the GPU's (RTX PRO 6000's 4g was
    98304 MiB on a 97887 MiB card; every B300 and GB300 profile was over its fraction)."""
    if gi.memory_mib is None:
        return
    share = gpu.memory_mib * gi.memory_slices // gpu.table.memory_slices
    assert gi.memory_mib <= share + 1, f"{gi.name}: {gi.memory_mib} MiB > {share} MiB"


def _full_profile(table):
    full = [
        gi
        for gi in table.profiles
        if gi.memory_slices == table.memory_slices
        and gi.compute_slices == table.compute_slices
        and not gi.profile.attributes
    ]
    assert len(full) == 1, table.id
    return full[0]


@pytest.mark.parametrize("table", CAT.tables, ids=lambda t: t.id)
def test_full_gpu_profile_is_the_gpu(table):
    """The full-GPU profile holds the GPU's engines and nearly all its memory."""
    full = _full_profile(table)
    assert (full.engines is None) == (table.engines is None)
    if table.engines is not None:
        assert full.engines == table.engines
    for gpu in (g for g in CAT.gpus if g.table is table):
        if full.memory_mib is not None:
            assert 0.95 * gpu.memory_mib <= full.memory_mib <= gpu.memory_mib, gpu.name


@pytest.mark.parametrize("table", [t for t in CAT.tables if t.engines is not None], ids=lambda t: t.id)
def test_engine_sums_fit_the_gpu(table):
    """Every profile's engines are within the GPU's; as many instances of a profile as the GPU allows fit
    the engine budget unless the profile takes media extensions (+me, +me.all), which exist to claim them."""
    for gi in table.profiles:
        assert gi.engines is not None, gi.name
        for kind, total in table.engines.items():
            taken = getattr(gi.engines, kind)
            assert taken <= total, (gi.name, kind)
            if not gi.has_media_extensions:
                assert gi.max_count * taken <= total, (gi.name, kind)
    assert table.engines.ofa <= 1, "one set of media extensions per GPU"


def test_media_extensions_are_limited_by_the_engine_budget():
    """`+me` at most once per GPU: by max_count where a table has one media-extension profile, by the
    engine budget (one OFA) where it has several, so the budget needs its data there."""
    for table in CAT.tables:
        media = [gi for gi in table.profiles if gi.has_media_extensions]
        for gi in media:
            assert gi.max_count == 1, (table.id, gi.name)
        if len(media) > 1:
            assert table.engines is not None and table.engines.ofa == 1, table.id
            assert all(gi.engines is not None and gi.engines.ofa == 1 for gi in media), table.id


@pytest.mark.parametrize("table", CAT.tables, ids=lambda t: t.id)
def test_models_of_a_table_agree(table):
    """Every GPU of a table is the same chip generation and names the profiles the same way (PG506-232, an
    Ampere part, sat in a Hopper table with Hopper SM and engine counts)."""
    gpus = [g for g in CAT.gpus if g.table is table]
    assert len({(g.architecture, g.compute_capability) for g in gpus}) == 1, [g.name for g in gpus]
    for g in gpus:
        # the naming formula multiplies by the total in whole GiB, rounded up
        assert math.ceil(g.memory_mib / 1024) == table.naming_memory_gib, g.name


@pytest.mark.parametrize("table", CAT.tables, ids=lambda t: t.id)
def test_sms_grow_with_compute_slices(table):
    known = sorted((gi.compute_slices, gi.sms) for gi in table.profiles if gi.sms is not None)
    for (c1, s1), (c2, s2) in zip(known, known[1:]):
        assert c1 > c2 or s1 <= s2, table.id


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
    "RTX PRO 6000 Workstation": ("0x2BB110DE", "rtx-pro-6000-96gb", 96),
    "RTX PRO 6000 Max-Q": ("0x2BB410DE", "rtx-pro-6000-96gb", 96),
    "RTX PRO 5000": ("0x2BB310DE", "rtx-pro-5000-48gb", 48),
    "RTX PRO 4500": ("0x2C3110DE", "rtx-pro-4500-32gb", 32),
    "PG506-232": ("0x20B610DE", "pg506-96gb", 96),
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
        elif table.id in ("rtx-pro-5000-48gb", "rtx-pro-4500-32gb"):
            assert (table.compute_slices, table.memory_slices) == (2, 2)
        else:
            assert (table.compute_slices, table.memory_slices) == (7, 8)


COMMON_8_SLICE = {  # the MIG User Guide's 8-memory-slice table: (compute, memory, max, starts) by kind
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
    a30 = {
        gi.name: (gi.compute_slices, gi.memory_slices, gi.max_count, gi.starts) for gi in TABLES["a30-24gb"].profiles
    }
    assert a30 == {
        "1g.6gb": (1, 1, 4, (0, 1, 2, 3)),
        "1g.6gb+me": (1, 1, 1, (0, 1, 2, 3)),
        "2g.12gb": (2, 2, 2, (0, 2)),
        "2g.12gb+me": (2, 2, 1, (0, 2)),
        "4g.24gb": (4, 4, 1, (0,)),
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


@pytest.mark.parametrize(
    "text",
    [
        "0x233010DE",
        "0x233010de",
        "0x2330",
        "0x233010DE:0x16C110DE",
        " 0x233010DE ",
        "NVIDIA-H100-80GB-HBM3",
        "nvidia-h100-80gb-hbm3",
    ],
)
def test_resolve_h100(text):
    assert CAT.resolve(text).device_id == "0x233010DE"


def test_resolve_other_models():
    assert CAT.resolve("0x2BB5").table.id == "rtx-pro-6000-96gb"
    assert CAT.resolve("0x31c210de").name == "GB300"
    assert CAT.resolve("NVIDIA-A100-SXM4-40GB").device_id == "0x20B010DE"
    assert CAT.resolve("nvidia-h200-nvl").device_id == "0x233B10DE"


@pytest.mark.parametrize(
    "text", ["garbage", "", "NVIDIA-H100", "0xZZZZ10DE", "0x233010DE0", "H100-80GB-HBM3-MIG-1g.10gb"]
)
def test_resolve_unknown(text):
    with pytest.raises(UnknownGpuError):
        CAT.resolve(text)


# --- GPUs that cannot do MIG -------------------------------------------------------------------------


def test_resolve_gpus_without_mig():
    display = CAT.resolve("0x1FB010DE")  # the DGX Station A100's display GPU
    assert (display.mig_capable, display.known, display.table) == (False, True, None)
    assert CAT.resolve("Tesla-T4").device_id == "0x1EB810DE"
    # any other well-formed ID: a GPU migops does not know, taken as not MIG-capable
    for text, device_id in (("0x123410DE", "0x123410DE"), ("0x1234", "0x123410DE"), ("0xFFFF10DE", "0xFFFF10DE")):
        gpu = CAT.resolve(text)
        assert (gpu.device_id, gpu.mig_capable, gpu.known) == (device_id, False, False)
        assert "not MIG-capable" in gpu.label()
    assert CAT.resolve("0x123410DE") is CAT.resolve("0x123410de")  # one model per ID (compared by identity)


def test_only_the_catalogue_lists_mig_capable_ids():
    assert CAT.by_device_id("0x1FB010DE") is None and CAT.known_non_mig("0x1FB010DE") is not None
    assert CAT.known_non_mig("0x233010DE") is None
    assert all(not g.mig_capable and g.known for g in CAT.non_mig)
    assert all(g.mig_capable for g in CAT.gpus)


# --- values once wrong, each also caught by an invariant above ------------------------------


def test_corrected_values():
    rtx = {gi.name: gi for gi in TABLES["rtx-pro-6000-96gb"].profiles}
    assert [(rtx[n].memory_mib, rtx[n].sms) for n in ("1g.24gb", "2g.48gb", "4g.96gb")] == [
        (24192, 46),
        (48512, 94),
        (97408, 188),
    ]  # 23.62 / 47.38 / 95.12 GiB
    assert rtx["1g.24gb+me.all"].engines.decoder == rtx["1g.24gb+me.all"].engines.encoder == 4
    assert rtx["1g.24gb-me"].engines.decoder == 0
    b200 = {gi.name: gi for gi in TABLES["b200-180gb"].profiles}
    assert b200["1g.45gb"].memory_mib == b200["2g.45gb"].memory_mib == 45312  # 44.25 GiB
    gb200 = [gi.sms for gi in TABLES["gb200-186gb"].profiles][:4]
    assert gb200 == [18, 18, 32, 38]
    pg506 = CAT.by_device_id("0x20B610DE")
    assert (pg506.architecture, pg506.table.id) == ("ampere", "pg506-96gb")
    assert "sms" in pg506.table.inferred and "engines" in pg506.table.inferred


def test_by_device_id_matches_primary_ids_only():
    assert CAT.by_device_id("0x233010DE").name == "H100-SXM5-80GB"
    assert CAT.by_device_id("0x123410DE") is None


# --- name collisions --------------------------------------------------------------------------------


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

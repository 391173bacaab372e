"""generate-config output read by migops.mig's reader, and the catalogue compared with it.

The outputs in examples/generate-config/ were written by mig-parted v0.15.0's own builder
(pkg/mig/builder.buildMigConfigSpec, marshalled as `generate-config` marshals it) from NVIDIA's documented
profile tables (MIG User Guide, supported MIG profiles): A100-SXM4-40GB, A100-SXM4-80GB, H100-SXM5-80GB
(YAML and JSON), H200-SXM-141GB, B200, and one node holding an A100-SXM4-40GB and an A100-SXM4-80GB
(device filters). tests/mig/data/generate-config/ holds one changed on purpose."""

from __future__ import annotations

from pathlib import Path

import pytest

from migops.mig.catalogue import catalogue
from migops.mig.generated import (
    CatalogueCheck,
    GeneratedOutput,
    check_catalogue,
    compare_model,
    config_name,
    read_generated,
)
from migops.mig.spec import parse_config

ROOT = Path(__file__).resolve().parents[2]
OUTPUTS = ROOT / "examples" / "generate-config"
DIFFERS = ROOT / "tests" / "mig" / "data" / "generate-config" / "a100-sxm4-40gb-differs.yaml"

# NVIDIA's tables (MIG User Guide): profile -> instances per GPU.
A100_40GB = {"1g.5gb": 7, "1g.5gb+me": 1, "1g.10gb": 4, "2g.10gb": 3, "3g.20gb": 2, "4g.20gb": 1, "7g.40gb": 1}
A100_80GB = {"1g.10gb": 7, "1g.10gb+me": 1, "1g.20gb": 4, "2g.20gb": 3, "3g.40gb": 2, "4g.40gb": 1, "7g.80gb": 1}
H200 = {"1g.18gb": 7, "1g.18gb+me": 1, "1g.35gb": 4, "2g.35gb": 3, "3g.71gb": 2, "4g.71gb": 1, "7g.141gb": 1}
B200 = {"1g.23gb": 7, "1g.23gb+me": 1, "1g.45gb": 4, "2g.45gb": 3, "3g.90gb": 2, "4g.90gb": 1, "7g.180gb": 1}
TABLES = {
    "a100-sxm4-40gb.yaml": A100_40GB,
    "a100-sxm4-80gb.yaml": A100_80GB,
    "h100-sxm5-80gb.yaml": A100_80GB,  # H100 80GB has A100 80GB's names and counts
    "h100-sxm5-80gb.json": A100_80GB,
    "h200-sxm-141gb.yaml": H200,
    "b200-180gb.yaml": B200,
}


def _read(path: Path) -> GeneratedOutput:
    return read_generated(parse_config(path.read_bytes()), path.name)


@pytest.mark.parametrize("name", sorted(TABLES))
def test_an_output_lists_the_profiles_of_its_table(name: str) -> None:
    out = _read(OUTPUTS / name)
    assert out.problems == ()
    (gpu,) = out.gpus
    assert gpu.device_id is None  # a node of one model: generate-config writes no device-filter
    assert dict(gpu.profiles) == TABLES[name]


def test_the_json_output_reads_as_the_yaml_one() -> None:
    assert _read(OUTPUTS / "h100-sxm5-80gb.json").gpus == _read(OUTPUTS / "h100-sxm5-80gb.yaml").gpus


def test_a_node_of_two_models_names_each_by_its_device_filter() -> None:
    out = _read(OUTPUTS / "mixed-a100-40gb-a100-80gb.yaml")
    assert out.problems == ()
    found = {g.device_id: dict(g.profiles) for g in out.gpus}
    assert found == {"0x20B010DE": A100_40GB, "0x20B210DE": A100_80GB}


def test_config_names_write_plus_as_a_dot() -> None:
    assert config_name("1g.10gb+me") == "all-1g.10gb.me"
    assert config_name("1g.24gb+me.all") == "all-1g.24gb.me.all"
    assert config_name("1g.24gb-me") == "all-1g.24gb-me"


def test_the_catalogue_agrees_with_every_documented_table() -> None:
    found = check_catalogue([_read(p) for p in sorted(OUTPUTS.iterdir())], catalogue())
    assert isinstance(found, CatalogueCheck) and found.agrees
    assert all(d.severity == "warning" for m in found.models for d, _ in m.differences)
    named = {m.device_id for m in found.models if m.device_id}
    assert named == {"0x20B010DE", "0x20B210DE"}  # the two-model node's, by device ID
    inferred = {m.inferred[0].name for m in found.models if m.inferred}
    assert inferred == {"A100-SXM4-40GB", "A100-SXM4-80GB", "H200-SXM-141GB", "B200"}


def test_the_changed_output_shows_each_difference_once() -> None:
    found = check_catalogue([_read(DIFFERS)], catalogue())
    assert not found.agrees
    (model,) = found.models
    assert model.inferred[0].name == "A100-SXM4-40GB"
    got = {(d.rule, d.profile, d.output, d.catalogue) for d, _ in model.differences}
    assert got == {
        ("catalogue-extra-profile", "1g.10gb", None, 4),
        ("catalogue-max-count", "2g.10gb", 2, 3),
        ("catalogue-memory", "3g.21gb", 2, 2),
    }


def test_a_named_model_is_compared_as_named() -> None:
    h100 = catalogue().resolve("NVIDIA-H100-80GB-HBM3")
    found = check_catalogue([_read(OUTPUTS / "h200-sxm-141gb.yaml")], catalogue(), h100)
    (model,) = found.models
    assert model.model is h100 and not model.agrees
    # Every H200 profile has an H100 profile of the same slices: the names differ in memory only.
    got = {d.profile: d.message for d, _ in model.differences}
    assert {d.rule for d, _ in model.differences} == {"catalogue-memory"} and len(got) == 7
    assert "the catalogue names it 3g.40gb (71 GB on the hardware, 40 GB in the catalogue)" in got["3g.71gb"]


def test_kinds_of_difference() -> None:
    a100 = catalogue().resolve("0x20B210DE")
    drift = [(p, c) for p, c in A100_80GB.items() if p != "7g.80gb"] + [("7g.79gb", 1)]
    (alias,) = compare_model(a100, drift)
    assert (alias.rule, alias.severity) == ("catalogue-alias", "warning")  # known name drift: agrees
    extra = compare_model(a100, [*A100_80GB.items(), ("1c.2g.20gb", 3)])
    assert [d.rule for d in extra] == ["catalogue-lacks-profile"]
    (unknown,) = compare_model(catalogue().model(catalogue().resolve("0x123410DE").pci), list(A100_80GB.items()))
    assert unknown.rule == "catalogue-unknown-gpu" and "0x123410DE" in unknown.message


def test_an_output_of_no_known_model_asks_for_it() -> None:
    text = "version: v1\nmig-configs:\n  all-1g.11gb:\n  - devices: all\n    mig-enabled: true\n    mig-devices:\n      1g.11gb: 5\n"
    found = check_catalogue([read_generated(parse_config(text), "odd.yaml")], catalogue())
    ((diff, sources),) = found.models[0].differences
    assert diff.rule == "catalogue-model-unnamed" and "--gpu" in diff.message and sources == ("odd.yaml",)
    assert not found.agrees


def test_a_hand_written_config_is_not_an_output() -> None:
    out = _read(ROOT / "examples" / "custom-mig-config.yaml")
    assert out.problems and {p.rule for p in out.problems} == {"not-generate-config"}
    assert all(p.line is not None for p in out.problems)  # located in the file
    assert not check_catalogue([out], catalogue()).agrees


def test_filters_on_some_entries_only_are_not_an_output() -> None:
    text = (OUTPUTS / "mixed-a100-40gb-a100-80gb.yaml").read_text()
    text = text.replace(
        '  - device-filter: ["0x20B010DE"]\n    devices: all\n    mig-enabled: true\n    mig-devices:\n      1g.5gb: 7',
        "  - devices: all\n    mig-enabled: true\n    mig-devices:\n      1g.5gb: 7",
        1,
    )
    out = read_generated(parse_config(text), "x.yaml")
    assert [p.rule for p in out.problems] == ["not-generate-config"]
    assert "device-filter" in out.problems[0].message

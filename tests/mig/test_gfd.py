"""GFD label and resource prediction: the seed values of reference section 6 (H100-80GB-HBM3)."""

from __future__ import annotations

from pathlib import Path

import pytest

from migops.mig.catalogue import catalogue
from migops.mig.gfd import DEVICE_ID_LABEL, advertise, node_labels_without_mig, resource_name
from migops.mig.spec import parse_config
from migops.mig.validate import validate_on_node

CAT = catalogue()
H100 = CAT.by_device_id("0x233010DE")
A100_40 = CAT.by_device_id("0x20B010DE")
DEFAULT = parse_config((Path(__file__).resolve().parents[2] / "examples" / "nvidia-default-config.yaml").read_text())
P = "nvidia.com/"


def predict(name: str, node, strategy):
    report = validate_on_node(DEFAULT, name, node, strategy)
    return advertise(report.gpus, strategy)


SEED_MIXED = {  # GPU Operator MIG documentation, H100-80GB-HBM3, mixed, all-balanced
    "1g.10gb": {
        "count": "2",
        "memory": "9984",
        "multiprocessors": "16",
        "slices.gi": "1",
        "slices.ci": "1",
        "engines.copy": "1",
        "engines.decoder": "1",
        "engines.encoder": "0",
        "engines.jpeg": "1",
        "engines.ofa": "0",
    },
    "2g.20gb": {
        "count": "1",
        "memory": "20096",
        "multiprocessors": "32",
        "slices.gi": "2",
        "slices.ci": "2",
        "engines.copy": "2",
        "engines.decoder": "2",
        "engines.encoder": "0",
        "engines.jpeg": "2",
        "engines.ofa": "0",
    },
    "3g.40gb": {
        "count": "1",
        "memory": "40320",
        "multiprocessors": "60",
        "slices.gi": "3",
        "slices.ci": "3",
        "engines.copy": "3",
        "engines.decoder": "3",
        "engines.encoder": "0",
        "engines.jpeg": "3",
        "engines.ofa": "0",
    },
}


def test_mixed_all_balanced_matches_seed():
    ad = predict("all-balanced", [H100], "mixed")
    assert ad.invalid_reason is None
    assert ad.resources == {f"{P}mig-1g.10gb": 2, f"{P}mig-2g.20gb": 1, f"{P}mig-3g.40gb": 1}
    for profile, values in SEED_MIXED.items():
        prefix = f"{P}mig-{profile}"
        for key, value in values.items():
            assert ad.labels[f"{prefix}.{key}"] == value, (profile, key)
        assert ad.labels[f"{prefix}.product"] == f"NVIDIA-H100-80GB-HBM3-MIG-{profile}"
        assert ad.labels[f"{prefix}.replicas"] == "1"
        assert ad.labels[f"{prefix}.sharing-strategy"] == "none"
    assert ad.labels[f"{P}gpu.replicas"] == "0"
    assert ad.labels[f"{P}gpu.count"] == "1"  # physical GPUs under mixed
    assert ad.labels[f"{P}gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert ad.labels[f"{P}mig.strategy"] == "mixed"
    assert ad.labels[f"{P}mig.capable"] == "true"
    assert f"{P}gpu" not in ad.resources  # no whole GPUs left
    # no labels for profiles that are not present
    assert not [k for k in ad.labels if k.startswith(f"{P}mig-7g")]


def test_mixed_counts_physical_gpus_and_keeps_whole_gpus():
    report = validate_on_node(
        parse_config(
            "version: v1\nmig-configs:\n  c:\n"
            "    - devices: [0]\n      mig-enabled: true\n      mig-devices: {\"1g.10gb\": 7}\n"
            "    - devices: [1, 2]\n      mig-enabled: false\n"
        ),
        "c",
        [H100] * 3,
        "mixed",
    )
    assert report.valid
    ad = advertise(report.gpus, "mixed")
    assert ad.resources == {f"{P}gpu": 2, f"{P}mig-1g.10gb": 7}
    assert ad.labels[f"{P}gpu.count"] == "3"
    assert ad.labels[f"{P}mig-1g.10gb.count"] == "7"


def test_mixed_sums_over_gpus():
    ad = predict("all-balanced", [H100] * 4, "mixed")
    assert ad.resources == {f"{P}mig-1g.10gb": 8, f"{P}mig-2g.20gb": 4, f"{P}mig-3g.40gb": 4}
    assert ad.labels[f"{P}mig-1g.10gb.count"] == "8"
    assert ad.labels[f"{P}gpu.count"] == "4"


def test_single_all_1g_10gb():
    ad = predict("all-1g.10gb", [H100], "single")
    assert ad.invalid_reason is None
    assert ad.resources == {f"{P}gpu": 7}
    assert ad.labels[f"{P}gpu.count"] == "7"
    assert ad.labels[f"{P}gpu.product"] == "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb"
    assert ad.labels[f"{P}gpu.slices.gi"] == "1"
    assert ad.labels[f"{P}gpu.slices.ci"] == "1"
    assert ad.labels[f"{P}gpu.memory"] == "9984"
    assert ad.labels[f"{P}gpu.multiprocessors"] == "16"
    assert ad.labels[f"{P}mig.strategy"] == "single"
    assert not [k for k in ad.labels if k.startswith(f"{P}mig-")]


def test_single_all_3g_40gb():
    ad = predict("all-3g.40gb", [H100, H100], "single")
    assert ad.resources == {f"{P}gpu": 4}
    ad = predict("all-3g.40gb", [H100], "single")
    assert ad.resources == {f"{P}gpu": 2}
    assert ad.labels[f"{P}gpu.count"] == "2"
    assert ad.labels[f"{P}gpu.slices.gi"] == "3"
    assert ad.labels[f"{P}gpu.slices.ci"] == "3"
    assert ad.labels[f"{P}gpu.product"] == "NVIDIA-H100-80GB-HBM3-MIG-3g.40gb"
    assert ad.labels[f"{P}gpu.memory"] == "40320"


def test_single_all_balanced_is_invalid():
    ad = predict("all-balanced", [H100], "single")
    assert ad.invalid_reason and "more than one MIG device type" in ad.invalid_reason
    assert ad.resources == {f"{P}gpu": 0}
    assert ad.labels[f"{P}gpu.product"] == "NVIDIA-H100-80GB-HBM3-MIG-INVALID"
    assert ad.labels[f"{P}gpu.count"] == "0"
    assert ad.labels[f"{P}gpu.replicas"] == "0"
    assert ad.labels[f"{P}gpu.memory"] == "0"


def test_single_invalid_when_enabled_and_disabled_mixed():
    report = validate_on_node(
        parse_config(
            "version: v1\nmig-configs:\n  c:\n"
            "    - devices: [0]\n      mig-enabled: true\n      mig-devices: {\"1g.10gb\": 7}\n"
            "    - devices: [1]\n      mig-enabled: false\n"
        ),
        "c",
        [H100, H100],
        "single",
    )
    ad = advertise(report.gpus, "single")
    assert ad.labels[f"{P}gpu.product"].endswith("-MIG-INVALID") and "mixed" in ad.invalid_reason


def test_single_invalid_when_enabled_without_devices():
    ad = predict("all-enabled", [H100], "single")
    assert ad.labels[f"{P}gpu.product"] == "NVIDIA-H100-80GB-HBM3-MIG-INVALID"
    assert ad.resources == {f"{P}gpu": 0}


def test_none_strategy_and_mig_disabled():
    ad = predict("all-disabled", [H100, H100], "none")
    assert ad.resources == {f"{P}gpu": 2}
    assert ad.labels == node_labels_without_mig(H100, 2, "none")
    ad = predict("all-disabled", [H100], "mixed")
    assert ad.resources == {f"{P}gpu": 1}
    assert ad.labels[f"{P}mig.strategy"] == "mixed"


def test_node_labels_without_mig():
    labels = node_labels_without_mig(H100, 8, "mixed")
    assert labels == {
        f"{P}gpu.present": "true",
        f"{P}gpu.product": "NVIDIA-H100-80GB-HBM3",
        f"{P}gpu.count": "8",
        f"{P}gpu.memory": "81559",
        f"{P}gpu.family": "hopper",
        f"{P}gpu.compute.major": "9",
        f"{P}gpu.compute.minor": "0",
        f"{P}gpu.replicas": "1",
        f"{P}gpu.sharing-strategy": "none",
        f"{P}mig.capable": "true",
        f"{P}mig.strategy": "mixed",
        DEVICE_ID_LABEL: "0x233010DE",
    }
    assert f"{P}mig.strategy" not in node_labels_without_mig(H100, 1, "none")
    a100 = node_labels_without_mig(A100_40, 1, "single")
    assert (a100[f"{P}gpu.family"], a100[f"{P}gpu.compute.major"], a100[f"{P}gpu.compute.minor"]) == (
        "ampere",
        "8",
        "0",
    )
    assert a100[f"{P}mig.strategy"] == "single"


@pytest.mark.parametrize("model", CAT.gpus, ids=lambda g: g.device_id)
def test_product_labels_are_valid_label_values(model):
    import re

    value = node_labels_without_mig(model, 1, "none")[f"{P}gpu.product"]
    assert re.fullmatch(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?", value), value
    assert " " not in value


def test_resource_name_replaces_plus():
    assert resource_name("1g.10gb") == "nvidia.com/mig-1g.10gb"
    assert resource_name("1g.10gb+me") == "nvidia.com/mig-1g.10gb.me"


def test_mixed_me_profile_resource():
    ad = predict("all-1g.10gb.me", [H100], "mixed")
    assert ad.resources == {f"{P}mig-1g.10gb.me": 1}
    assert ad.labels[f"{P}mig-1g.10gb.me.engines.ofa"] == "1"


def test_compute_subprofile_labels():
    report = validate_on_node(
        parse_config(
            "version: v1\nmig-configs:\n  c:\n    - devices: all\n      mig-enabled: true\n"
            "      mig-devices: {\"1c.3g.40gb\": 3}\n"
        ),
        "c",
        [H100],
        "mixed",
    )
    ad = advertise(report.gpus, "mixed")
    assert ad.resources == {f"{P}mig-1c.3g.40gb": 3}
    assert ad.labels[f"{P}mig-1c.3g.40gb.slices.gi"] == "3"
    assert ad.labels[f"{P}mig-1c.3g.40gb.slices.ci"] == "1"
    assert ad.labels[f"{P}mig-1c.3g.40gb.multiprocessors"] == "20"  # a third of the 3g's 60 SMs


def test_empty_node():
    ad = advertise((), "mixed")
    assert ad.resources == {} and ad.labels == {}


# --- GPUs that cannot do MIG -------------------------------------------------------------------------


def test_labels_of_a_gpu_without_mig():
    t4 = CAT.resolve("0x1EB810DE")
    labels = node_labels_without_mig(t4, 2, "single")
    assert labels[f"{P}mig.capable"] == "false" and labels[f"{P}gpu.product"] == "Tesla-T4"
    assert (labels[f"{P}gpu.compute.major"], labels[f"{P}gpu.compute.minor"]) == ("7", "5")
    unknown = CAT.resolve("0x123410DE")
    labels = node_labels_without_mig(unknown, 1, "none")
    assert labels[f"{P}mig.capable"] == "false"
    # what the catalogue does not know is left out, not made up
    assert not {f"{P}gpu.memory", f"{P}gpu.family", f"{P}gpu.compute.major"} & set(labels)


def test_advertise_on_a_node_with_a_display_gpu():
    """DGX Station A100: four A100-80GB with MIG and a display GPU that stays a whole GPU."""
    a100 = CAT.by_device_id("0x20B210DE")
    display = CAT.resolve("0x1FB010DE")
    report = validate_on_node(
        parse_config(
            "version: v1\nmig-configs:\n  c:\n"
            "    - {device-filter: '0x20B210DE', devices: all, mig-enabled: true, mig-devices: {'3g.40gb': 2}}\n"
            "    - {device-filter: '0x1FB010DE', devices: all, mig-enabled: false}\n"
        ),
        "c",
        [a100] * 4 + [display],
    )
    assert report.valid
    ad = advertise(report.gpus, "mixed")
    assert ad.resources == {f"{P}gpu": 1, f"{P}mig-3g.40gb": 8}
    assert ad.labels[f"{P}gpu.product"] == "NVIDIA-A100-SXM4-80GB" and ad.labels[f"{P}mig.capable"] == "true"
    assert ad.labels[f"{P}gpu.count"] == "5"
    # single: the whole display GPU beside MIG GPUs makes the node MIG-INVALID, as GFD does
    assert advertise(report.gpus, "single").invalid_reason == "MIG-enabled and MIG-disabled GPUs are mixed"


def test_local_nodes_seeded_with_a_gpu_without_mig():
    from migops.local.cluster import plan_nodes

    (node,) = plan_nodes(1, [CAT.resolve("0x1EB810DE")], 4, "single")
    assert node.gfd_labels[f"{P}mig.capable"] == "false" and node.operator_labels == {}
    (node,) = plan_nodes(1, [CAT.resolve("0x123410DE")], 1, "none")
    assert node.gfd_labels["migops.io/gpu.device-id"] == "0x123410DE" and node.operator_labels == {}

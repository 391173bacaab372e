"""migops.mig.fit: the one answer to "does config X fit these GPUs" (catalogue, node, model only), the
text's own errors on every question, and the compute-instance packing the validator hands the agent."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest

from migops.mig.catalogue import catalogue
from migops.mig.fit import NodeGpus, fit, fit_all
from migops.mig.gfd import read_gpus, single_product
from migops.mig.spec import parse_config
from migops.mig.text import listed
from migops.mig.validate import validate_on_model, validate_on_node

CAT = catalogue()
H100, A100, A30 = CAT.resolve("0x233010DE"), CAT.resolve("0x20B010DE"), CAT.resolve("0x20B710DE")

TEXT = """version: v1
mig-configs:
  typo-in-h100-entry:
    - device-filter: "0x20B010DE"
      devices: all
      mig-enabled: true
      mig-devices: {"3g.20gb": 2}
    - device-filter: "0x233010DE"
      devices: all
      mig-enabled: true
      mig-devices: {"3g.45gb": 1, "4g.40gb": 1}
  h100-sized:
    - devices: all
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}
  h100-only:
    - device-filter: "0x233010DE"
      devices: all
      mig-enabled: true
      mig-devices: {"2g.20gb": 3}
  nothing-fits:
    - devices: all
      mig-enabled: true
      mig-devices: {"1g.9gb": 7}
  packed:
    - devices: all
      mig-enabled: true
      mig-devices: {"3g.40gb": 1, "1c.3g.40gb": 2}
"""
CONFIG = parse_config(TEXT)


def rules(found) -> set[str]:
    return {p.rule for p in found.errors}


def test_an_error_of_the_text_holds_for_every_question() -> None:
    """An H100 entry's unknown profile: the A100 node's own report is clean, the verdict is not."""
    assert validate_on_node(CONFIG, "typo-in-h100-entry", [A100] * 8).valid
    for gpus in (None, NodeGpus((A100,) * 8, True), NodeGpus((A100,), False), NodeGpus((H100,) * 8, True)):
        verdict = fit(CONFIG, "typo-in-h100-entry", gpus, "mixed")
        assert not verdict.valid and "unknown-profile" in rules(verdict), gpus
    # on the H100 node the node's own finding is kept, the catalogue's copy of it dropped (same path and rule)
    on_h100 = fit(CONFIG, "typo-in-h100-entry", NodeGpus((H100,) * 8, True), "mixed")
    assert Counter(p.rule for p in on_h100.errors)["unknown-profile"] == 1


def test_what_is_no_error_of_the_text_never_fails_a_node() -> None:
    """Unfiltered, fitting H100 and not A100 40GB: no catalogue error; each node's own report decides."""
    assert fit(CONFIG, "h100-sized", None).valid
    assert fit(CONFIG, "h100-sized", NodeGpus((H100,) * 8, True), "mixed").valid
    assert rules(fit(CONFIG, "h100-sized", NodeGpus((A100,) * 8, True), "mixed")) == {"count-exceeds-max"}
    model_only = fit(CONFIG, "h100-sized", NodeGpus((A100,), False), "single")
    assert rules(model_only) == {"count-exceeds-max", "does-not-fit-model"}
    assert fit(CONFIG, "h100-sized", NodeGpus((H100,), False), "single").valid


def test_the_model_question_is_the_catalogue_on_that_model() -> None:
    report = validate_on_model(CONFIG, "h100-sized", A30)
    assert report.fits == () and {p.rule for p in report.errors} == {"unknown-profile", "does-not-fit-model"}
    assert "A30" in next(p.message for p in report.errors if p.rule == "does-not-fit-model")
    assert validate_on_model(CONFIG, "h100-sized", H100).fits == (H100,)
    # a filtered config that does not name the model: nothing to judge on it, so it does not fit it
    assert rules(fit(CONFIG, "h100-only", NodeGpus((A100,), False), "single")) == {"does-not-fit-model"}
    assert fit(CONFIG, "h100-only", NodeGpus((H100,), False), "single").valid


def test_a_config_that_fits_no_model_is_explained_on_the_node() -> None:
    assert "fits-no-gpu" in rules(fit(CONFIG, "nothing-fits", None))
    on_node = fit(CONFIG, "nothing-fits", NodeGpus((H100,) * 8, True), "mixed")
    assert rules(on_node) == {"unknown-profile"}  # why on its GPUs; no closest-model findings of other GPUs


def test_a_config_that_fits_no_model_past_the_problem_limit_is_explained_on_the_node() -> None:
    """60 profile names no GPU has: the catalogue report lists 100 problems and counts the rest, its
    `fits-no-gpu` among them; a node's question still takes none of the other models' findings."""
    keys = ", ".join(f'"{g}g.{m}gb": 1' for g in (1, 2, 3) for m in range(201, 221))
    config = parse_config(
        f"version: v1\nmig-configs:\n  odd:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {{{keys}}}\n"
    )
    catalogue_report = fit(config, "odd", None).report
    assert catalogue_report.fits_no_gpu and "problems-truncated" in rules(catalogue_report)
    assert "fits-no-gpu" not in rules(catalogue_report)  # past the limit, counted
    on_node = fit(config, "odd", NodeGpus((H100,) * 8, True))
    assert rules(on_node) == {"unknown-profile"}
    assert all(p.message.startswith("on H100-SXM5-80GB: ") for p in on_node.errors)


def test_fit_all_is_fit_for_each_config() -> None:
    for gpus in (None, NodeGpus((A100,) * 8, True), NodeGpus((A100,), False)):
        batch = fit_all(CONFIG, None, gpus, "mixed")
        assert [f.report for f in batch] == [fit(CONFIG, n, gpus, "mixed").report for n in CONFIG.names()]


sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import _shapes  # noqa: E402  (bench/_shapes.py: the worst-case generators)

# The worst-case shapes, small: every kind of finding (filtered entries on named models, unknown
# profiles, overlaps, out-of-range and repeated indices, huge counts, configs that fit no model).
SMALL_SHAPES = {
    "repeated": {"configs": 120},
    "distinct": {"configs": 400},
    "aliases": {"configs": 40},
    "entries": {"configs": 4, "per_config": 40},
    "indices": {"configs": 4, "per_config": 300},
    "counts": {"configs": 200},
    "profiles": {"configs": 30, "per_config": 20},
    "filters": {"configs": 40, "per_entry": 12},
}
MIXED_NODE = tuple(CAT.resolve(i) for i in ("0x20B010DE", "0x233010DE", "0x20B710DE", "0x2BB510DE", "0x294110DE"))


@pytest.mark.parametrize("shape", sorted(SMALL_SHAPES))
def test_fit_all_skips_only_catalogue_reports_that_change_nothing(shape: str) -> None:
    """fit_all asks the catalogue only where it can change a node or model verdict (needs_catalogue);
    fit always asks it. Same verdicts, on nodes where most configs fail and where some pass."""
    config = parse_config(_shapes.SHAPES[shape][0](**SMALL_SHAPES[shape]))
    names = list(config.names())
    for gpus, strategy in (
        (NodeGpus((H100,) * 8, True), None),
        (NodeGpus(MIXED_NODE, True), "mixed"),
        (NodeGpus((A100,), False), "single"),
    ):
        batch = [f.report for f in fit_all(config, None, gpus, strategy)]
        assert batch == [fit(config, n, gpus, strategy).report for n in names], (shape, gpus, strategy)


def test_advertisement_of_a_valid_node_question() -> None:
    verdict = fit(CONFIG, "h100-sized", NodeGpus((H100,) * 2, True), "mixed")
    ad = verdict.advertisement()
    assert ad is not None and ad.resources == {"nvidia.com/mig-1g.10gb": 14}
    assert fit(CONFIG, "h100-sized", None, "mixed").advertisement() is None
    assert fit(CONFIG, "h100-sized", NodeGpus((A100,) * 2, True), "mixed").advertisement() is None


def test_the_verdict_carries_the_compute_instance_packing() -> None:
    """3g.40gb + 2 x 1c.3g.40gb: next-fit, largest first, as mig-parted reuses the previous GI: one 3g
    GI holds the full CI, a second one the two 1c CIs (2 GIs, as the count check counted them)."""
    (gpu,) = validate_on_node(CONFIG, "packed", [H100]).gpus
    assert gpu.layout is not None and len(gpu.instances) == len(gpu.layout) == 2
    assert [p for p, _ in gpu.instances] == sorted(gpu.layout)
    assert sorted((p.profile, ci) for p, ci in gpu.instances) == [("3g.40gb", (1, 1)), ("3g.40gb", (3,))]
    # every MIG device the verdict lists is in exactly one GI
    assert sum(len(ci) for _, ci in gpu.instances) == len(gpu.mig_devices) == 3


def test_gfd_labels_are_read_where_they_are_written() -> None:
    assert read_gpus({}, {"migops.io/gpus": "0x233010DE,0x20B010DE"}) == NodeGpus((H100, A100), True)
    assert read_gpus({"migops.io/gpu.device-id": "0x233010DE", "nvidia.com/gpu.count": "8"}, {}) == NodeGpus(
        (H100,) * 8, True
    )
    product = single_product(A100, "1g.5gb")
    assert product == "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"
    assert read_gpus({"nvidia.com/gpu.product": product, "nvidia.com/gpu.count": "7"}, {}) == NodeGpus((A100,), False)
    assert read_gpus({"nvidia.com/gpu.count": ["not", "a", "string"]}, {"migops.io/gpus": {"x": 1}}) is None


@pytest.mark.parametrize("count", ["²", "٣", "８", "-1", " 8", ""])
def test_gfd_counts_are_ascii_digits_or_unknown(count: str) -> None:
    """`"²".isdigit()` is True and `int("²")` raises (a 500 in the webhook); "٣" would
    be read as 3 where GFD and Go read no number. Either is a count nobody wrote: the model is known,
    the count is not."""
    from migops.mig.gfd import mig_offers

    labels = {"migops.io/gpu.device-id": "0x233010DE", "nvidia.com/gpu.count": count}
    assert read_gpus(labels, {}) == NodeGpus((H100,), False)
    assert mig_offers({"nvidia.com/mig-1g.10gb.count": count}, {}) == frozenset()
    assert mig_offers({"nvidia.com/mig-1g.10gb.count": "2"}, {}) == {"nvidia.com/mig-1g.10gb"}


def test_listed() -> None:
    assert listed(["a", "b", "c", "d"], 2) == "a, b and 2 more"
    assert listed(["a", "b"], 2) == "a, b"
    assert listed((str(i) for i in range(7)), 5, sep="; ", more="more rules") == "0; 1; 2; 3; 4 and 2 more rules"

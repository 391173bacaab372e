"""Counts never cost more than their meaning: any count is judged by arithmetic, and no input
to the validator raises anything but MigError.

The configs here are built directly (not parsed), so the validator is tested on integers the parser
may refuse (beyond int64): whatever reaches it must be cheap to judge. How cheap is measured by
bench/mig_core.py (a count of 2^63-1) and bench/mig_worst_case.py (6,000 of them in one file).
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from migops.mig.catalogue import catalogue
from migops.mig.profile import parse_profile
from migops.mig.spec import MigConfigEntry, MigPartedConfig, ProfileCount
from migops.mig.validate import STRATEGIES, _pack, validate

CAT = catalogue()
H100 = CAT.by_device_id("0x233010DE")
INT64_MAX = (1 << 63) - 1
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def config(*entries: tuple, name: str = "c") -> MigPartedConfig:
    """entries: (devices, device_filter, mig_enabled, {profile: count})."""
    built = tuple(
        MigConfigEntry(
            path=f"mig-configs.{name}[{i}]",
            devices=devices if devices == "all" else tuple(devices),
            device_filter=tuple(device_filter),
            mig_enabled=enabled,
            mig_devices=tuple(ProfileCount(key, parse_profile(key), count) for key, count in items.items()),
        )
        for i, (devices, device_filter, enabled, items) in enumerate(entries)
    )
    return MigPartedConfig(((name, built),))


def next_fit(compute_slices: int, sizes: list[int]) -> int:
    """mig-parted's packing, one list item per compute instance: the reference for `_pack`."""
    gis, room = 0, 0
    for c in sorted(sizes, reverse=True):
        if c <= room:
            room -= c
        else:
            gis += 1
            room = compute_slices - c
    return gis


@FUZZ
@given(
    st.sampled_from([gi for table in CAT.tables for gi in table.profiles]),
    st.dictionaries(st.integers(1, 8), st.integers(0, 40), max_size=4),
)
def test_pack_is_next_fit(gi, sizes):
    """The arithmetic gives the same number of GPU instances as packing one item at a time, also for
    compute sizes that do not fit a GPU instance at all."""
    expanded = [c for c, n in sizes.items() for _ in range(n)]
    assert _pack(gi, sizes) == next_fit(gi.compute_slices, expanded)


def test_huge_count_is_judged_by_arithmetic():
    (report,) = validate(config(("all", (), True, {"1g.10gb": INT64_MAX})), node=[H100])
    (problem,) = report.errors
    assert problem.rule == "count-exceeds-max"
    assert f"{INT64_MAX} x 1g.10gb requested; the GPU allows at most 7" in problem.message
    # compute instances are packed into GPU instances first: 7 x 1c per 7g
    (report,) = validate(config(("all", (), True, {"1c.7g.80gb": INT64_MAX})), node=[H100])
    assert f"{-(-INT64_MAX // 7)} x 7g.80gb requested; the GPU allows at most 1" in report.errors[0].message
    # beyond int64 too (the parser refuses it; the validator must still not care)
    (report,) = validate(config(("all", (), True, {"1g.10gb": 10**100, "2g.20gb": 1})))
    assert not report.valid and report.fits == ()


def test_huge_count_next_to_a_valid_geometry():
    """A count within the maximum on one entry, a huge one on another GPU's entry: each GPU judged alone."""
    (report,) = validate(
        config(([0], (), True, {"1g.10gb": 7}), ([1], (), True, {"3g.40gb": 2**80})), node=[H100, H100]
    )
    assert [p.rule for p in report.errors] == ["count-exceeds-max"]
    assert len(report.gpus[0].mig_devices) == 7 and report.gpus[1].layout is None


devices = st.one_of(
    st.just("all"),
    st.lists(st.one_of(st.integers(-3, 20), st.integers(-(2**70), 2**70), st.just(INT64_MAX)), max_size=5),
)
counts = st.one_of(st.integers(0, 9), st.integers(0, 2**200), st.sampled_from([INT64_MAX, INT64_MAX - 1, 2**64]))
profile_keys = st.sampled_from(
    sorted(
        {gi.name for t in CAT.tables for gi in t.profiles}
        | {"1c.7g.80gb", "2c.3g.40gb", "1c.4g.40gb", "3c.4g.40gb", "7g.79gb", "9g.99gb"}
    )
)
filters = st.lists(
    st.sampled_from([g.device_id for g in CAT.gpus[:6]] + ["0x1FB010DE", "0xZZ", "0x233010DE:0x1"]), max_size=2
)
entries = st.tuples(devices, filters, st.booleans(), st.dictionaries(profile_keys, counts, max_size=4))


@FUZZ
@given(
    st.lists(entries, min_size=1, max_size=4),
    st.lists(st.sampled_from(CAT.gpus), min_size=1, max_size=4),
    st.sampled_from((None,) + STRATEGIES),
)
def test_any_integers_validate(raw, node, strategy):
    """Huge and negative counts and indices, in both modes and every strategy: a verdict, never an
    exception, and a GPU is laid out only when its counts are within the maximum."""
    cfg = config(*[(d, f, e, items if e else {}) for d, f, e, items in raw])
    (report,) = validate(cfg, strategy=strategy)
    assert report.valid == (not report.errors)
    (report,) = validate(cfg, node=node, strategy=strategy)
    assert len(report.gpus) == len(node)
    for result in report.gpus:
        if result.layout is not None:
            assert len(result.mig_devices) <= 7 * 7  # one string per MIG device: bounded by the GPU

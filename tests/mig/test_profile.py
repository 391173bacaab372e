"""Profile grammar (go-nvlib's), its naming formula and the compute sub-profile filter."""

from __future__ import annotations

import pytest

from migops.mig.profile import (
    MigProfile,
    ProfileSyntaxError,
    compute_subprofile_allowed,
    memory_gb_for_fraction,
    parse_profile,
    profile_problem,
)


@pytest.mark.parametrize(
    "text,expected",
    [
        ("1g.10gb", MigProfile(gpu=1, compute=1, memory_gb=10)),
        ("7g.80gb", MigProfile(gpu=7, compute=7, memory_gb=80)),
        ("1c.3g.20gb", MigProfile(gpu=3, compute=1, memory_gb=20)),
        ("1g.10gb+me", MigProfile(gpu=1, compute=1, memory_gb=10, attributes=("me",))),
        ("1g.24gb+me.all", MigProfile(gpu=1, compute=1, memory_gb=24, attributes=("me.all",))),
        ("1g.24gb-me", MigProfile(gpu=1, compute=1, memory_gb=24, attributes=("me",), negative=True)),
        ("4g.96gb+gfx", MigProfile(gpu=4, compute=4, memory_gb=96, attributes=("gfx",))),
        ("1g.24gb+me,gfx", MigProfile(gpu=1, compute=1, memory_gb=24, attributes=("gfx", "me"))),
        ("2c.7g.80gb+me", MigProfile(gpu=7, compute=2, memory_gb=80, attributes=("me",))),
        ("3g.20gb+ME1", MigProfile(gpu=3, compute=3, memory_gb=20, attributes=("ME1",))),
    ],
)
def test_valid(text, expected):
    assert parse_profile(text) == expected
    assert profile_problem("p", text) is None


@pytest.mark.parametrize(
    "text,canonical",
    [
        ("1g.10gb", "1g.10gb"),
        ("1c.3g.20gb", "1c.3g.20gb"),
        ("3c.3g.20gb", "3g.20gb"),
        ("1g.24gb+me.all", "1g.24gb+me.all"),
        ("1g.24gb-me", "1g.24gb-me"),
        ("1g.5gb+me,gfx", "1g.5gb+gfx,me"),
    ],
)
def test_canonical_name(text, canonical):
    assert str(parse_profile(text)) == canonical


def test_gi_name_and_flags():
    p = parse_profile("1c.3g.20gb")
    assert p.gi_name == "3g.20gb" and p.is_compute_subprofile
    assert not parse_profile("3g.20gb").is_compute_subprofile
    assert parse_profile("1g.10gb+me").has_media_extensions
    assert parse_profile("1g.24gb+me.all").has_media_extensions
    assert not parse_profile("1g.24gb-me").has_media_extensions
    assert not parse_profile("1g.24gb+gfx").has_media_extensions


def test_attribute_order_does_not_matter():
    assert parse_profile("1g.24gb+me,gfx") == parse_profile("1g.24gb+gfx,me")


REJECTED = {
    "empty": "",
    "plus and minus": "1g.10gb+me-gfx",
    "minus then plus": "1g.10gb-me+gfx",
    "one field": "1g",
    "four fields": "1c.1c.3g.20gb",
    "trailing dot field": "1g.10gb.",
    "missing c": "1.3g.20gb",
    "wrong c letter": "1x.3g.20gb",
    "missing g": "1.10gb",
    "missing gb": "1g.10",
    "gb as g": "1g.10g",
    "non-numeric g": "ag.10gb",
    "non-numeric gb": "1g.xgb",
    "non-numeric c": "xc.3g.20gb",
    "empty number": "g.10gb",
    "negative number": "1g.-10gb",
    "non-ascii digit": "\uff11g.10gb",
    "leading space": " 1g.10gb",
    "trailing space": "1g.10gb ",
    "inner space": "1g. 10gb",
    "space in attribute": "1g.10gb+ me",
    "empty attribute": "1g.10gb+",
    "empty attribute in list": "1g.10gb+me,,gfx",
    "empty negative attribute": "1g.24gb-",
    "duplicate attribute": "1g.10gb+me,me",
    "attribute starts with digit": "1g.10gb+1me",
    "attribute starts with dot": "1g.10gb+.me",
    "attribute ends with dot": "1g.10gb+me.",
    "attribute underscore": "1g.10gb+m_e",
    "attribute hyphen": "1g.10gb+me-x",
    "attribute non-ascii": "1g.10gb+m\u00e9",
    "attribute plus": "1g.10gb+me+gfx",
}


@pytest.mark.parametrize("text", REJECTED.values(), ids=REJECTED.keys())
def test_rejected(text):
    with pytest.raises(ProfileSyntaxError):
        parse_profile(text)
    problem = profile_problem("mig-devices.x", text)
    assert problem is not None and problem.rule == "profile-syntax" and problem.path == "mig-devices.x"


def test_rejection_messages_say_why():
    with pytest.raises(ProfileSyntaxError, match="both"):
        parse_profile("1g.10gb+me-gfx")
    with pytest.raises(ProfileSyntaxError, match="wrong number of fields"):
        parse_profile("1c.1c.3g.20gb")
    with pytest.raises(ProfileSyntaxError, match="non-unique"):
        parse_profile("1g.10gb+me,me")
    with pytest.raises(ProfileSyntaxError, match="number"):
        parse_profile("1g.10gb+1me")
    with pytest.raises(ProfileSyntaxError, match="empty"):
        parse_profile("")


@pytest.mark.parametrize("value", [None, 1, 1.5, b"1g.10gb", ["1g.10gb"]])
def test_non_string_rejected(value):
    with pytest.raises(ProfileSyntaxError):
        parse_profile(value)
    assert profile_problem("p", value).rule == "profile-syntax"


# --- naming formula --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "memory_slices,total_slices,total_gib,gb",
    [
        (1, 8, 141, 18),
        (2, 8, 141, 35),
        (4, 8, 141, 71),
        (8, 8, 141, 141),  # H200: 17.6->18, 35.25->35, 70.5->71
        (1, 8, 186, 23),
        (2, 8, 186, 47),
        (4, 8, 186, 93),
        (8, 8, 186, 186),  # GB200: 23.25, 46.5, 93
        (1, 8, 189, 24),
        (4, 8, 189, 95),  # GB200 early drivers: the 1g.24gb / 3g.95gb names
        (8, 8, 80, 80),
        (8, 8, 79, 79),
        (1, 8, 80, 10),
        (2, 8, 40, 10),
        (1, 8, 40, 5),  # A100
        (1, 8, 94, 12),
        (4, 8, 94, 47),
        (4, 8, 96, 48),  # H100 NVL / 96GB
        (1, 4, 24, 6),
        (2, 4, 24, 12),
        (4, 4, 24, 24),  # A30
        (3, 12, 96, 24),
        (6, 12, 96, 48),
        (12, 12, 96, 96),  # RTX PRO 6000
        (1, 12, 96, 12),  # 1/12 rounds UP to 1/8
        (3, 8, 80, 30),  # 3/8 is already a whole eighth: 30
    ],
)
def test_naming_formula(memory_slices, total_slices, total_gib, gb):
    assert memory_gb_for_fraction(memory_slices, total_slices, total_gib) == gb


def test_naming_formula_rounds_half_away_from_zero():
    # 4/8 of 141 = 70.5 -> 71 (banker's rounding would give 70); 2/8 of 186 = 46.5 -> 47 (not 46)
    assert memory_gb_for_fraction(4, 8, 141) == 71
    assert memory_gb_for_fraction(2, 8, 186) == 47
    assert round(70.5) == 70  # the trap the formula avoids


# --- compute sub-profiles --------------------------------------------------------------------------

ALLOWED = {7: {1, 2, 3, 4, 7}, 4: {1, 2, 4}, 3: {1, 2, 3}, 2: {1, 2}, 1: {1}}


@pytest.mark.parametrize("gpu", sorted(ALLOWED))
def test_compute_subprofile_allowed(gpu):
    allowed = {c for c in range(0, 9) if compute_subprofile_allowed(c, gpu)}
    assert allowed == ALLOWED[gpu]

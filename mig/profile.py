"""MIG profile strings: the grammar mig-parted accepts and the naming formula drivers use.

Grammar and messages follow go-nvlib's ParseMigProfile (vendored by mig-parted): `<g>g.<gb>gb` or
`<c>c.<g>g.<gb>gb`, optionally followed by `+attr[,attr...]` or `-attr[,attr...]`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property, lru_cache

from migops.mig.problems import MigError, Problem


class ProfileSyntaxError(ValueError):
    """A profile string that mig-parted would reject; the message says why."""


@dataclass(frozen=True, order=True)
class MigProfile:
    """A parsed profile string. `gpu` is the GPU-instance size (G), `compute` the compute-instance size (C)."""

    gpu: int
    compute: int
    memory_gb: int
    attributes: tuple[str, ...] = ()  # sorted; compared as a set, as mig-parted's Matches() does
    negative: bool = False  # True for `-attr` (e.g. 1g.24gb-me)

    @property
    def gi_name(self) -> str:
        """The GPU-instance profile this string names (the CI part dropped): what the catalogue lists."""
        return f"{self.gpu}g.{self.memory_gb}gb{self._attribute_suffix()}"

    @property
    def is_compute_subprofile(self) -> bool:
        return self.compute != self.gpu

    @property
    def has_media_extensions(self) -> bool:
        """`+me` / `+me.all` instances own the GPU's single set of media engines (NVJPG, OFA)."""
        return not self.negative and any(a == "me" or a.startswith("me.") for a in self.attributes)

    def _attribute_suffix(self) -> str:
        if not self.attributes:
            return ""
        return ("-" if self.negative else "+") + ",".join(self.attributes)

    def __str__(self) -> str:
        return self._text

    @cached_property  # written into messages and MIG device lists for every geometry of a large file
    def _text(self) -> str:
        base = f"{self.gpu}g.{self.memory_gb}gb"
        if self.is_compute_subprofile:
            base = f"{self.compute}c.{base}"
        return base + self._attribute_suffix()


def _parse_field(text: str, suffix: str) -> int:
    if text.strip() != text:
        raise ProfileSyntaxError(f"leading or trailing spaces in {text!r}")
    if not text.endswith(suffix):
        raise ProfileSyntaxError(f"missing {suffix!r} from {text!r}")
    digits = text[: -len(suffix)]
    if not digits.isascii() or not digits.isdigit():
        raise ProfileSyntaxError(f"{digits!r} in {text!r} is not a number")
    if len(digits.lstrip("0")) > 19 or int(digits) >= 1 << 63:  # Go's strconv.Atoi: a 64-bit int
        raise ProfileSyntaxError(f"{digits!r} in {text!r} is out of range (more than 64 bits)")
    return int(digits)


def _parse_attributes(text: str) -> tuple[str, ...]:
    attributes = text.split(",")
    for attr in attributes:
        if attr == "":
            raise ProfileSyntaxError("empty attribute in list")
        if attr.strip() != attr:
            raise ProfileSyntaxError(f"leading or trailing spaces in attribute {attr!r}")
        if attr[0].isdigit():
            raise ProfileSyntaxError(f"attribute {attr!r} begins with a number")
        if attr[0] == "." or attr[-1] == ".":
            raise ProfileSyntaxError(f"attribute {attr!r} begins or ends with a '.'")
        if not all(ch.isascii() and (ch.isalnum() or ch == ".") for ch in attr):
            raise ProfileSyntaxError(f"attribute {attr!r} has a character outside [A-Za-z0-9.]")
    if len(set(attributes)) != len(attributes):
        raise ProfileSyntaxError("non-unique attribute in list")
    return tuple(sorted(attributes))


def parse_profile(text: str) -> MigProfile:
    """Parse a profile string exactly as mig-parted does; raises ProfileSyntaxError."""
    # Checked before the cache: an unhashable argument (a list) would otherwise raise TypeError.
    if not isinstance(text, str):
        raise ProfileSyntaxError(f"profile must be a string, not {type(text).__name__}")
    return _parse_profile(text)


@lru_cache(maxsize=4096)
def _parse_profile(text: str) -> MigProfile:
    if text == "":
        raise ProfileSyntaxError("profile is the empty string")
    plus = text.split("+", 1)
    minus = text.split("-", 1)
    if len(plus) > 1 and len(minus) > 1:
        raise ProfileSyntaxError("profile has both '+' and '-' attributes")
    negative = len(plus) == 1 and len(minus) > 1
    parts = minus if negative else plus
    fields = parts[0].split(".")
    if len(fields) == 3:
        compute = _parse_field(fields[0], "c")
        gpu = _parse_field(fields[1], "g")
        memory_gb = _parse_field(fields[2], "gb")
    elif len(fields) == 2:
        gpu = _parse_field(fields[0], "g")
        memory_gb = _parse_field(fields[1], "gb")
        compute = gpu
    else:
        raise ProfileSyntaxError(f"parsed wrong number of fields in {parts[0]!r}, expected 2 or 3")
    attributes = _parse_attributes(parts[1]) if len(parts) > 1 else ()
    return MigProfile(gpu=gpu, compute=compute, memory_gb=memory_gb, attributes=attributes, negative=negative)


def compute_subprofile_allowed(compute: int, gpu: int) -> bool:
    """mig-parted's discovery filter: a C-slice CI exists in a G-slice GI iff C == G or (C < G and 2C <= G+1).

    So a 7g GI offers 1c, 2c, 3c, 4c, 7c; a 4g GI 1c, 2c, 4c; a 3g GI 1c, 2c, 3c.
    """
    return 0 < compute <= gpu and (compute == gpu or 2 * compute <= gpu + 1)


def memory_gb_for_fraction(memory_slices: int, total_slices: int, total_gib: int) -> int:
    """The `<N>gb` in a profile name (go-nvlib getMigMemorySizeGB).

    The instance's share of memory is rounded up to the next 1/8, multiplied by the GPU's total
    memory in whole GiB, and rounded half away from zero. Names therefore drift when a driver
    reports a different total (7g.79gb vs 7g.80gb; 1g.24gb vs 1g.23gb).
    """
    eighths = math.ceil(Fraction(memory_slices, total_slices) * 8)
    value = Fraction(eighths, 8) * total_gib
    return math.floor(value + Fraction(1, 2))


def profile_problem(path: str, text: object) -> Problem | None:
    """The grammar check as a Problem (rule 11 of the config format), or None when the string parses."""
    try:
        parse_profile(text)  # type: ignore[arg-type]
    except ProfileSyntaxError as exc:
        return Problem(path, "profile-syntax", f"invalid MIG profile {text!r}: {exc}")
    except TypeError:
        return Problem(path, "profile-syntax", f"invalid MIG profile {text!r}: not a string")
    return None


__all__ = [
    "MigError",
    "MigProfile",
    "ProfileSyntaxError",
    "compute_subprofile_allowed",
    "memory_gb_for_fraction",
    "parse_profile",
    "profile_problem",
]

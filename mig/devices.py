"""PCI device IDs as mig-parted reads and prints them (`0x233010DE`, optionally `:0x16C110DE`)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

NVIDIA_VENDOR = 0x10DE


class DeviceIdSyntaxError(ValueError):
    pass


@dataclass(frozen=True, order=True)
class DeviceId:
    """Device and vendor (and optionally the subsystem pair) of a PCI function."""

    device: int
    vendor: int
    subsystem_device: int | None = None
    subsystem_vendor: int | None = None

    @cached_property  # the catalogue's key: looked up for every device-filter item of a large file
    def primary(self) -> str:
        """mig-parted's printed form, `0x%04X%04X`: the key of the GPU catalogue."""
        return f"0x{self.device:04X}{self.vendor:04X}"

    def __str__(self) -> str:
        if self.subsystem_device is None:
            return self.primary
        return f"{self.primary}:0x{self.subsystem_device:04X}{self.subsystem_vendor:04X}"

    def matches(self, gpu: DeviceId) -> bool:
        """Filter semantics: without a subsystem part match device+vendor, with one match all four.

        A GPU whose subsystem is unknown (catalogue models and node labels carry only the primary ID)
        is taken to match: the filter names that model, so its entry must be checked on it."""
        if (self.device, self.vendor) != (gpu.device, gpu.vendor):
            return False
        if self.subsystem_device is None or gpu.subsystem_device is None:
            return True
        return (self.subsystem_device, self.subsystem_vendor) == (gpu.subsystem_device, gpu.subsystem_vendor)


def _parse_u32(text: str) -> int:
    """Go's strconv.ParseUint(s, 0, 32): 0x hex, 0o/0 octal, 0b binary, decimal; underscores allowed."""
    body = text
    # Python's int() takes a sign and any script's digits ("٣" is 3); Go's ParseUint takes neither.
    if body.startswith(("+", "-")) or not body.isascii():
        raise DeviceIdSyntaxError(f"{text!r} is not a number (expected a PCI ID such as 0x233010DE)")
    if body[:1] == "0" and len(body) > 1 and body[1].isdigit():
        body = "0o" + body[1:]  # Go reads a leading 0 as octal
    try:
        value = int(body, 0)
    except ValueError:
        raise DeviceIdSyntaxError(f"{text!r} is not a number (expected a PCI ID such as 0x233010DE)") from None
    if not 0 <= value <= 0xFFFFFFFF:
        raise DeviceIdSyntaxError(f"{text!r} does not fit in 32 bits")
    return value


def parse_device_id(text: str) -> DeviceId:
    """Parse `0xDDDDVVVV[:0xSSSSVVVV]` (device in the high 16 bits, vendor in the low 16)."""
    if not isinstance(text, str) or text.strip() != text or not text:
        raise DeviceIdSyntaxError(f"{text!r} is not a PCI device ID such as 0x233010DE")
    main, sep, sub = text.partition(":")
    value = _parse_u32(main)
    if sep:
        sub_value = _parse_u32(sub)
        return DeviceId(value >> 16, value & 0xFFFF, sub_value >> 16, sub_value & 0xFFFF)
    return DeviceId(value >> 16, value & 0xFFFF)

"""PCI device IDs as mig-parted parses them (Go strconv.ParseUint(s, 0, 32)) and matches them."""

from __future__ import annotations

import pytest

from migops.mig.devices import DeviceId, DeviceIdSyntaxError, parse_device_id


@pytest.mark.parametrize(
    "text,device,vendor",
    [
        ("0x233010DE", 0x2330, 0x10DE),
        ("0X233010de", 0x2330, 0x10DE),
        ("0x_2330_10DE", 0x2330, 0x10DE),  # Go allows underscores with a base prefix
        (str(0x233010DE), 0x2330, 0x10DE),  # decimal
        ("0o" + format(0x233010DE, "o"), 0x2330, 0x10DE),
        ("0" + format(0x233010DE, "o"), 0x2330, 0x10DE),  # a leading 0 means octal in Go
    ],
)
def test_parse(text, device, vendor):
    parsed = parse_device_id(text)
    assert (parsed.device, parsed.vendor, parsed.subsystem_device) == (device, vendor, None)
    assert parsed.primary == "0x233010DE" == str(parsed)


def test_parse_with_subsystem():
    parsed = parse_device_id("0x233010DE:0x16C110DE")
    assert parsed == DeviceId(0x2330, 0x10DE, 0x16C1, 0x10DE)
    assert str(parsed) == "0x233010DE:0x16C110DE" and parsed.primary == "0x233010DE"


@pytest.mark.parametrize(
    "text",
    [
        "",
        " 0x233010DE",
        "0x233010DE ",
        "0xZZZ",
        "MODEL",
        "0x",
        "09",
        "0x1_0000_0000",
        "+0x233010DE",
        "-1",
        "0x233010DE:",
        ":0x16C110DE",
        "0x233010DE:0xZZ",
        "0x2330 10DE",
        "1__0",
        "٣",  # int() reads any script's digits; Go's ParseUint only ASCII
        "0٣",
        "²",
    ],
)
def test_rejected(text):
    with pytest.raises(DeviceIdSyntaxError):
        parse_device_id(text)


@pytest.mark.parametrize("value", [None, 0x233010DE, b"0x233010DE"])
def test_rejected_non_strings(value):
    with pytest.raises(DeviceIdSyntaxError):
        parse_device_id(value)


def test_matching():
    gpu = DeviceId(0x2330, 0x10DE, 0x16C1, 0x10DE)
    assert parse_device_id("0x233010DE").matches(gpu)
    assert parse_device_id("0x233010DE:0x16C110DE").matches(gpu)
    assert not parse_device_id("0x233010DE:0x16C210DE").matches(gpu)
    assert not parse_device_id("0x233110DE").matches(gpu)
    # a GPU whose subsystem is unknown (a catalogue model) is the model the filter names
    assert parse_device_id("0x233010DE:0x16C110DE").matches(DeviceId(0x2330, 0x10DE))
    assert not parse_device_id("0x233110DE:0x16C110DE").matches(DeviceId(0x2330, 0x10DE))

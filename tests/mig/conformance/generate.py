"""Writes corpus.json: the inputs whose verdicts NVIDIA's own parser recorded in verdicts.json.

Every input is written here, by hand or by a mutation of the repository's own examples; nothing comes
from mig-parted's repository. Run `python tests/mig/conformance/generate.py` after changing it, then
re-record the verdicts as docs/config-rules.md ("Conformance with mig-parted") describes; the test
refuses a corpus whose inputs changed since they were recorded.

Each entry: id (unique, stable), about (what it exercises), and the input as `text`, or `base64` for
bytes that are not UTF-8, or `pattern` ({head, chunk, times, tail}) for the few large inputs.
"""
from __future__ import annotations

import base64
import json
import re
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
CORPUS = HERE / "corpus.json"

ENTRIES: list[dict[str, object]] = []


def _unique(id_: str) -> str:
    """Two inputs whose names slug alike (`MIG-CONFIGS`, `mig_configs`) get -2, -3, ... in order."""
    taken = {e["id"] for e in ENTRIES}
    n, base = 1, id_
    while id_ in taken:
        n += 1
        id_ = f"{base}-{n}"
    return id_


def add(id_: str, about: str, text: str | bytes) -> None:
    id_ = _unique(id_)
    entry: dict[str, object] = {"id": id_, "about": about}
    if isinstance(text, bytes):
        try:
            entry["text"] = text.decode("utf-8")
        except UnicodeDecodeError:
            entry["base64"] = base64.b64encode(text).decode()
    else:
        entry["text"] = text
    ENTRIES.append(entry)


def add_pattern(id_: str, about: str, head: str, chunk: str, times: int, tail: str) -> None:
    ENTRIES.append({"id": _unique(id_), "about": about, "pattern": {"head": head, "chunk": chunk, "times": times,
                                                          "tail": tail}})


def slug(text: str) -> str:
    s = re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower()
    return s or "empty"


def doc(configs: str, version: str = "version: v1\n") -> str:
    return version + "mig-configs:\n" + configs


def one(entry: str, name: str = "custom") -> str:
    """A document with one config of one entry; `entry` is the entry's fields, one per line."""
    lines = entry.strip("\n").split("\n")
    body = "    - " + lines[0] + "\n" + "".join("      " + line + "\n" for line in lines[1:])
    return doc(f"  {name}:\n{body}")


ENABLED = "devices: all\nmig-enabled: true\nmig-devices:\n  \"1g.10gb\": 7"
DISABLED = "devices: all\nmig-enabled: false"


# --- the spec's rules ----------------------------------------------------------------------------------

def spec_rules() -> None:
    add("spec-valid-enabled", "an entry that enables MIG with one profile", one(ENABLED))
    add("spec-valid-disabled", "an entry that disables MIG", one(DISABLED))
    add("spec-valid-two-configs", "two configs, two entries each",
        doc("  a:\n    - devices: [0]\n      mig-enabled: false\n    - devices: [1]\n      mig-enabled: true\n"
            "      mig-devices: {\"3g.40gb\": 2}\n  b:\n    - devices: all\n      mig-enabled: false\n"))
    add("spec-valid-filter-string", "device-filter as a string",
        one('device-filter: "0x233010DE"\n' + ENABLED))
    add("spec-valid-filter-list", "device-filter as a list",
        one('device-filter: ["0x233010DE", "0x20B010DE"]\n' + ENABLED))
    add("spec-valid-filter-subsystem", "device-filter with a subsystem ID",
        one('device-filter: "0x233010DE:0x16C110DE"\n' + ENABLED))
    add("spec-valid-enabled-empty-devices", "mig-enabled true with an empty mig-devices map",
        one("devices: all\nmig-enabled: true\nmig-devices: {}"))
    add("spec-valid-disabled-empty-devices", "mig-enabled false with an empty mig-devices map",
        one("devices: all\nmig-enabled: false\nmig-devices: {}"))
    add("spec-valid-disabled-null-devices", "mig-enabled false with mig-devices null",
        one("devices: all\nmig-enabled: false\nmig-devices: null"))
    add("spec-valid-zero-and-positive", "a zero count beside a positive one",
        one('devices: all\nmig-enabled: true\nmig-devices: {"1g.10gb": 0, "2g.20gb": 1}'))
    add("spec-rule1-missing-version", "no version field",
        "mig-configs:\n  c:\n    - devices: all\n      mig-enabled: false\n")
    add("spec-version-only", "only version: v1 (no mig-configs)", "version: v1\n")
    for i, v in enumerate(["v2", "V1", '"v1 "', "1", "1.0", "true", "null", "~", "", "[v1]", "{a: b}", '""',
                           '"v1"', "'v1'", "!!str v1", "!foo v1", "v1.0", "|\n  v1", ">-\n  v1", "|-\n  v1",
                           "\"\\x76\\u0031\"", "v1 # comment", "!!binary djE="]):
        add(f"spec-rule2-version-{i:02d}-{slug(v)}", f"version: {v}",
            f"version: {v}\nmig-configs:\n  c:\n    - devices: all\n      mig-enabled: false\n")
    for field in ["extra: 1", "Version: v1", "MIG-CONFIGS: {}", "mig_configs: {}", "migConfigs: {}",
                  "kind: Config", "metadata: {name: x}", "? complex\n: key"]:
        add(f"spec-rule3-top-{slug(field)}", f"an unexpected top-level field ({field!r})",
            one(DISABLED) + field + "\n")
    for v in ["{}", "null", "~", "", "[]", "x", "1", "[{devices: all, mig-enabled: false}]"]:
        add(f"spec-rule4-mig-configs-{slug(v)}", f"mig-configs: {v}", f"version: v1\nmig-configs: {v}\n")
    for v in ["[]", "null", "~", "", "{}", "x", "1", "{devices: all, mig-enabled: false}"]:
        add(f"spec-rule5-config-{slug(v)}", f"a config that is {v!r}", f"version: v1\nmig-configs:\n  c: {v}\n")
    add("spec-rule6-missing-devices", "entry without devices", one("mig-enabled: false"))
    add("spec-rule6-missing-enabled", "entry without mig-enabled", one("devices: all"))
    add("spec-rule6-empty-entry", "entry {}", doc("  c:\n    - {}\n"))
    add("spec-rule6-null-entry", "entry null", doc("  c:\n    - null\n"))
    add("spec-rule6-tilde-entry", "entry ~", doc("  c:\n    - ~\n"))
    add("spec-rule6-empty-item", "entry with nothing after the dash", doc("  c:\n    -\n"))
    for v in ["x", "1", "[]", "[all]", "true"]:
        add(f"spec-entry-not-a-map-{slug(v)}", f"entry {v!r}", doc(f"  c:\n    - {v}\n"))
    for field in ["mig-device: {}", "Devices: all", "MIG-ENABLED: false", "device_filter: x", "extra: 1",
                  "migEnabled: false", "mig-devices : {}", "\"devices \": all"]:
        add(f"spec-rule7-entry-{slug(field)}", f"an unexpected entry field ({field!r})",
            one(DISABLED + "\n" + field))
    devices = ["all", '"all"', "All", "ALL", '"all "', '""', "null", "~", "", "0", "[0, 1]", "[]", "[-1]",
               "[0.0]", "[1.5]", '["0"]', "[true]", "[null]", "[~]", "[[0]]", "{a: 1}", "[9223372036854775807]",
               "[9223372036854775808]", "[-9223372036854775808]", "[-9223372036854775809]", "[1e18]", "[1e19]",
               "[1e20]", "[1e21]", "[0x10]", "[0o7]", "[07]", "[08]", "[1_0]", "[+1]", "[y]", "[1.]", "[-0]",
               "[-0.0]", "[.inf]", "[.nan]", "[0b11]", "[99999999999999999999]", "[1e400]", "[2e-400]",
               "[0x7FFFFFFFFFFFFFFF]", "[0xFFFFFFFFFFFFFFFF]", "[1, 1]", "[0, -0]", "!!seq [1]", "!foo [2]",
               "[!!int '3']", "[!!float 3]", "[\"1\"]", "all # comment", "[ 0 , 1 ]", "\n  - 0\n  - 1",
               "\n- 0\n- 1"]
    for i, v in enumerate(devices):
        body = f"devices: {v}\nmig-enabled: false" if not v.startswith("\n") else None
        if body is None:
            text = doc(f"  c:\n    - mig-enabled: false\n      devices:{v.replace(chr(10), chr(10) + '      ')}\n")
        else:
            text = one(body)
        add(f"spec-rule8-devices-{i:02d}-{slug(v)}", f"devices: {v!r}", text)
    filters = ['"0x233010DE"', "0x233010DE", "'0x233010DE'", '["0x233010DE"]', "[]", '""', "null", "~", "",
               "1", "[1]", "[null]", "[~]", '[["0x233010DE"]]', "{a: b}", "true", '"garbage"', "[y]", "[yes]",
               '["0x233010DE", "0x20B010DE"]', '"0x233010DE:0x16C110DE"', "[0x233010DE]", '[""]',
               "!!str 0x233010DE", "[!!str 1]", "0X233010DE", "[1.5]"]
    for i, v in enumerate(filters):
        add(f"spec-rule9-filter-{i:02d}-{slug(v)}", f"device-filter: {v!r}",
            one(f"device-filter: {v}\ndevices: all\nmig-enabled: false"))
    bools = ["true", "false", "True", "TRUE", "False", "FALSE", "yes", "no", "Yes", "NO", "y", "n", "Y", "N",
             "on", "off", "On", "OFF", '"true"', "1", "0", "null", "~", "", "[true]", "{}", "1.0", '"yes"',
             "yEs", "tRUE", "!!bool yes", "!!bool 1", "!!str true", "!foo true", "t", "f", ".true"]
    for i, v in enumerate(bools):
        add(f"spec-rule10-enabled-{i:02d}-{slug(v)}", f"mig-enabled: {v!r} with mig-devices",
            one(f'devices: all\nmig-enabled: {v}\nmig-devices: {{"1g.10gb": 1}}'))
        add(f"spec-rule10-enabled-alone-{i:02d}-{slug(v)}", f"mig-enabled: {v!r} without mig-devices",
            one(f"devices: all\nmig-enabled: {v}"))
    for v in ["[1g.10gb]", '"1g.10gb"', "7", "true", "[]", '""']:
        add(f"spec-rule11-mig-devices-{slug(v)}", f"mig-devices: {v!r}",
            one(f"devices: all\nmig-enabled: true\nmig-devices: {v}"))
    counts = ["0", "1", "-1", "1.0", "1.5", '"1"', "true", "null", "~", "", "1e2", "0x7", "07", "08", "1_0",
              "9223372036854775807", "9223372036854775808", "-9223372036854775808", "99999999999999999999",
              "-0", "-0.0", ".inf", ".nan", "1e21", "1e20", "7.", "7e0", "0o7", "0O7", "0X7", "0B111", "09",
              "+7", "1e-1", "[1]", "{}", "y", "!!int 7", "!!float 7", "!!str 7", "!foo 7", "'7'", "0b",
              "0x", "1e400", "1.0e+2", "100_000_000_000", "18446744073709551615", "18446744073709551616",
              "9.2233720368547758e18", "9.2e18", "-9.3e18", "0.0000001", "1__0", "_1", "1_", "0x_1F"]
    for i, v in enumerate(counts):
        add(f"spec-rule11-count-{i:02d}-{slug(v)}", f"a count of {v!r}",
            one(f"devices: all\nmig-enabled: true\nmig-devices:\n  \"1g.10gb\": {v}"))
    add("spec-rule11-all-zero", "all counts 0", one('devices: all\nmig-enabled: true\nmig-devices: {"1g.10gb": 0, "2g.20gb": 0}'))
    add("spec-rule11-null-and-zero", "a null count and a zero count",
        one('devices: all\nmig-enabled: true\nmig-devices: {"1g.10gb": null, "2g.20gb": 0}'))
    add("spec-rule11-null-and-one", "a null count beside a positive one",
        one('devices: all\nmig-enabled: true\nmig-devices: {"1g.10gb": ~, "2g.20gb": 1}'))
    for v in ["", "  mig-devices:", "  mig-devices: null", "  mig-devices: ~"]:
        tail = ("\n" + v.strip()) if v else ""
        add(f"spec-rule12-{slug(v) if v else 'absent'}", f"mig-enabled true, mig-devices {v.strip() or 'absent'}",
            one("devices: all\nmig-enabled: true" + tail))
    add("spec-rule13-disabled-with-devices", "mig-enabled false with a profile",
        one('devices: all\nmig-enabled: false\nmig-devices: {"1g.10gb": 1}'))
    add("spec-rule13-disabled-all-zero", "mig-enabled false with only zero counts",
        one('devices: all\nmig-enabled: false\nmig-devices: {"1g.10gb": 0}'))
    add("spec-rule13-null-enabled-with-devices", "mig-enabled null (false) with a profile",
        one('devices: all\nmig-enabled: ~\nmig-devices: {"1g.10gb": 1}'))
    add("spec-rule13-empty-enabled-with-devices", "mig-enabled empty (false) with a profile",
        one('devices: all\nmig-enabled:\nmig-devices: {"1g.10gb": 1}'))


# --- profile names (go-nvlib's grammar) ----------------------------------------------------------------

PROFILES = [
    "1g.10gb", "1c.1g.10gb", "1c.2g.20gb", "2c.7g.80gb", "7g.80gb", "1g.10gb+me", "1g.10gb+me.all",
    "1g.10gb-me", "1g.24gb+gfx", "1g.24gb+me,gfx", "1g.24gb+gfx,me", "1g.10gb+me,me", "1g.10gb+",
    "1g.10gb-", "1g.10gb+me-x", "1g.10gb+ME", "1g.10gb+m e", "1g.10gb+1me", "1g.10gb+.me", "1g.10gb+me.",
    "1g.10gb+me_x", "1g.10gb+,me", "1g.10gb+ me", "1G.10GB", "1g.10GB", "1g10gb", "1g.10", "1.10gb",
    "g.10gb", "1g.gb", "0g.0gb", "99g.999gb", "01g.010gb", "1g.1.5gb", "1g.10gb.x", "1c.1g.10gb.x",
    " 1g.10gb", "1g.10gb ", "1g .10gb", "1g. 10gb", "1c.1g", "1c..10gb", "-1g.10gb", "+1g.10gb",
    "1g.-10gb", "1g.+10gb", "99999999999999999999g.10gb", "1g.99999999999999999999gb",
    "9223372036854775807g.1gb", "1g.10mb", "1gb.10gb", "1c.1c.10gb", "1g.10gb+me.all.x", "1g.10gb+a1",
    "1g.10gb-me,gfx", "1g.10gb+gfx-me", "", "1g.10gb\u00a0", "１g.10gb", "1g.10gb+mé", "1g.10gb\t",
    "3g.40gb", "4g.40gb", "2g.20gb", "1g.12gb", "1g.5gb+me", "1g.20gb", "1c.3g.40gb", "2c.3g.40gb",
]


def profiles() -> None:
    for i, p in enumerate(PROFILES):
        add(f"profile-{i:02d}-{slug(p)}", f"the profile name {p!r}",
            one(f"devices: all\nmig-enabled: true\nmig-devices:\n  {json.dumps(p)}: 1"))


# --- YAML corners: keys (config names) -----------------------------------------------------------------

KEYS = ["y", "Y", "yes", "Yes", "YES", "n", "N", "no", "on", "off", "ON", "true", "True", "false", "1", "01",
        "0x10", "0o17", "0b11", "1_000", "1.5", "1.50", "1e3", "1e39", "-0", "+1", ".5", "1.", "2024-01-01",
        "2024-1-1", "2001-12-14t21:59:43.10-05:00", "2001-12-14 21:59:43.10", "1:00", "~", "null", "NULL",
        "'~'", '"y"', "'yes'", "9223372036854775807", "9223372036854775808", "99999999999999999999", ".inf",
        "-.inf", ".nan", "1234567.0", "16777217.0", "0.1", "3.14159265358979", "1e-7", "100000.0",
        "1000000.0", "-1", "0", "00", "08", "0.0", "-0.0", "=", "!foo name", "!!str 1", "!!int 1",
        "!!float 1", "!!bool yes", "!!null ''", "!!binary bmFtZQ==", "!!timestamp 2001-01-01", "! 1",
        "\"all-1g.10gb\"", "all-1g.10gb", "a b", "'a: b'", "\"名前\"", "name#x", "\"\"", "''"]


def keys() -> None:
    for i, k in enumerate(KEYS):
        add(f"yaml-key-{i:02d}-{slug(k)}", f"a config named {k!r}",
            doc(f"  {k}:\n    - devices: all\n      mig-enabled: false\n"))
    add("yaml-key-empty-flow", "a config whose key is empty in flow style",
        "version: v1\nmig-configs: {: [{devices: all, mig-enabled: false}]}\n")
    add("yaml-key-explicit-empty", "a config whose key is an explicit empty key",
        doc("  ?\n  : - devices: all\n      mig-enabled: false\n"))
    add("yaml-key-sequence", "a sequence as a key", doc("  ? [a]\n  : - devices: all\n      mig-enabled: false\n"))
    add("yaml-key-mapping", "a mapping as a key", doc("  ? {a: b}\n  : - devices: all\n      mig-enabled: false\n"))
    for a, b in [("y", "true"), ("1", '"1"'), ("1.0", "1"), ("1.5", '"1.5"'), ("yes", "on"), ("0x10", "16"),
                 ("'y'", '"y"')]:
        add(f"yaml-collide-{slug(a)}-{slug(b)}", f"config names {a!r} and {b!r}",
            doc(f"  {a}:\n    - devices: all\n      mig-enabled: false\n"
                f"  {b}:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {{}}\n"))
        add(f"yaml-collide-invalid-{slug(a)}-{slug(b)}", f"config names {a!r} (valid) and {b!r} (invalid)",
            doc(f"  {a}:\n    - devices: all\n      mig-enabled: false\n"
                f"  {b}:\n    - devices: all\n      mig-enabled: 7\n"))
    add("yaml-collide-profile-keys", "profile keys 1g.10gb and '1g.10gb' are the same string",
        one("devices: all\nmig-enabled: true\nmig-devices:\n  1g.10gb: 1\n  '1g.10gb': 2"))
    add("yaml-dup-config", "the same config name twice",
        doc("  a:\n    - devices: all\n      mig-enabled: false\n  a:\n    - devices: all\n"
            "      mig-enabled: true\n      mig-devices: {}\n"))
    add("yaml-dup-version", "version twice", "version: v1\nversion: v1\nmig-configs:\n  a: [{devices: all, mig-enabled: false}]\n")
    add("yaml-dup-version-other", "version twice, the last one v1", "version: v2\nversion: v1\nmig-configs:\n  a: [{devices: all, mig-enabled: false}]\n")
    add("yaml-dup-field", "mig-enabled twice in one entry",
        one("devices: all\nmig-enabled: true\nmig-enabled: false"))
    add("yaml-dup-profile-block", "a profile twice (block)",
        one("devices: all\nmig-enabled: true\nmig-devices:\n  1g.10gb: 1\n  1g.10gb: 2"))
    add("yaml-dup-profile-flow", "a profile twice (flow)",
        one('devices: all\nmig-enabled: true\nmig-devices: {"1g.10gb": 1, "1g.10gb": 2}'))


# --- YAML corners: documents, directives, tags, anchors --------------------------------------------------

VALID = one(ENABLED)


def documents() -> None:
    cases = {
        "empty": "", "newline": "\n", "spaces": "   \n", "comment": "# only a comment\n", "dashes": "---\n",
        "dashes-dots": "---\n...\n", "tilde": "~\n", "null": "null\n", "Null": "Null\n", "empty-map": "{}\n",
        "empty-list": "[]\n", "empty-string": "''\n", "string": "just text\n", "number": "42\n", "bool": "true\n",
        "list": "- a\n- b\n", "json-null": "null", "two-empty-docs": "---\n---\n",
        "trailing-dashes": VALID + "---\n", "trailing-doc": VALID + "---\nversion: v2\n",
        "trailing-garbage-doc": VALID + "---\n: : [\n", "trailing-dots": VALID + "...\n",
        "dots-then-doc": VALID + "...\n---\nx: 1\n", "leading-dashes": "---\n" + VALID,
        "empty-first-doc": "---\n---\n" + VALID, "comment-first-doc": "# c\n---\n" + VALID,
        "second-doc-only-valid": "version: v2\n---\n" + VALID, "dashes-inline": "--- " + VALID,
        "yaml-1.1": "%YAML 1.1\n---\n" + VALID, "yaml-1.2": "%YAML 1.2\n---\n" + VALID,
        "yaml-1.0": "%YAML 1.0\n---\n" + VALID, "yaml-2.0": "%YAML 2.0\n---\n" + VALID,
        "yaml-1.3": "%YAML 1.3\n---\n" + VALID, "tag-directive": "%TAG !e! tag:example.com,2000:\n---\n" + VALID,
        "tag-directive-used": "%TAG !e! tag:example.com,2000:\n---\nversion: !e!x v1\n" + VALID.split("\n", 1)[1],
        "reserved-directive": "%FOO bar\n---\n" + VALID, "directive-no-doc": "%YAML 1.1\n",
        "second-doc-yaml-1.2": VALID + "---\n%YAML 1.2\n---\nx: 1\n",
        "bom-utf8": "\ufeff" + VALID, "crlf": VALID.replace("\n", "\r\n"), "cr": VALID.replace("\n", "\r"),
        "no-final-newline": VALID.rstrip("\n"), "nel": VALID.replace("\n", "\u0085"),
        "line-separator": VALID.replace("\n", "\u2028"), "trailing-spaces": VALID.replace("\n", "   \n"),
        "tab-indent": VALID.replace("    - ", "\t- "), "tab-after-colon": VALID.replace("devices: all", "devices:\tall"),
        "tab-only-line": VALID.replace("version: v1\n", "version: v1\n\t\n"),
        "comment-everywhere": "# a\nversion: v1 # b\nmig-configs: # c\n  # d\n  custom: # e\n    - devices: all # f\n"
                              "      mig-enabled: false # g\n# h\n",
        "json": '{"version": "v1", "mig-configs": {"c": [{"devices": "all", "mig-enabled": false}]}}',
        "json-pretty": '{\n  "version": "v1",\n  "mig-configs": {\n    "c": [\n      {"devices": [0, 1], '
                       '"mig-enabled": true, "mig-devices": {"3g.40gb": 2}}\n    ]\n  }\n}\n',
        "json-trailing-comma": '{"version": "v1", "mig-configs": {"c": [{"devices": "all", "mig-enabled": false},]},}',
        "json-float-count": '{"version": "v1", "mig-configs": {"c": [{"devices": "all", "mig-enabled": true, '
                            '"mig-devices": {"1g.10gb": 7.0}}]}}',
        "json-exp-count": '{"version": "v1", "mig-configs": {"c": [{"devices": "all", "mig-enabled": true, '
                          '"mig-devices": {"1g.10gb": 1e1}}]}}',
        "json-escape": '{"version": "\\u0076\\u0031", "mig-configs": {"c\\u00e9": [{"devices": "all", '
                       '"mig-enabled": false}]}}',
        "json-comment": '{"version": "v1", # c\n "mig-configs": {"c": [{"devices": "all", "mig-enabled": false}]}}',
        "flow-all": "{version: v1, mig-configs: {c: [{devices: all, mig-enabled: true, mig-devices: {1g.10gb: 7}}]}}",
        "flow-multiline": "{version: v1,\n mig-configs: {c: [{devices: all,\n   mig-enabled: false}]}}",
        "flow-colon-no-space": '{"version":"v1","mig-configs":{"c":[{"devices":"all","mig-enabled":false}]}}',
        "flow-plain-colon": "{version:v1, mig-configs: {c: [{devices: all, mig-enabled: false}]}}",
        "compact-seq": "version: v1\nmig-configs:\n  c:\n  - devices: all\n    mig-enabled: false\n",
        "over-indented": "version: v1\nmig-configs:\n        c:\n                - devices: all\n"
                         "                  mig-enabled: false\n",
        "bad-indent": "version: v1\nmig-configs:\n  c:\n    - devices: all\n     mig-enabled: false\n",
        "unclosed-flow": "version: v1\nmig-configs: {c: [\n",
        "unclosed-quote": 'version: "v1\nmig-configs: {}\n',
        "colon-in-value": "version: v1: x\nmig-configs: {}\n",
        "dash-value": "version: -\nmig-configs: {}\n",
        "question-key": "? version\n: v1\nmig-configs:\n  c: [{devices: all, mig-enabled: false}]\n",
        "block-literal-name": "version: v1\nmig-configs:\n  ? |\n    lit\n  : - devices: all\n      mig-enabled: false\n",
        "quoted-multiline-name": 'version: v1\nmig-configs:\n  "a\n   b":\n    - devices: all\n      mig-enabled: false\n',
        "plain-multiline-value": "version: v1\nmig-configs:\n  c:\n    - devices: all\n      mig-enabled:\n        false\n",
        "nul-byte": "version: v1\x00\nmig-configs: {}\n", "control-char": "version: v1\x07\nmig-configs: {}\n",
        "del-char": "version: v1\x7f\nmig-configs: {}\n", "zero-width-name": doc("  c\u200b:\n    - devices: all\n      mig-enabled: false\n"),
        "astral-name": doc("  c\U0001F600:\n    - devices: all\n      mig-enabled: false\n"),
        "escape-in-name": doc('  "c\\x41\\t":\n    - devices: all\n      mig-enabled: false\n'),
        "long-name": doc(f"  {'n' * 300}:\n    - devices: all\n      mig-enabled: false\n"),
        "long-key-1100": doc(f"  {'k' * 1100}:\n    - devices: all\n      mig-enabled: false\n"),
        "anchor-on-doc": "&d\nversion: v1\nmig-configs: {c: [{devices: all, mig-enabled: false}]}\n",
    }
    for name, text in cases.items():
        add(f"yaml-doc-{name}", f"document shape: {name}", text)
    add("yaml-doc-utf16le", "UTF-16LE with a BOM", ("\ufeff" + VALID).encode("utf-16-le"))
    add("yaml-doc-utf16be", "UTF-16BE with a BOM", ("\ufeff" + VALID).encode("utf-16-be"))
    add("yaml-doc-latin1", "Latin-1 bytes (not UTF-8) in a config name",
        doc("  caf\u00e9:\n    - devices: all\n      mig-enabled: false\n").encode("latin-1"))
    add("yaml-doc-invalid-utf8", "an invalid UTF-8 byte in a comment", VALID.encode() + b"# \xff\n")
    add("yaml-doc-overlong-utf8", "an overlong UTF-8 sequence", VALID.encode() + b"# \xc0\xaf\n")
    add("yaml-doc-surrogate-utf8", "a UTF-8-encoded surrogate", VALID.encode() + b"# \xed\xa0\x80\n")


def tags() -> None:
    cases = {
        "version-custom": "version: !foo v1", "version-str": "version: !!str v1",
        "version-nonspecific": "version: ! v1", "version-int": "version: !!int v1",
        "version-binary": "version: !!binary djE=", "version-binary-bad": "version: !!binary djE",
        "version-binary-newlines": "version: !!binary |\n  dj\n  E=", "version-null": "version: !!null ''",
        "version-null-bad": "version: !!null v1", "version-timestamp": "version: !!timestamp v1",
        "version-seq-tag": "version: !!seq v1", "version-map-tag": "version: !!map v1",
        "version-verbatim": "version: !<tag:yaml.org,2002:str> v1", "version-local-verbatim": "version: !<!bar> v1",
        "version-merge-tag": "version: !!merge v1", "version-equals": "version: =",
        "version-merge-plain": "version: <<", "version-str-quoted": 'version: !!str "v1"',
        "version-value-tag": "version: !!value v1", "version-omap-tag": "version: !!omap v1",
    }
    rest = "mig-configs:\n  c: [{devices: all, mig-enabled: false}]\n"
    for name, head in cases.items():
        add(f"yaml-tag-{name}", f"a tagged version ({head!r})", head + "\n" + rest)
    values = {
        "devices-omap": "devices: !!omap [1]", "devices-str-seq": "devices: !!str [1]",
        "devices-custom-seq": "devices: !custom [0]", "devices-map-tag-on-seq": "devices: !!map [0]",
        "devices-timestamp": "devices: 2001-02-30", "devices-bad-date": "devices: 2001-13-01",
        "devices-timestamp-tag": "devices: !!timestamp 2001-01-01", "devices-timestamp-tag-bad": "devices: !!timestamp 99999-01-01",
        "devices-int-tag-all": "devices: !!int all", "devices-str-all": "devices: !!str all",
        "devices-huge-int": "devices: [" + "9" * 500 + "]", "devices-null-tag-seq": "devices: !!null [1]",
        "enabled-bool-tag-maybe": "mig-enabled: !!bool maybe", "enabled-float-tag": "mig-enabled: !!float x",
        "enabled-null-tag": "mig-enabled: !!null", "enabled-null-tag-tilde": "mig-enabled: !!null ~",
        "enabled-str-tag": "mig-enabled: !!str false", "enabled-custom": "mig-enabled: !foo false",
    }
    for name, field in values.items():
        other = "mig-enabled: false" if not field.startswith("mig-enabled") else "devices: all"
        add(f"yaml-tag-{name}", f"a tagged value ({field!r})", one(field + "\n" + other))
    counts = {"int-tag-1.0": "!!int 1.0", "float-tag-int": "!!float 1", "int-tag-hex": "!!int 0x10",
              "int-tag-quoted": "!!int '3'", "str-tag": "!!str 3", "binary-count": "!!binary Mw==",
              "bool-tag": "!!bool y", "null-tag": "!!null", "custom-tag": "!x 3", "nonspecific": "! 3"}
    for name, v in counts.items():
        add(f"yaml-tag-count-{name}", f"a tagged count ({v!r})",
            one(f"devices: all\nmig-enabled: true\nmig-devices:\n  \"1g.10gb\": {v}"))


def anchors() -> None:
    add("yaml-anchor-entry-list", "an anchored entry list used by a second config",
        doc("  a: &e\n    - devices: all\n      mig-enabled: false\n  b: *e\n"))
    add("yaml-anchor-entry", "an anchored entry reused", doc("  a:\n    - &e {devices: all, mig-enabled: false}\n  b:\n    - *e\n"))
    add("yaml-anchor-mig-devices", "anchored mig-devices",
        doc('  a:\n    - devices: [0]\n      mig-enabled: true\n      mig-devices: &m {"1g.10gb": 2}\n'
            "    - devices: [1]\n      mig-enabled: true\n      mig-devices: *m\n"))
    add("yaml-anchor-scalar", "an anchored scalar", "version: &v v1\nmig-configs:\n  *v : [{devices: all, mig-enabled: false}]\n")
    add("yaml-anchor-key-alias-map", "an alias of a mapping used as a key",
        "x: &m {a: 1}\nversion: v1\nmig-configs:\n  ? *m\n  : [{devices: all, mig-enabled: false}]\n")
    add("yaml-anchor-unknown", "an alias of an unknown anchor", "version: v1\nmig-configs:\n  c: *nope\n")
    add("yaml-anchor-recursive-seq", "a sequence that contains itself", "version: v1\nmig-configs:\n  c: &r [*r]\n")
    add("yaml-anchor-recursive-map", "a mapping that contains itself", "version: v1\nmig-configs: &r {c: *r}\n")
    add("yaml-anchor-recursive-top", "a top-level sequence containing itself", "&a [*a]\n")
    add("yaml-anchor-redefined", "an anchor defined twice; the alias uses the later, invalid one",
        doc("  a: &e [{devices: all, mig-enabled: false}]\n  b: &e [{devices: all, mig-enabled: 7}]\n  c: *e\n"))
    add("yaml-anchor-redefined-valid", "an anchor redefined; the alias uses the later one",
        doc("  a: &e [{devices: all, mig-enabled: 7}]\n  b: &e [{devices: all, mig-enabled: false}]\n  c: *e\n"))
    add("yaml-anchor-in-unknown-field", "an anchor in an unexpected field", "x: &a 1\n" + VALID)
    add("yaml-anchor-alias-count", "an aliased count", "n: &n 3\n" + VALID)
    add("yaml-anchor-forward", "an alias before its anchor", "version: v1\nmig-configs:\n  b: *e\n  a: &e [{devices: all, mig-enabled: false}]\n")
    merges = {
        "entry": "  base: &b {devices: all, mig-enabled: false}\n",
        "map": "  a:\n    - <<: {devices: all, mig-enabled: false}\n",
        "alias": "  a:\n    - &b {devices: all, mig-enabled: false}\n  b:\n    - <<: *b\n",
        "alias-override-after": "  a:\n    - &b {devices: all, mig-enabled: false}\n  b:\n    - <<: *b\n      mig-enabled: true\n      mig-devices: {}\n",
        "alias-override-before": "  a:\n    - &b {devices: all, mig-enabled: true, mig-devices: {}}\n  b:\n    - mig-enabled: 7\n      <<: *b\n",
        "seq": "  a:\n    - &b {devices: all}\n    - &c {mig-enabled: false, devices: [0]}\n  b:\n    - <<: [*b, *c]\n",
        "seq-precedence": "  a:\n    - &b {devices: all, mig-enabled: 7}\n    - &c {devices: all, mig-enabled: false}\n  b:\n    - <<: [*c, *b]\n",
        "seq-precedence-bad": "  a:\n    - &b {devices: all, mig-enabled: 7}\n    - &c {devices: all, mig-enabled: false}\n  b:\n    - <<: [*b, *c]\n",
        "scalar": "  a:\n    - <<: 1\n      devices: all\n      mig-enabled: false\n",
        "null": "  a:\n    - <<: ~\n      devices: all\n      mig-enabled: false\n",
        "seq-of-scalar": "  a:\n    - <<: [1]\n      devices: all\n      mig-enabled: false\n",
        "alias-to-seq": "  x: &s [1]\n  a:\n    - <<: *s\n      devices: all\n      mig-enabled: false\n",
        "quoted-key": "  a:\n    - \"<<\": {x: 1}\n      devices: all\n      mig-enabled: false\n",
        "tagged-key": "  a:\n    - !!merge <<: {devices: all, mig-enabled: false}\n",
        "nonspecific-key": "  a:\n    - ! <<: {devices: all, mig-enabled: false}\n",
        "top-level": "",
        "configs": "  <<: {a: [{devices: all, mig-enabled: false}]}\n  b: [{devices: all, mig-enabled: false}]\n",
        "configs-seq-of-entries": "  <<:\n    - devices: all\n      mig-enabled: false\n",
        "twice": "  a:\n    - <<: {devices: all}\n      <<: {mig-enabled: false}\n",
    }
    for name, body in merges.items():
        if name == "top-level":
            text = "base: &b {version: v1}\n<<: *b\nmig-configs:\n  a: [{devices: all, mig-enabled: false}]\n"
        elif name == "entry":
            text = "version: v1\nmig-configs:\n  a:\n    - <<: {devices: all, mig-enabled: false}\n"
        else:
            text = doc(body)
        add(f"yaml-merge-{name}", f"a merge key (<<): {name}", text)


def bounds() -> None:
    laughs = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [" + ",".join([f"*{chr(97 + i)}"] * 9) + "]\n" for i in range(8))
    add("bound-billion-laughs", "nested aliases expanding to ~387 million nodes", laughs + VALID)
    add("bound-aliases-modest", "an anchor of 50 items aliased 20 times (1000 nodes)",
        "x: &x [" + ",".join(["1"] * 50) + "]\ny: [" + ",".join(["*x"] * 20) + "]\n" + VALID)
    add("bound-aliases-ratio", "aliases making more than 99% of 2,000 decoded nodes",
        "x: &x [" + ",".join(["1"] * 100) + "]\ny: [" + ",".join(["*x"] * 25) + "]\n" + VALID)
    add("bound-deep-unknown-field", "40 levels of nesting under an unexpected field",
        "x: " + "[" * 40 + "]" * 40 + "\n" + VALID)
    add("bound-deep-in-devices", "40 levels of nesting in devices",
        one("devices: " + "[" * 40 + "]" * 40 + "\nmig-enabled: false"))
    add_pattern("bound-over-1mib", "a valid config followed by more than 1 MiB of comments", VALID,
                "# " + "x" * 97 + "\n", 11000, "")
    entries = "".join(f"    - devices: *d\n      mig-enabled: false\n" for _ in range(95))
    add("bound-alias-budget-valid", "a list of 1,100 GPU indices aliased by 95 entries: ~106,000 nodes, "
        "98% of them from aliases (under go-yaml's 99% limit)",
        doc("  c:\n    - devices: &d [" + ",".join(["0"] * 1100) + "]\n      mig-enabled: false\n" + entries))
    entry = "{devices: [" + ",".join(["0"] * 20) + "], mig-enabled: false}"
    for name, configs, padding in (("over", 60, 0), ("under", 12, 150)):
        body = ("  a: &l\n    - &e " + entry + "\n" + "    - *e\n" * 49
                + "".join(f"  c{i}: *l\n" for i in range(configs)))
        if padding:  # written first: go-yaml checks the ratio as it decodes
            body = "  d:\n    - mig-enabled: false\n      devices: [" + ",".join(["1"] * padding) + "]\n" + body
        add(f"bound-alias-ratio-{name}", f"{configs} valid configs aliasing a list of 50 aliased entries"
            + (f", and a {padding}-item list written out" if padding else "")
            + f": go-yaml's limit of 99% of decoded nodes from aliases ({name})", doc(body))
    add_pattern("bound-many-nodes-valid", "a devices list of 100,001 indices (no aliases)",
                doc("  c:\n    - mig-enabled: false\n      devices: ["), "0,", 100_000, "0]\n")
    add_pattern("bound-alias-budget", "more than 100,000 nodes after alias expansion, mostly not aliases",
                "x: &x [" + ",".join(["1"] * 1000) + "]\ny: [" + ",".join(["*x"] * 60) + "]\nz: [",
                "1,", 45000, "1]\n" + VALID)


# --- mutations of NVIDIA-style configs (examples/nvidia-default-config.yaml) ---------------------------


def default_configs() -> tuple[str, list[tuple[str, str]]]:
    text = (ROOT / "examples" / "nvidia-default-config.yaml").read_text()
    lines = text.split("\n")
    start = lines.index("mig-configs:") + 1
    blocks: list[tuple[str, list[str]]] = []
    for line in lines[start:]:
        m = re.match(r"^  ([^ #][^:]*):\s*$", line)
        if m:
            blocks.append((m.group(1), [line]))
        elif blocks and line.startswith("    "):
            blocks[-1][1].append(line)
    return text, [(name.strip('"'), "\n".join(body) + "\n") for name, body in blocks]


def mutations() -> None:
    text, configs = default_configs()
    add("nvidia-default-config", "the whole default config (81 configs)", text)
    add("nvidia-default-config-crlf", "the default config with CRLF line endings", text.replace("\n", "\r\n"))
    for i, (name, body) in enumerate(configs):
        add(f"nvidia-config-{i:02d}-{slug(name)}", f"the default config's {name} alone", doc(body))
    muts = [
        ("float-count", r'(": )(\d+)$', r"\g<1>\g<2>.0"),
        ("string-count", r'(": )(\d+)$', r'\g<1>"\g<2>"'),
        ("negative-count", r'(": )(\d+)$', r"\g<1>-\g<2>"),
        ("hex-count", r'(": )(\d+)$', r"\g<1>0x\g<2>"),
        ("octal-count", r'(": )(\d+)$', r"\g<1>0\g<2>"),
        ("unquoted-profile", r'"(\dg\.\d+gb[^"]*)"', r"\g<1>"),
        ("profile-typo", r'"(\d)g\.', r'"\g<1>g'),
        ("profile-upper", r'gb"', r'GB"'),
        ("enabled-yes", r"mig-enabled: true", "mig-enabled: yes"),
        ("enabled-y", r"mig-enabled: true", "mig-enabled: y"),
        ("enabled-string", r"mig-enabled: true", 'mig-enabled: "true"'),
        ("enabled-empty", r"mig-enabled: false", "mig-enabled:"),
        ("devices-string", r"devices: all", "devices: All"),
        ("devices-list", r"devices: all", "devices: [0, 1, 2, 3, 4, 5, 6, 7]"),
        ("devices-null", r"devices: all", "devices:"),
        ("filter-unquoted", r'device-filter: \["?(0x[0-9A-F]+)"?', r"device-filter: [\g<1>"),
        ("filter-number", r'device-filter: \[?"(0x[0-9A-F]+)".*$', r"device-filter: \g<1>"),
        ("filter-null", r"device-filter: .*$", "device-filter:"),
        ("field-typo", r"mig-devices:", "mig-device:"),
        ("field-case", r"devices: ", "Devices: "),
        ("drop-enabled", r"^\s*mig-enabled: .*\n", ""),
        ("tab", r"^      mig", "\t  mig"),
    ]
    chosen = [c for c in configs if c[0] in {
        "all-disabled", "all-enabled", "all-1g.10gb", "all-balanced", "all-3g.40gb", "all-1g.10gb.me",
        "all-7g.80gb", "all-1g.12gb", "all-2g.24gb", "all-1g.24gb-me"}]
    for mname, pattern, repl in muts:
        for name, body in chosen:
            mutated = re.sub(pattern, repl, body, count=1, flags=re.M)
            if mutated == body:
                continue
            add(f"mutation-{mname}-{slug(name)}", f"{name} with {mname}", doc(mutated))
    add("mutation-version-2", "the default config as version v2", text.replace("version: v1", "version: v2"))
    add("mutation-no-version", "the default config without version", text.replace("version: v1\n", ""))
    add("mutation-indent-4", "the default config re-indented with 4 spaces",
        re.sub(r"^( +)", lambda m: m.group(1) * 2, text, flags=re.M))
    add("mutation-json", "the default config as JSON", json.dumps(_as_json(configs)))
    add("mutation-flow", "the default config in one flow mapping", json.dumps(_as_json(configs)).replace('"', ""))
    invalid = (ROOT / "examples" / "invalid-configs.yaml").read_text()
    add("examples-invalid-configs", "examples/invalid-configs.yaml (valid to mig-parted's parser)", invalid)
    custom = (ROOT / "examples" / "custom-mig-config.yaml").read_text()
    add("examples-custom-configmap", "a ConfigMap manifest given where a config file is expected", custom)
    payload = custom.split("config.yaml: |\n", 1)[1]
    add("examples-custom-payload", "the config inside examples/custom-mig-config.yaml",
        re.sub(r"^    ", "", payload, flags=re.M))


def _as_json(configs: list[tuple[str, str]]) -> dict[str, object]:
    import yaml  # PyYAML, only to build the JSON variant of the repository's own (plain) example
    return {"version": "v1", "mig-configs": {name: yaml.safe_load(doc(body))["mig-configs"][name]
                                             for name, body in configs}}


def build() -> list[dict[str, object]]:
    ENTRIES.clear()
    spec_rules()
    profiles()
    keys()
    documents()
    tags()
    anchors()
    bounds()
    mutations()
    return list(ENTRIES)


def input_bytes(entry: dict[str, object]) -> bytes:
    """The exact bytes of a corpus input."""
    if "text" in entry:
        return str(entry["text"]).encode("utf-8")
    if "base64" in entry:
        return base64.b64decode(str(entry["base64"]))
    p = entry["pattern"]
    assert isinstance(p, dict)
    return (p["head"] + p["chunk"] * p["times"] + p["tail"]).encode("utf-8")


def main() -> None:
    entries = build()
    CORPUS.write_text(json.dumps(entries, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"{len(entries)} inputs written to {CORPUS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()

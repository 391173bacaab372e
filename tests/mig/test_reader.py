"""The reader (mig/yamlsafe.py): go-yaml v2's scalars and sigs.k8s.io/yaml's JSON keys, the location
index, and the warnings that say what the node will see. Verdicts against mig-parted's own parser are in
test_conformance.py; these tests pin the values and positions behind them."""

from __future__ import annotations

import math
import textwrap

import pytest

from migops.mig.problems import MigError, parent_path
from migops.mig.sources import read_file
from migops.mig.spec import parse_config
from migops.mig.yamlsafe import Location, float32_text, json_int, load_yaml, read_first, read_stream, resolve

INT, FLOAT, BOOL, NULL, STR = (f"tag:yaml.org,2002:{t}" for t in ("int", "float", "bool", "null", "str"))


@pytest.mark.parametrize(
    "text,tag,value",
    [
        ("7", INT, 7),
        ("0o7", INT, 7),
        ("0O7", INT, 7),
        ("0X1f", INT, 31),
        ("0B111", INT, 7),
        ("07", INT, 7),
        ("010", INT, 8),
        ("-0x10", INT, -16),
        ("+7", INT, 7),
        ("1_000", INT, 1000),
        ("9223372036854775807", INT, 2**63 - 1),
        ("9223372036854775808", INT, 2**63),  # go-yaml's uint64
        ("08", FLOAT, 8.0),
        ("09", FLOAT, 9.0),
        ("7.", FLOAT, 7.0),
        ("7e0", FLOAT, 7.0),
        ("1e2", FLOAT, 100.0),
        (".5_5", FLOAT, 0.55),
        ("99999999999999999999", FLOAT, 1e20),
        ("-9223372036854775809", FLOAT, -9223372036854775809.0),
        ("1:00", STR, "1:00"),
        ("1e400", STR, "1e400"),
        ("0x", STR, "0x"),
        ("_1", STR, "_1"),
        ("=", STR, "="),
        ("y", BOOL, True),
        ("Y", BOOL, True),
        ("on", BOOL, True),
        ("N", BOOL, False),
        ("off", BOOL, False),
        ("yES", STR, "yES"),
        ("", NULL, None),
        ("~", NULL, None),
        ("Null", NULL, None),
        ("nULL", STR, "nULL"),
    ],
)
def test_go_yaml_v2_scalar_resolution(text: str, tag: str, value: object) -> None:
    assert resolve("", text) == (tag, value)


def test_tags() -> None:
    assert resolve(FLOAT, "1") == (FLOAT, 1.0)
    assert resolve("!foo", "v1") == ("!foo", "v1")
    assert resolve(STR, "1") == (STR, "1")
    with pytest.raises(ValueError, match=r"cannot decode !!float `1.5` as a !!int"):
        resolve(INT, "1.5")
    assert load_yaml("a: !foo v1\nb: !!str 1\nc: ! 7\nd: !!binary aGk=\ne: !!omap [1]\n") == {
        "a": "v1",
        "b": "1",
        "c": "7",
        "d": "hi",
        "e": [1],
    }


@pytest.mark.parametrize(
    "value,text",
    [
        (1.5, "1.5"),
        (1234567.0, "1.234567e+06"),
        (100000.0, "100000"),
        (1e6, "1e+06"),
        (1e-7, "1e-07"),
        (0.1, "0.1"),
        (3.14159265358979, "3.1415927"),
        (16777217.0, "1.6777216e+07"),
        (1e39, ".inf"),
        (-1e39, "-.inf"),
        (math.nan, ".nan"),
        (-0.0, "-0"),
        (0.0001, "0.0001"),
        (0.00001, "1e-05"),
    ],
)
def test_float_keys_are_spelled_as_float32(value: float, text: str) -> None:
    assert float32_text(value) == text


def test_non_string_keys_become_json_strings() -> None:
    doc = read_first("y: 1\n0x10: 2\n1.50: 3\n2024-01-01: 4\n07: 5\n")
    assert doc.value == {"true": 1, "16": 2, "1.5": 3, "2024-01-01": 4, "7": 5}
    assert {p: s.text for p, s in doc.surprises.items()} == {"true": "y", '"16"': "0x10", '"1.5"': "1.50", '"7"': "07"}


@pytest.mark.parametrize(
    "text,message",
    [
        ("~: 1\n", "a mapping key is null"),
        ("?\n: 1\n", "a mapping key is null"),
        ("9223372036854775808: 1\n", "beyond int64"),
        ("a: .inf\n", "NaN or infinite"),
        ("a: [.nan]\n", "NaN or infinite"),
        ("? [a]\n: 1\n", "invalid map key"),
        ("%YAML 1.2\n---\na: 1\n", "incompatible YAML document"),
        ("a: *x\n", "unknown anchor 'x'"),
        ("a: &x [*x]\n", "contains itself"),
        ("a:\n  <<: 1\n", "map merge requires"),
    ],
)
def test_what_go_yaml_and_the_json_conversion_refuse(text: str, message: str) -> None:
    with pytest.raises(MigError) as info:
        read_first(text)
    (p,) = info.value.problems
    assert p.rule == "yaml-syntax" and message in p.message and p.line is not None


def test_a_refused_float_that_a_later_key_replaces_is_no_error() -> None:
    assert load_yaml("a:\n  <<: {x: .inf}\n  x: 1\n") == {"a": {"x": 1}}


def test_merges_in_document_order() -> None:
    # go-yaml applies a merge where it is written: after an explicit key it replaces it (with a note)
    doc = read_first(
        "b: &b {x: 1, w: 2}\nc:\n  x: 0\n  <<: *b\nd:\n  <<: *b\n  x: 0\ne:\n  <<: [{x: 1}, {x: 2, z: 3}]\n"
    )
    assert doc.value["c"] == {"x": 1, "w": 2} and doc.value["d"] == {"x": 0, "w": 2}
    assert doc.value["e"] == {"x": 1, "z": 3}  # earlier maps of a merge sequence win
    assert doc.surprises["c.x"].kind == "merge-override" and "d.x" not in doc.surprises


@pytest.mark.parametrize(
    "value,n",
    [
        (7.0, 7),
        (1e2, 100),
        (-0.0, 0),
        (9.2e18, 9200000000000000000),
        (2**63 - 1, 2**63 - 1),
        (1.5, None),
        (1e21, None),
        (1e20, None),
        (2**63, None),
        (True, None),
        ("7", None),
    ],
)
def test_json_numbers_into_go_int(value: object, n: int | None) -> None:
    assert json_int(value) == n


def test_only_the_first_document_is_read_and_the_rest_is_noted() -> None:
    doc = read_first("a: 1\n---\nb: [\n")  # the rest is not even YAML: mig-parted never reads it
    assert doc.value == {"a": 1} and doc.rest == Location(2, 1)
    assert read_first("a: 1\n---\n").rest is None
    assert [d.value for d in read_stream("a: 1\n---\nb: 2\n---\n")] == [{"a": 1}, {"b": 2}, None]


# --- locations ---------------------------------------------------------------------------------------

BARE = textwrap.dedent("""\
    version: v1
    mig-configs:
      custom:
        - devices: [0, 1]
          mig-enabled: true
          mig-devices:
            "1g.10gb": 2
            "9g.99gb": 1
    """)


def test_locations_of_keys_and_items() -> None:
    doc = read_first(BARE)
    assert doc.locate("version") == Location(1, 1)
    assert doc.locate("mig-configs.custom") == Location(3, 3)
    assert doc.locate("mig-configs.custom[0]") == Location(4, 7)
    assert doc.locate("mig-configs.custom[0].devices[1]") == Location(4, 20)
    assert doc.locate('mig-configs.custom[0].mig-devices."9g.99gb"') == Location(8, 9)
    # a path the file does not spell (from the validator) falls back to its nearest written ancestor
    assert doc.locate("mig-configs.custom[0].mig-devices.nothing[3]") == Location(6, 7)


def test_parse_errors_carry_the_line_and_column() -> None:
    with pytest.raises(MigError) as info:
        parse_config(BARE.replace("true", "7"))
    (p,) = info.value.problems
    assert (p.rule, p.line, p.column) == ("invalid-mig-enabled", 5, 7)


MANIFESTS = textwrap.dedent("""\
    apiVersion: v1
    kind: Namespace
    metadata:
      name: gpu-operator
    ---
    # the MIG config
    apiVersion: v1
    kind: ConfigMap
    metadata:
      name: default-mig-parted-config
      namespace: gpu-operator
    data:
      config.yaml: |
        version: v1
        mig-configs:
          custom:
            - devices: all
              mig-enabled: y
              mig-devices:
                "1g.10gb": 2.0
    """)


def test_a_configmap_block_scalar_is_located_in_the_whole_file() -> None:
    contents = read_file(MANIFESTS)
    assert contents.manifests and [(s.kind, s.name, s.line) for s in contents.skipped] == [
        ("Namespace", "gpu-operator", 1)
    ]
    (source,) = contents.sources
    assert (source.object, source.line) == ("ConfigMap gpu-operator/default-mig-parted-config", 7)
    config = source.config
    assert config.locate("mig-configs.custom[0].mig-enabled") == Location(18, 11)
    notes = {(n.rule, n.line, n.column): n.message for n in config.notes}
    assert "y is YAML 1.1 for true: mig-parted reads mig-enabled true" in notes[("yaml-reading", 18, 11)]
    assert "2.0 is a float; mig-parted reads the count as the integer 2" in notes[("yaml-reading", 20, 13)]


def test_a_configmap_payload_error_is_located_in_the_whole_file() -> None:
    (source,) = read_file(MANIFESTS.replace('"1g.10gb": 2.0', '"1g.10gb": [')).sources
    (p,) = source.problems
    assert p.rule == "yaml-syntax" and p.line == 20


def test_a_quoted_payload_points_at_its_key() -> None:
    text = (
        '{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "m"},\n'
        ' "data": {"config.yaml": "version: v1\\nmig-configs: {c: [{devices: all, mig-enabled: 7}]}\\n"}}\n'
    )
    (source,) = read_file(text).sources
    (p,) = source.problems
    assert (p.rule, p.line, p.column) == ("invalid-mig-enabled", 2, 11)


def test_a_list_of_objects() -> None:
    payload = textwrap.indent(
        "version: v1\nmig-configs:\n  c:\n    - devices: all\n      mig-enabled: maybe\n", " " * 8
    )
    text = (
        "apiVersion: v1\nkind: List\nitems:\n  - apiVersion: v1\n    kind: Service\n    metadata: {name: s}\n"
        "  - apiVersion: v1\n    kind: ConfigMap\n    metadata: {name: mig}\n    data:\n      config.yaml: |\n"
        + payload
    )
    contents = read_file(text)
    assert [s.kind for s in contents.skipped] == ["Service"]
    (source,) = contents.sources
    (p,) = source.problems
    assert (source.object, source.line) == ("ConfigMap mig", 7)
    assert (p.rule, p.line, p.column) == ("invalid-mig-enabled", 16, 15)


def test_reading_notes() -> None:
    config = parse_config(
        "version: v1\nmig-configs:\n  y:\n    - devices: [010, ~]\n      mig-enabled:\n      device-filter: ~\n"
    )
    notes = {n.path: (n.rule, n.message) for n in config.notes}
    assert config.names() == ("true",)
    assert notes["mig-configs.true"][0] == "config-name-converted"
    assert "names this config 'true'" in notes["mig-configs.true"][1]
    assert "010 is the integer 8" in notes["mig-configs.true[0].devices[0]"][1]
    assert "null: mig-parted reads GPU index as 0" in notes["mig-configs.true[0].devices[1]"][1]
    assert "mig-enabled as false" in notes["mig-configs.true[0].mig-enabled"][1]
    assert "matches every GPU" in notes["mig-configs.true[0].device-filter"][1]


def test_integers_that_read_as_written_get_no_note() -> None:
    """Only an integer whose text is not its decimal value (a prefix, a sign, a leading zero, _) is noted:
    a 19-digit count or a negative index reads as it is written."""
    config = parse_config(
        'version: v1\nmig-configs:\n  c:\n    - devices: [1, 0x2, +3, 04, 1_5, -0]\n'
        '      mig-enabled: true\n      mig-devices: {"1g.10gb": 9223372036854775807}\n'
    )
    noted = {n.path.rsplit("[", 1)[-1] for n in config.notes}
    assert noted == {"1]", "2]", "3]", "4]", "5]"}, config.notes
    doc = read_first("a: [-7, 123456789012345678901, -9223372036854775808]\n")
    assert doc.value == {"a": [-7, 1.2345678901234568e20, -9223372036854775808]}
    assert set(doc.surprises) == {"a[1]"}  # beyond uint64: a float


@pytest.mark.parametrize(
    "path,parent",
    [
        ("a.b[2]", "a.b"),
        ('a."x.y"', "a"),
        ('"x.y"', ""),
        ("a", ""),
        ("", None),
        ('mig-configs."a\\"b"[0]', 'mig-configs."a\\"b"'),
        ('mig-configs."a\\"b"', "mig-configs"),
    ],
)
def test_parent_path(path: str, parent: str | None) -> None:
    assert parent_path(path) == parent

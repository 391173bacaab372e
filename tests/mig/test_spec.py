"""mig-parted v1 parser: mig-parted's 13 parse rules (docs/config-rules.md), input forms, selection and bounded input."""

from __future__ import annotations

import json
import textwrap

import pytest
import yaml

from migops.mig.problems import MigError
from migops.mig.profile import parse_profile
from migops.mig.spec import no_config_problems, parse_config, parse_config_object
from migops.mig.yamlsafe import InputLimits, load_yaml

VALID = textwrap.dedent("""\
    version: v1
    mig-configs:
      all-disabled:
        - devices: all
          mig-enabled: false
      custom:
        - devices: [0,1]
          mig-enabled: true
          mig-devices: {"3g.40gb": 2}
        - device-filter: "0x233010DE"
          devices: [2]
          mig-enabled: true
          mig-devices: {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}
    """)


def problems_of(text) -> list:
    with pytest.raises(MigError) as info:
        parse_config(text)
    assert info.value.problems, "a MigError carries at least one problem"
    return list(info.value.problems)


def the_problem(text, rule: str, path: str, message: str | None = None):
    """Exactly one problem with this rule, at this path, whose message holds mig-parted's text."""
    found = [p for p in problems_of(text) if p.rule == rule]
    assert len(found) == 1, found
    problem = found[0]
    assert problem.path == path
    assert problem.severity == "error"
    if message is not None:
        assert message in problem.message, problem.message
    return problem


def config(entry_yaml: str, name: str = "custom") -> str:
    """A v1 document with one config whose second entry is `entry_yaml` (so paths end in [1])."""
    return (
        "version: v1\nmig-configs:\n  " + name + ":\n"
        "    - devices: all\n      mig-enabled: false\n" + textwrap.indent(textwrap.dedent(entry_yaml), "    ")
    )


# --- the valid example -----------------------------------------------------------------------------


def test_valid_example():
    cfg = parse_config(VALID)
    assert cfg.names() == ("all-disabled", "custom")
    (disabled,) = cfg.entries("all-disabled")
    assert disabled.devices == "all" and disabled.mig_enabled is False and disabled.mig_devices == ()
    first, second = cfg.entries("custom")
    assert first.path == "mig-configs.custom[0]" and second.path == "mig-configs.custom[1]"
    assert first.devices == (0, 1) and first.device_filter == () and first.mig_enabled
    assert first.profile_counts() == {parse_profile("3g.40gb"): 2}
    assert second.device_filter == ("0x233010DE",) and second.devices == (2,)
    assert second.profile_counts() == {
        parse_profile("1g.10gb"): 2,
        parse_profile("2g.20gb"): 1,
        parse_profile("3g.40gb"): 1,
    }
    assert [item.key for item in second.mig_devices] == ["1g.10gb", "2g.20gb", "3g.40gb"]


def test_filter_list_and_subsystem_id_accepted():
    cfg = parse_config(
        config("""\
        - device-filter: ["0x233010DE", "0x233010DE:0x16C110DE"]
          devices: all
          mig-enabled: true
          mig-devices: {}
        """)
    )
    assert cfg.entries("custom")[1].device_filter == ("0x233010DE", "0x233010DE:0x16C110DE")
    assert cfg.entries("custom")[1].mig_devices == ()


def test_zero_count_allowed_when_another_is_positive():
    cfg = parse_config(
        config("""\
        - devices: all
          mig-enabled: true
          mig-devices: {"1g.10gb": 0, "2g.20gb": 1}
        """)
    )
    entry = cfg.entries("custom")[1]
    assert [i.count for i in entry.mig_devices] == [0, 1]
    assert entry.profile_counts() == {parse_profile("2g.20gb"): 1}


# --- the 13 rules ------------------------------------------------------------------------------------


def test_rule_1_missing_version():
    the_problem(
        "mig-configs:\n  a:\n    - devices: all\n      mig-enabled: false\n",
        "missing-version",
        "version",
        "unable to parse with missing 'version' field",
    )


@pytest.mark.parametrize(
    "text",
    [
        "version: v2\nmig-configs: {a: [{devices: all, mig-enabled: false}]}\n",
        "version: 1\nmig-configs: {a: [{devices: all, mig-enabled: false}]}\n",
        "version: V1\nmig-configs: {a: [{devices: all, mig-enabled: false}]}\n",
    ],
)
def test_rule_2_unknown_version(text):
    p = the_problem(text, "unknown-version", "version", "unknown version: ")
    assert text.split()[1] in p.message


def test_rule_2_empty_mapping():
    the_problem("{}", "unknown-version", "version", "unknown version: ")


@pytest.mark.parametrize("text", ["", "   \n", "# only a comment\n", "null", "~", "---\n", "version: v1\n"])
def test_a_document_without_configs_parses_but_selects_nothing(text):
    # mig-parted's parser accepts these (encoding/json leaves the spec empty); no config can be selected
    cfg = parse_config(text)
    assert cfg.names() == ()
    (p,) = no_config_problems(cfg)
    assert (p.rule, p.severity) == ("no-configs", "error")
    with pytest.raises(MigError):
        cfg.select(None)


def test_rule_3_unexpected_top_level_field():
    text = VALID + "extra: 1\n"
    the_problem(text, "unexpected-field", "extra", "unexpected field")


def test_rule_4_empty_mig_configs():
    the_problem(
        "version: v1\nmig-configs: {}\n",
        "empty-mig-configs",
        "mig-configs",
        "at least one entry in 'mig-configs' is required",
    )


def test_rule_5_empty_config():
    the_problem(
        "version: v1\nmig-configs:\n  custom: []\n",
        "empty-config",
        "mig-configs.custom",
        "at least one entry in 'custom' is required",
    )


@pytest.mark.parametrize("missing", ["devices", "mig-enabled"])
def test_rule_6_missing_required_field(missing):
    fields = {"devices": "all", "mig-enabled": "false"}
    del fields[missing]
    entry = "- " + "\n  ".join(f"{k}: {v}" for k, v in fields.items()) + "\n"
    the_problem(config(entry), "missing-required-field", f"mig-configs.custom[1].{missing}", "missing required field")


def test_rule_7_unexpected_entry_field():
    the_problem(
        config("- devices: all\n  mig-enabled: false\n  mig-device: {}\n"),
        "unexpected-field",
        "mig-configs.custom[1].mig-device",
        "unexpected field",
    )


@pytest.mark.parametrize("value", ['"All"', "gpu0", '"0"'])
def test_rule_8_devices_string_other_than_all(value):
    the_problem(
        config(f"- devices: {value}\n  mig-enabled: false\n"),
        "invalid-devices",
        "mig-configs.custom[1].devices",
        "invalid string input",
    )


@pytest.mark.parametrize("value", ["[0, a]", "1", "[true]", "{a: 1}", "[0.5]"])
def test_rule_8_devices_not_an_integer_list(value):
    the_problem(
        config(f"- devices: {value}\n  mig-enabled: false\n"), "invalid-devices", "mig-configs.custom[1].devices"
    )


@pytest.mark.parametrize("value", ["1", "[1, 2]", "{a: b}", '["0x233010DE", 3]', "true"])
def test_rule_9_device_filter_type(value):
    the_problem(
        config(f"- device-filter: {value}\n  devices: all\n  mig-enabled: false\n"),
        "invalid-device-filter",
        "mig-configs.custom[1].device-filter",
    )


@pytest.mark.parametrize("value", ['"true"', "1", "yes please", "[true]"])
def test_rule_10_mig_enabled_not_bool(value):
    the_problem(
        config(f"- devices: all\n  mig-enabled: {value}\n"), "invalid-mig-enabled", "mig-configs.custom[1].mig-enabled"
    )


def test_rule_11_profile_grammar():
    p = the_problem(
        config('- devices: all\n  mig-enabled: true\n  mig-devices: {"1g.10gb+me-x": 1}\n'),
        "profile-syntax",
        'mig-configs.custom[1].mig-devices."1g.10gb+me-x"',
    )
    assert "1g.10gb+me-x" in p.message


def test_rule_11_negative_count():
    the_problem(
        config('- devices: all\n  mig-enabled: true\n  mig-devices: {"1g.10gb": -1}\n'),
        "negative-count",
        'mig-configs.custom[1].mig-devices."1g.10gb"',
    )


@pytest.mark.parametrize("value", ['"2"', "1.5", "true", "[1]", "1e21", "9223372036854775808", "99999999999999999999"])
def test_rule_11_count_not_an_integer(value):
    the_problem(
        config(f'- devices: all\n  mig-enabled: true\n  mig-devices: {{"1g.10gb": {value}}}\n'),
        "invalid-count",
        'mig-configs.custom[1].mig-devices."1g.10gb"',
    )


@pytest.mark.parametrize("value", ["[1g.10gb]", '"1g.10gb"', "7"])
def test_rule_11_mig_devices_not_a_map(value):
    the_problem(
        config(f"- devices: all\n  mig-enabled: true\n  mig-devices: {value}\n"),
        "invalid-mig-devices",
        "mig-configs.custom[1].mig-devices",
    )


def test_rule_11_non_string_profile_key():
    the_problem(
        config("- devices: all\n  mig-enabled: true\n  mig-devices: {1: 2}\n"),
        "profile-syntax",
        "mig-configs.custom[1].mig-devices.\"1\"",
    )


def test_rule_11_all_counts_zero():
    the_problem(
        config('- devices: all\n  mig-enabled: true\n  mig-devices: {"1g.10gb": 0, "2g.20gb": 0}\n'),
        "all-counts-zero",
        "mig-configs.custom[1].mig-devices",
        "all counts for all MigProfiles are 0",
    )


@pytest.mark.parametrize("tail", ["", "  mig-devices:\n", "  mig-devices: null\n"])
def test_rule_12_mig_devices_required_when_enabled(tail):
    the_problem(
        config("- devices: all\n  mig-enabled: true\n" + tail),
        "mig-devices-required",
        "mig-configs.custom[1].mig-devices",
        "missing required field 'mig-devices' when 'mig-enabled' is true",
    )


def test_rule_13_mig_devices_when_disabled():
    the_problem(
        config('- devices: all\n  mig-enabled: false\n  mig-devices: {"1g.10gb": 1}\n'),
        "mig-devices-when-disabled",
        "mig-configs.custom[1].mig-devices",
        "MIG devices included when 'mig-enabled' is false",
    )


def test_rule_13_empty_mig_devices_when_disabled_is_fine():
    cfg = parse_config(config("- devices: all\n  mig-enabled: false\n  mig-devices: {}\n"))
    assert cfg.entries("custom")[1].mig_enabled is False


def test_all_problems_are_collected():
    text = textwrap.dedent("""\
        version: v1
        extra: true
        mig-configs:
          a:
            - devices: some
              mig-enabled: true
          b: []
        """)
    rules = {(p.rule, p.path) for p in problems_of(text)}
    assert rules == {
        ("unexpected-field", "extra"),
        ("invalid-devices", "mig-configs.a[0].devices"),
        ("mig-devices-required", "mig-configs.a[0].mig-devices"),
        ("empty-config", "mig-configs.b"),
    }


@pytest.mark.parametrize(
    "text,rule,path",
    [
        ("version: v1\nmig-configs: [a]\n", "invalid-mig-configs", "mig-configs"),
        ("version: v1\nmig-configs: {a: {devices: all}}\n", "invalid-config", "mig-configs.a"),
        ("version: v1\nmig-configs: {a: [1]}\n", "invalid-entry", "mig-configs.a[0]"),
        ("- a\n- b\n", "not-a-mapping", ""),
        ("just text", "not-a-mapping", ""),
    ],
)
def test_other_shapes(text, rule, path):
    assert any(p.rule == rule and p.path == path for p in problems_of(text))


def test_problem_paths_quote_keys_that_are_not_words():
    p = the_problem(
        config('- devices: all\n  mig-enabled: true\n  mig-devices: {"1g.10gb": -3}\n', name="all-1g.10gb"),
        "negative-count",
        'mig-configs."all-1g.10gb"[1].mig-devices."1g.10gb"',
    )
    assert str(p).startswith('mig-configs."all-1g.10gb"[1].mig-devices."1g.10gb": ')


# --- input forms -------------------------------------------------------------------------------------


def configmap(payload: str | None, key: str = "config.yaml") -> str:
    doc = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "mig-parted-config"},
        "data": {} if payload is None else {key: payload},
    }
    return yaml.safe_dump(doc)


def test_configmap_manifest():
    cfg = parse_config(configmap(VALID))
    assert cfg == parse_config(VALID)


def test_configmap_without_key():
    the_problem(configmap(VALID, key="config.yml"), "configmap-key", 'data."config.yaml"', "config.yaml")
    the_problem(configmap(None), "configmap-key", 'data."config.yaml"')


def test_configmap_payload_errors_are_reported():
    the_problem(configmap("version: v1\nmig-configs: {}\n"), "empty-mig-configs", "mig-configs")


def test_json_input():
    doc = yaml.safe_load(VALID)
    assert parse_config(json.dumps(doc)) == parse_config(VALID)
    assert parse_config(json.dumps(doc).encode()) == parse_config(VALID)
    assert parse_config_object(doc) == parse_config(VALID)


def test_not_utf8():
    the_problem(b"version: v1\n\xff\xfe", "not-utf8", "")
    # a str with a lone surrogate, as json.loads makes from a "\ud800" escape
    the_problem(json.loads('"version: v1\\nx: \\ud800"'), "not-utf8", "")


@pytest.mark.parametrize(
    "value",
    [
        "!!timestamp 99999-01-01",
        "!!int " + "9" * 5000,
        "!!bool maybe",
        "!!float x",
        "!!int x",
        "!!binary zz",
        "!!null x",
    ],
)
def test_tagged_scalar_that_does_not_resolve(value):
    # go-yaml refuses a scalar whose explicit tag it cannot honour ("cannot decode !!str `x` as a !!int")
    text = f"version: v1\nmig-configs:\n  c:\n    - devices: {value}\n      mig-enabled: false\n"
    the_problem(text, "yaml-syntax", "mig-configs.c[0].devices")


@pytest.mark.parametrize("value", ["2001-02-30", "2001-13-01", "9" * 5000, "1:00"])
def test_scalars_that_are_strings_to_go_yaml(value):
    # not a valid timestamp, an int beyond float range, no base 60: plain strings, so not 'all'
    text = f"version: v1\nmig-configs:\n  c:\n    - devices: {value}\n      mig-enabled: false\n"
    the_problem(text, "invalid-devices", "mig-configs.c[0].devices", "invalid string input")


@pytest.mark.parametrize("value", ["!!omap [1]", "!!str [1]", "!custom [1]"])
def test_tags_on_collections_are_ignored(value):
    text = f"version: v1\nmig-configs:\n  c:\n    - devices: {value}\n      mig-enabled: false\n"
    assert parse_config(text).entries("c")[0].devices == (1,)


def test_yaml_syntax_error():
    the_problem("version: v1\nmig-configs: {a: [\n", "yaml-syntax", "")


def test_only_the_first_document_is_read():
    cfg = parse_config("version: v1\nmig-configs: {a: [{devices: all, mig-enabled: false}]}\n---\nversion: v2\n")
    assert cfg.names() == ("a",)
    (note,) = cfg.notes
    assert (note.rule, note.severity) == ("trailing-document", "warning") and "line 3" in note.message
    assert parse_config("version: v1\nmig-configs: {a: [{devices: all, mig-enabled: false}]}\n---\n").notes == ()


# --- select() --------------------------------------------------------------------------------------


def test_select_requires_a_name_with_several_configs():
    cfg = parse_config(VALID)
    with pytest.raises(MigError) as info:
        cfg.select(None)
    (p,) = info.value.problems
    assert p.rule == "config-not-selected" and "-c" in p.message


def test_select_unknown_name():
    with pytest.raises(MigError) as info:
        parse_config(VALID).select("nope")
    (p,) = info.value.problems
    assert p.rule == "config-not-found" and "selected mig-config not present" in p.message
    assert p.path == "mig-configs.nope"


def test_select_by_name_and_single_config():
    cfg = parse_config(VALID)
    name, entries = cfg.select("custom")
    assert name == "custom" and len(entries) == 2
    single = parse_config("version: v1\nmig-configs:\n  only:\n    - devices: all\n      mig-enabled: false\n")
    assert single.select(None)[0] == "only"


# --- bounded input -----------------------------------------------------------------------------------


def rule_of(text, limits: InputLimits | None = None) -> str:
    with pytest.raises(MigError) as info:
        if limits:
            load_yaml(text, limits)
        else:
            parse_config(text)
    (p,) = info.value.problems
    return p.rule


BILLION_LAUGHS = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [" + ",".join([f"*{chr(97 + i)}"] * 9) + "]\n" for i in range(8)
)


def message_of(text) -> str:
    with pytest.raises(MigError) as info:
        parse_config(text)
    (p,) = info.value.problems
    return f"{p.rule}: {p.message}"


def test_billion_laughs():
    # go-yaml refuses it too ("excessive aliasing": more than 99% of decoded nodes come from aliases)
    assert len(BILLION_LAUGHS) < 2000
    assert message_of(BILLION_LAUGHS).startswith("yaml-syntax: ") and "excessive aliasing" in message_of(BILLION_LAUGHS)


def test_bomb_inside_a_config_value():
    # the bomb is referenced from a field the parser reads: expansion is bounded as it is decoded
    text = BILLION_LAUGHS + "version: v1\nmig-configs: {c: [{devices: *i, mig-enabled: false}]}\n"
    assert "excessive aliasing" in message_of(text)


def test_node_budget_counts_alias_expansion():
    # ~106,000 nodes, 98% from aliases: go-yaml accepts it, migops's bound refuses it
    entries = "".join("    - devices: *d\n      mig-enabled: false\n" for _ in range(95))
    text = (
        "version: v1\nmig-configs:\n  c:\n    - devices: &d [" + ",".join(["0"] * 1100) + "]\n"
        "      mig-enabled: false\n" + entries
    )
    assert rule_of(text) == "yaml-too-large"
    fewer = text[: text.index("    - devices: *d")] + "    - devices: *d\n      mig-enabled: false\n" * 80
    assert len(parse_config(fewer).entries("c")) == 81


def test_fifty_megabytes():
    assert rule_of("a" * (50 * 1024 * 1024)) == "input-too-large"
    assert rule_of(b"a" * (50 * 1024 * 1024)) == "input-too-large"


def test_ten_thousand_deep_flow_nesting():
    assert rule_of("[" * 10_000 + "]" * 10_000) == "yaml-too-deep"
    assert rule_of("{a: " * 10_000 + "1" + "}" * 10_000) == "yaml-too-deep"


def test_ten_thousand_deep_block_nesting():
    assert rule_of("- " * 10_000 + "x") == "yaml-too-deep"


def test_deepest_nesting_that_fits_in_the_byte_limit():
    # ~500k levels in 1 MiB: libyaml's composer would recurse until the process crashes, and its
    # scanner is quadratic in flow depth; both must be refused before composing.
    assert rule_of("- " * 500_000 + "x") == "yaml-too-deep"
    assert rule_of("[" * 500_000 + "]" * 500_000) == "yaml-too-deep"
    assert rule_of('[ "]", ' * 100_000 + "1" + "]" * 100_000) == "yaml-too-deep"


def test_recursive_alias():
    assert "contains itself" in message_of("&a [*a]")
    assert "contains itself" in message_of("version: v1\nmig-configs: &a {x: *a}\n")


def test_limits_are_parameters():
    assert rule_of("[[[1]]]", InputLimits(max_depth=3)) == "yaml-too-deep"
    assert load_yaml("[[1]]", InputLimits(max_depth=3)) == [[1]]
    assert rule_of("[1, 2, 3, 4]", InputLimits(max_nodes=4)) == "yaml-too-large"
    assert rule_of("12345", InputLimits(max_bytes=4)) == "input-too-large"


def test_shared_aliases_within_budget_are_fine():
    text = 'x: &x {"1g.10gb": 1}\nz: [*x, *x, *x]\n'
    assert load_yaml(text) == {"x": {"1g.10gb": 1}, "z": [{"1g.10gb": 1}] * 3}


@pytest.mark.parametrize(
    "text,path",
    [
        ("version: v1\nversion: v1\nmig-configs: {}\n", "version"),
        (
            "version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: false\n"
            "  a:\n    - devices: all\n      mig-enabled: false\n",
            "mig-configs.a",
        ),
        (
            'version: v1\nmig-configs:\n  c:\n    - devices: all\n      mig-enabled: true\n'
            '      mig-devices: {"1g.10gb": 1, "1g.10gb": 2}\n',
            'mig-configs.c[0].mig-devices."1g.10gb"',
        ),
    ],
)
def test_duplicate_keys(text, path):
    with pytest.raises(MigError) as info:
        parse_config(text)
    (p,) = info.value.problems
    assert (p.rule, p.path) == ("duplicate-key", path)
    assert "twice" in p.message


def test_digest_ignores_spelling_and_other_configs_but_not_content() -> None:
    a = parse_config(
        "version: v1\nmig-configs:\n  x:\n  - devices: [1, 0]\n    mig-enabled: true\n"
        "    mig-devices: {1g.10gb: 2, 2g.20gb: 1}\n  z: [{devices: all, mig-enabled: false}]\n"
    )
    b = parse_config(
        '{"version": "v1", "mig-configs": {"x": [{"mig-enabled": true, "devices": [0, 1], '
        '"mig-devices": {"2g.20gb": 1, "1g.10gb": 2}}]}}'
    )
    c = parse_config(
        "version: v1\nmig-configs:\n  x:\n  - devices: [0, 1]\n    mig-enabled: true\n"
        "    mig-devices: {1g.10gb: 3, 2g.20gb: 1}\n"
    )
    assert a.digest("x") == b.digest("x")
    assert a.digest("x").startswith("sha256:")
    assert a.digest("x") != c.digest("x")
    assert a.digest("x") != a.digest("z")

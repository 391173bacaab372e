"""Every `-o json` names its schema version and matches the JSON Schema published for it
(migops/schemas/<command>.v1.schema.json): real outputs, valid and invalid inputs, checked against them.
diff and status (they need a cluster) are in tests/reconciler/test_json_outputs_cluster.py."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import jsonschema
import pytest

from migops.cli import build_parser, main
from migops.cli.outputs import VERSIONS, json_schema, schema_id

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
sys.path.insert(0, str(ROOT / "tests" / "agent"))  # the fake NVML, for the probe's output


def _json(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    main(list(args))
    return json.loads(capsys.readouterr().out)


def _check(command: str, doc: dict) -> None:
    assert doc["schema"] == schema_id(command)
    errors = sorted(jsonschema.Draft202012Validator(json_schema(command)).iter_errors(doc), key=str)
    assert errors == [], [f"{list(e.absolute_path)}: {e.message}" for e in errors[:5]]


def test_every_json_output_has_a_schema() -> None:
    parser = build_parser()
    (sub,) = [a for a in parser._actions if a.dest == "command"]
    with_json = {
        name
        for name, p in sub.choices.items()
        for a in p._actions
        if "--output" in a.option_strings and "json" in (a.choices or ())
    }
    assert with_json == {"validate", "plan", "gpus", "diff", "status", "suggest"}
    # gpus --probe and gpus --check have shapes of their own; `fleet status` and `fleet diff` are subcommands
    assert set(VERSIONS) == with_json | {"probe", "gpus-check", "fleet-status", "fleet-diff"}
    for command in VERSIONS:
        jsonschema.Draft202012Validator.check_schema(json_schema(command))
        assert json_schema(command)["properties"]["schema"] == {"const": schema_id(command)}


@pytest.mark.parametrize(
    "args",
    [
        [str(EXAMPLES)],
        [str(EXAMPLES / "invalid-configs.yaml")],
        ["--gpu", "0x233010DE", "--strategy", "mixed", str(EXAMPLES / "custom-mig-config.yaml")],
        ["--gpu", "0x233010DE", str(EXAMPLES / "invalid-configs.yaml"), str(EXAMPLES / "config-repo")],
    ],
)
def test_validate(capsys: pytest.CaptureFixture[str], args: list[str]) -> None:
    _check("validate", _json(capsys, "validate", "-o", "json", *args))


def test_validate_of_an_unparseable_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text("version: v1\nmig-configs: [\n")
    doc = _json(capsys, "validate", "-o", "json", str(tmp_path / "bad.yaml"))
    assert doc["valid"] is False
    _check("validate", doc)


def test_plan(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    ok = _json(
        capsys,
        "plan",
        "-o",
        "json",
        "--gpu",
        "0x233010DE",
        "-c",
        "all-balanced",
        str(EXAMPLES / "config-repo" / "config.yaml"),
    )
    assert ok["valid"] and ok["gpus"][0]["instances"]
    _check("plan", ok)
    _check(
        "plan",
        _json(
            capsys,
            "plan",
            "-o",
            "json",
            "--gpu",
            "0x233010DE",
            "-c",
            "none-such",
            str(EXAMPLES / "config-repo" / "config.yaml"),
        ),
    )
    (tmp_path / "bad.yaml").write_text("version: v1\nmig-configs: {a: [{devices: all, mig-enabled: 3}]}\n")
    _check("plan", _json(capsys, "plan", "-o", "json", "--gpu", "0x233010DE", str(tmp_path / "bad.yaml")))


def test_gpus(capsys: pytest.CaptureFixture[str]) -> None:
    _check("gpus", _json(capsys, "gpus", "-o", "json"))


def test_probe(capsys: pytest.CaptureFixture[str]) -> None:
    from fake_pynvml import FakeNvml

    from migops.cli.agent import cmd_probe
    from migops.mig.catalogue import catalogue

    cmd_probe(argparse.Namespace(output="json"), FakeNvml([catalogue().resolve("0x233010DE")] * 2))
    _check("probe", json.loads(capsys.readouterr().out))

"""`migops validate`, `migops plan`, `migops gpus` as a user and other tools call them: exit codes,
text a person reads, and the JSON contract."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from migops.cli import main

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = str(ROOT / "examples" / "nvidia-default-config.yaml")
INVALID = str(ROOT / "examples" / "invalid-configs.yaml")
CUSTOM = str(ROOT / "examples" / "custom-mig-config.yaml")
H100 = "0x233010DE"


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_default_config_is_valid_against_the_catalogue(capsys) -> None:
    code, out, _ = run(capsys, "validate", DEFAULT)
    assert code == 0
    assert out.rstrip().endswith("81 valid, 0 invalid")
    assert "all-1g.5gb          fits: A100-SXM4-40GB, A100-PCIE-40GB, A800-40GB-PCIe" in out


def test_common_mistakes_are_refused_with_path_and_rule(capsys) -> None:
    code, out, _ = run(capsys, "validate", "--gpu", H100, INVALID)
    assert code == 1
    assert out.rstrip().endswith("0 valid, 5 invalid")
    for text in (
        'mig-configs.wrong-model-profile[0].mig-devices."4g.20gb"',
        "[unknown-profile]",
        "did you mean '4g.40gb'?",
        "[count-exceeds-max]",
        "[placement-infeasible]",
        "[device-filter-unknown]",
        "[gpu-not-covered]",
        "[overlapping-entries]",
    ):
        assert text in out


def test_usage_errors_exit_2(capsys, tmp_path) -> None:
    code, _, err = run(capsys, "validate", str(tmp_path / "missing.yaml"))
    assert (code, "no such file") == (2, err.split(": ")[-1].strip())
    code, _, err = run(capsys, "validate", "--gpu", "H100", DEFAULT)
    assert code == 2 and "unknown GPU 'H100'" in err and "NVIDIA-H100-80GB-HBM3 (0x233010DE)" in err
    # a well-formed ID the catalogue does not list is a GPU that cannot do MIG; a malformed one
    # is a usage error
    code, _, err = run(capsys, "plan", "--gpu", "0xZZZZ10DE", "-c", "all-balanced", DEFAULT)
    assert code == 2 and "unknown GPU" in err
    code, _, err = run(capsys, "validate", str(tmp_path))
    assert code == 2 and "no *.yaml, *.yml or *.json file in this directory" in err
    with pytest.raises(SystemExit) as exc:
        main(["validate", "--strategy", "sometimes", DEFAULT])
    assert exc.value.code == 2


def test_gpu_given_by_gfd_product_label(capsys) -> None:
    code, out, _ = run(capsys, "validate", "--gpu", "NVIDIA-H100-80GB-HBM3", "-c", "all-1g.10gb", DEFAULT)
    assert code == 0
    assert "on a node with 1 x H100-SXM5-80GB (0x233010DE)" in out
    assert "GPU 0: 7x 1g.10gb" in out


def test_strategy_single_refuses_mixed_profiles(capsys) -> None:
    code, out, _ = run(capsys, "validate", "--gpu", H100, "--strategy", "single", "-c", "all-balanced", DEFAULT)
    assert code == 1
    assert "[strategy-mismatch]" in out and "MIG-INVALID" in out
    code, out, _ = run(capsys, "validate", "--gpu", H100, "--strategy", "mixed", "-c", "all-balanced", DEFAULT)
    assert code == 0
    assert "advertises (mixed): nvidia.com/mig-1g.10gb=2, nvidia.com/mig-2g.20gb=1, nvidia.com/mig-3g.40gb=1" in out


def test_validate_json_contract(capsys) -> None:
    code, out, _ = run(capsys, "validate", "--gpu", H100, "--strategy", "mixed", "-o", "json", INVALID)
    doc = json.loads(out)
    assert code == 1 and doc["valid"] is False and doc["node"] == [H100] and doc["strategy"] == "mixed"
    (source,) = doc["sources"]
    assert (source["file"], source["object"], source["parsed"], source["valid"]) == (INVALID, None, True, False)
    names = [c["name"] for c in source["configs"]]
    assert names == ["wrong-model-profile", "too-many", "over-capacity", "typo-filter", "overlap"]
    for config in source["configs"]:
        assert config["valid"] is False
        for problem in config["problems"]:
            assert set(problem) == {"path", "rule", "message", "severity", "line", "column"}
            assert problem["path"].startswith("mig-configs.")
            assert problem["line"] > 3 and problem["column"] >= 1
    code, out, _ = run(capsys, "validate", "--gpu", H100, "-o", "json", "-c", "all-balanced", DEFAULT)
    (config,) = json.loads(out)["sources"][0]["configs"]
    assert code == 0 and config["valid"] is True
    assert config["gpus"][0]["instances"] == [
        {"profile": "1g.10gb", "start": 0, "size": 1},
        {"profile": "1g.10gb", "start": 1, "size": 1},
        {"profile": "2g.20gb", "start": 2, "size": 2},
        {"profile": "3g.40gb", "start": 4, "size": 4},
    ]
    single = config["advertises"]["single"]
    assert single["resources"] == {"nvidia.com/gpu": 0} and single["invalid_reason"]
    assert config["advertises"]["mixed"]["labels"]["nvidia.com/mig-3g.40gb.multiprocessors"] == "60"


def test_unparseable_input_is_reported_not_raised(capsys, tmp_path) -> None:
    bad = tmp_path / "bad.yaml"
    for payload in (b"version: v1\nmig-configs: [", b"\xff\xfe\x00garbage", b"- just\n- a list\n", b""):
        bad.write_bytes(payload)
        code, out, _ = run(capsys, "validate", str(bad))
        assert code == 1, payload
        assert "INVALID" in out and "[" in out
    code, out, _ = run(capsys, "validate", "-o", "json", str(bad))
    (source,) = json.loads(out)["sources"]
    assert source["parsed"] is True and source["configs"] == []  # mig-parted reads an empty file...
    assert [p["rule"] for p in source["problems"]] == ["no-configs"]  # ...but no node can select a config
    bad.write_bytes(b"version: v1\nmig-configs: [")
    code, out, _ = run(capsys, "validate", "-o", "json", str(bad))
    (source,) = json.loads(out)["sources"]
    assert source["parsed"] is False and source["problems"][0]["rule"] == "yaml-syntax"
    assert (source["problems"][0]["line"], source["problems"][0]["column"]) == (2, 15)  # just after "["


def test_unknown_config_name(capsys) -> None:
    code, out, _ = run(capsys, "validate", "-c", "all-9g.99gb", DEFAULT)
    assert code == 1 and "[config-not-found]" in out


def test_configmap_manifest_on_an_eight_gpu_node(capsys) -> None:
    args = ["validate", "--strategy", "mixed", *["--gpu", H100] * 8, CUSTOM]
    code, out, _ = run(capsys, *args)
    assert code == 0
    assert "8 x H100-SXM5-80GB (0x233010DE)" in out
    assert "GPU 0-3: 7x 1g.10gb; GPU 4-5: 2x 3g.40gb; GPU 6-7: 1x 4g.40gb + 1x 2g.20gb + 1x 1g.10gb" in out
    # On a node with fewer GPUs than the entries name, indices beyond it are only a warning...
    code, out, _ = run(capsys, "validate", "--gpu", H100, "-c", "h100-inference", CUSTOM)
    assert code == 0 and "[device-index-out-of-range]" in out
    # ...but a GPU that no entry selects is an error.
    code, out, _ = run(capsys, "validate", *["--gpu", H100] * 9, "-c", "h100-inference", CUSTOM)
    assert code == 1 and "no entry selects GPU 8" in out


def test_plan_json_contract(capsys) -> None:
    code, out, _ = run(capsys, "plan", "--gpu", "0x20B010DE", "-c", "all-balanced", "-o", "json", DEFAULT)
    assert code == 0
    doc = json.loads(out)
    assert doc["gpus"] == [
        {
            "index": 0,
            "device_id": "0x20B010DE",
            "config": "all-balanced",
            "mig_enabled": True,
            "instances": [
                {"profile": "1g.5gb", "start": 0, "size": 1},
                {"profile": "1g.5gb", "start": 1, "size": 1},
                {"profile": "2g.10gb", "start": 2, "size": 2},
                {"profile": "3g.20gb", "start": 4, "size": 4},
            ],
        }
    ]


def test_plan_text_draws_the_slices(capsys) -> None:
    code, out, _ = run(capsys, "plan", "--gpu", H100, "--gpu", "0x20B710DE", "-c", "all-balanced", DEFAULT)
    assert code == 0
    assert "|1g.10gb |1g.10gb |     2g.20gb     |              3g.40gb              |" in out
    assert "compute slices 7/7, memory slices 8/8" in out
    assert "GPU 1  A30 (0x20B710DE)" in out and "compute slices 4/4, memory slices 4/4" in out


def test_plan_needs_a_config_when_the_file_has_several(capsys) -> None:
    code, out, _ = run(capsys, "plan", "--gpu", H100, DEFAULT)
    assert code == 1 and "[config-not-selected]" in out
    code, out, _ = run(capsys, "plan", "--gpu", H100, "-c", "all-1g.5gb", DEFAULT)
    assert code == 1 and "[unknown-profile]" in out


def test_gpus_lists_the_whole_catalogue(capsys) -> None:
    code, out, _ = run(capsys, "gpus", "-o", "wide")  # one line per GPU (text fits the terminal: test_readable_output)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("DEVICE ID")
    assert len(lines) == 1 + 32
    assert any(line.startswith("0x290110DE  B200") and line.rstrip().endswith("starts") for line in lines)
    code, out, _ = run(capsys, "gpus", "-o", "json")
    gpus = json.loads(out)["gpus"]
    assert len(gpus) == 32 and len({g["device_id"] for g in gpus}) == 32
    h100 = next(g for g in gpus if g["device_id"] == H100)
    assert {p["name"] for p in h100["profiles"]} >= {"1g.10gb", "3g.40gb", "7g.80gb"}


def test_the_console_script_reads_stdin() -> None:
    """The real entry point, in a subprocess: `migops validate -` reads the config from stdin."""
    config = Path(DEFAULT).read_bytes()
    proc = subprocess.run(
        [sys.executable, "-m", "migops", "validate", "--gpu", H100, "-c", "all-3g.40gb", "-"],
        input=config,
        capture_output=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert b"<stdin>: 1 config(s) checked" in proc.stdout
    assert b"GPU 0: 2x 3g.40gb" in proc.stdout

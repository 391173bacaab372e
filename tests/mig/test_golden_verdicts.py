"""Speed-ups must be invisible except in time: the verdicts on large generated files match golden data.

tests/mig/data/golden-verdicts.json holds, for each file shape of bench/_shapes.py (the worst cases the
input bounds admit) and each way of asking (catalogue mode with and without a strategy, an 8-GPU
H100 node, a node of 8 different models under `mixed`), a digest of every verdict: the problems
(path, rule, message, severity, in order), the per-GPU results (entry, MIG mode, layout, MIG devices)
and the fits, as canonical JSON. Digests cover chunks of 100 configs, so a failure names the configs
that changed; the rule counts say how.

The data is recorded by running this file as a script. Record again only for an intended change of
verdicts (a new rule, a catalogue correction) and say so in the commit:

    .venv/bin/python tests/mig/test_golden_verdicts.py --record
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import _shapes  # noqa: E402  (bench/_shapes.py: the generators)

from migops.mig.catalogue import catalogue  # noqa: E402
from migops.mig.spec import parse_config  # noqa: E402
from migops.mig.validate import ConfigReport, validate  # noqa: E402

GOLDEN = Path(__file__).resolve().parent / "data" / "golden-verdicts.json"
CHUNK = 100

# Shape name -> keyword arguments. Full size, except counts: the validator that recorded the golden
# data expanded one list item per requested instance, so it could only judge counts up to thousands.
SHAPES = {name: {} for name in _shapes.SHAPES}
SHAPES["counts"] = {"configs": 600, "count": 1000}

MIXED_NODE = (
    "0x20B010DE",
    "0x233010DE",
    "0x20B710DE",
    "0x2BB510DE",
    "0x294110DE",
    "0x233510DE",
    "0x290110DE",
    "0x20B210DE",
)
# mode -> (node as device IDs or None for catalogue mode, strategy)
MODES: dict[str, tuple[tuple[str, ...] | None, str | None]] = {
    "catalogue": (None, None),
    "catalogue-single": (None, "single"),
    "node-8xH100": (("0x233010DE",) * 8, None),
    "node-mixed-models": (MIXED_NODE, "mixed"),
}


def verdict(report: ConfigReport) -> dict:
    return {
        "name": report.name,
        "valid": report.valid,
        "problems": [p.as_dict() for p in report.problems],
        "gpus": [g.as_dict() for g in report.gpus],
        "fits": [g.device_id for g in report.fits],
    }


def _digest(items: list[dict]) -> str:
    text = json.dumps(items, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def summarise(reports: tuple[ConfigReport, ...]) -> dict:
    verdicts = [verdict(r) for r in reports]
    rules = Counter(f"{p['severity']}:{p['rule']}" for v in verdicts for p in v["problems"])
    return {
        "configs": len(verdicts),
        "valid": sum(v["valid"] for v in verdicts),
        "rules": dict(sorted(rules.items())),
        "chunks": [_digest(verdicts[i : i + CHUNK]) for i in range(0, len(verdicts), CHUNK)],
    }


def text_of(shape: str) -> str:
    generate, _ = _shapes.SHAPES[shape]
    return generate(**SHAPES[shape])


def judge(shape: str, config, mode: str) -> dict:
    cat = catalogue()
    ids, strategy = MODES[mode]
    node = [cat.by_device_id(i) for i in ids] if ids else None
    return summarise(validate(config, node=node, strategy=strategy))


def _record() -> None:
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--", "mig"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    out: dict = {"recorded_at_commit": commit + (" (mig/ modified)" if dirty else ""), "shapes": {}}
    for shape in SHAPES:
        text = text_of(shape)
        config = parse_config(text)
        out["shapes"][shape] = {
            "text_sha256": hashlib.sha256(text.encode()).hexdigest(),
            "modes": {mode: judge(shape, config, mode) for mode in MODES},
        }
        print(f"recorded {shape}", flush=True)
    GOLDEN.parent.mkdir(exist_ok=True)
    GOLDEN.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")


def _golden() -> dict:
    return json.loads(GOLDEN.read_text())


@pytest.mark.parametrize("shape", list(SHAPES))
def test_verdicts_match_golden(shape: str) -> None:
    golden = _golden()["shapes"][shape]
    text = text_of(shape)
    # The generator itself must not have drifted, or the comparison below would be meaningless.
    assert hashlib.sha256(text.encode()).hexdigest() == golden["text_sha256"], (
        f"bench/_shapes.py generates different {shape!r} text than the golden data was recorded from"
    )
    config = parse_config(text)
    for mode in MODES:
        got = judge(shape, config, mode)
        want = golden["modes"][mode]
        changed = [
            f"configs {i * CHUNK}-{i * CHUNK + CHUNK - 1}"
            for i, (a, b) in enumerate(zip(got["chunks"], want["chunks"]))
            if a != b
        ]
        assert (got["configs"], got["valid"], got["rules"], changed) == (
            want["configs"],
            want["valid"],
            want["rules"],
            [],
        ), f"{shape}, {mode}"


def test_validator_makes_no_reference_cycles() -> None:
    """validate() pauses the cyclic collector, which is only safe if reference counting frees everything."""
    import gc

    config = parse_config(_shapes.distinct(configs=300))
    node = [catalogue().by_device_id(i) for i in MIXED_NODE]
    gc.collect()
    for ids, strategy in ((None, None), (node, "mixed"), (None, "single")):
        reports = validate(config, node=ids, strategy=strategy)
        del reports
    assert gc.collect() == 0


def test_golden_covers_every_shape_and_mode() -> None:
    golden = _golden()["shapes"]
    assert set(golden) == set(SHAPES)
    assert all(set(g["modes"]) == set(MODES) for g in golden.values())
    # The data is not vacuous: some of everything, errors and valid configs both.
    rules = Counter(r for g in golden.values() for m in g["modes"].values() for r in m["rules"])
    assert sum(m["valid"] for g in golden.values() for m in g["modes"].values()) > 1000
    for rule in (
        "unknown-profile",
        "count-exceeds-max",
        "placement-infeasible",
        "overlapping-entries",
        "device-filter-unknown",
        "strategy-mismatch",
        "fits-no-gpu",
    ):
        assert any(r.endswith(":" + rule) for r in rules), rule


if __name__ == "__main__":
    if sys.argv[1:] != ["--record"]:
        sys.exit(__doc__)
    _record()

"""Conformance with NVIDIA's own parser: for every input of tests/mig/conformance/corpus.json, `migops
validate` reads the file as mig-parted v0.15.0's assert.ParseConfigFile did when the verdicts were
recorded (verdicts.json; how they were recorded is in its `meta` and in docs/config-rules.md): the same
accepted/refused verdict, the same config names, the same parsed entries. The only differences allowed
are migops's documented rules of its own (DELIBERATE below, docs/config-rules.md)."""

from __future__ import annotations

import hashlib
import importlib.util
import json
from collections import Counter
from pathlib import Path

import pytest

from migops.mig.sources import read_file

HERE = Path(__file__).resolve().parent / "conformance"
_spec = importlib.util.spec_from_file_location("conformance_generate", HERE / "generate.py")
generate = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
_spec.loader.exec_module(generate)  # type: ignore[union-attr]

CORPUS = json.loads((HERE / "corpus.json").read_text(encoding="utf-8"))
RECORDED = json.loads((HERE / "verdicts.json").read_text(encoding="utf-8"))
VERDICTS = RECORDED["verdicts"]

# migops rules that refuse what mig-parted accepts (or accepts only by chance); docs/config-rules.md
DELIBERATE = {
    "duplicate-key": "a key written twice (mig-parted silently keeps the last), or two keys that become one "
    "JSON key (mig-parted keeps one of them at random)",
    "not-utf8": "input that is not UTF-8 (mig-parted also reads UTF-16 with a byte-order mark)",
    "input-too-large": "more than 1 MiB (the most a ConfigMap holds)",
    "yaml-too-large": "more than 100,000 nodes after alias expansion",
}
# A Kubernetes manifest is read as one (its MIG ConfigMap is checked); mig-parted would refuse the file.
MANIFEST = "a ConfigMap manifest"


def mig_parted_view(spec: dict) -> dict:
    """The recorded spec, in the terms migops keeps: filters as a list, a null mig-devices as empty."""
    out = {}
    for name, entries in (spec.get("mig-configs") or {}).items():
        rows = []
        for e in entries:
            f = e.get("device-filter")
            rows.append(
                {
                    "filter": [] if f in (None, "") else ([f] if isinstance(f, str) else f),
                    "devices": e["devices"],
                    "enabled": e["mig-enabled"],
                    "mig": e.get("mig-devices") or {},
                }
            )
        out[name] = rows
    return out


def migops_view(config) -> dict:
    return {
        name: [
            {
                "filter": list(e.device_filter),
                "devices": e.devices if e.devices == "all" else list(e.devices),
                "enabled": e.mig_enabled,
                "mig": {p.key: p.count for p in e.mig_devices},
            }
            for e in entries
        ]
        for name, entries in config.configs
    }


def verdict(entry: dict) -> tuple[str, object]:
    """("accepted", config) or ("refused", rules) or ("manifest", config): what `migops validate` reads."""
    contents = read_file(generate.input_bytes(entry))
    (source,) = contents.sources
    if contents.manifests:
        return "manifest", source.config
    if source.config is None:
        return "refused", {p.rule for p in source.problems if p.severity == "error"}
    return "accepted", source.config


def test_the_corpus_is_the_generated_one_and_was_recorded_as_it_is() -> None:
    assert len(CORPUS) >= 300
    assert generate.build() == CORPUS, "corpus.json is stale: run tests/mig/conformance/generate.py and re-record"
    assert set(VERDICTS) == {e["id"] for e in CORPUS}
    for e in CORPUS:
        assert VERDICTS[e["id"]]["sha256"] == hashlib.sha256(generate.input_bytes(e)).hexdigest(), e["id"]
    meta = RECORDED["meta"]
    assert meta["parser"] == "NVIDIA/mig-parted" and meta["version"].startswith("v") and len(meta["commit"]) == 40
    assert meta["go"].startswith("go version go") and meta["recorded"] and "assert.ParseConfigFile" in meta["how"]


def test_migops_reads_every_input_as_mig_parted_does() -> None:
    differences: Counter[str] = Counter()
    for e in CORPUS:
        recorded = VERDICTS[e["id"]]
        kind, found = verdict(e)
        where = f"{e['id']} ({e['about']})"
        if kind == "manifest":
            assert not recorded["accepted"], where
            differences[MANIFEST] += 1
            continue
        if recorded.get("varies"):
            # mig-parted's verdict changes from run to run (Go's map order): migops refuses the ambiguity
            assert kind == "refused" and found == {"duplicate-key"}, where
            differences["duplicate-key"] += 1
            continue
        if recorded["accepted"] and kind == "refused":
            assert found and found <= set(DELIBERATE), f"{where}: migops refuses it ({found}); mig-parted accepts it"
            differences[min(found)] += 1
            continue
        assert (kind == "accepted") == recorded["accepted"], (
            f"{where}: mig-parted {'accepts' if recorded['accepted'] else 'refuses: ' + recorded['error']}; migops {kind} {found}"
        )
        if kind == "accepted":
            assert sorted(found.names()) == recorded["names"], where
            assert migops_view(found) == mig_parted_view(recorded["spec"]), where
    agree = len(CORPUS) - sum(differences.values())
    print(
        f"\nconformance: {agree}/{len(CORPUS)} inputs read exactly as mig-parted {RECORDED['meta']['version']} reads "
        f"them; deliberate differences: {dict(differences)}"
    )
    # every deliberate rule is exercised by the corpus, and nothing else differs
    assert set(differences) == set(DELIBERATE) | {MANIFEST}


BY_ID = {e["id"]: e for e in CORPUS}


@pytest.mark.parametrize(
    "id_,warned",
    [
        ("yaml-doc-trailing-doc", True),
        ("yaml-doc-trailing-garbage-doc", True),
        ("yaml-doc-dots-then-doc", True),
        ("yaml-doc-trailing-dashes", False),
        ("yaml-doc-trailing-dots", False),
        ("yaml-doc-empty-first-doc", True),
    ],
)
def test_documents_mig_parted_ignores_are_reported(id_: str, warned: bool) -> None:
    kind, config = verdict(BY_ID[id_])
    assert kind == "accepted"
    assert any(n.rule == "trailing-document" for n in config.notes) == warned


def test_every_input_mig_parted_accepts_is_judged_without_an_exception() -> None:
    """Past reading: what mig-parted accepts (counts up to 2^63-1 included) goes through the whole
    validator, against the catalogue and on a node, and comes back as a verdict, never an exception."""
    from migops.mig.catalogue import catalogue
    from migops.mig.validate import validate

    node = [catalogue().resolve("0x233010DE")] * 8
    judged = 0
    for entry in CORPUS:
        kind, config = verdict(entry)
        if kind == "refused" or config is None or not config.configs:
            continue
        for strategy in (None, "single", "mixed"):
            assert len(validate(config, strategy=strategy)) == len(config.configs), entry["id"]
            assert len(validate(config, node=node, strategy=strategy)) == len(config.configs), entry["id"]
        judged += 1
    assert judged >= 200

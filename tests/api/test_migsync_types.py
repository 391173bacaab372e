"""The MigSync's one definition (migops.api.migsync): the parser names the field at fault, what the types
write they read back unchanged and the CRD's own schema admits, and the shipped CRD file is the one the
types make."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from migops.api.migsync import (
    Condition,
    ConditionStatus,
    MigSyncStatus,
    NodeEntry,
    NodePhase,
    StatusSummary,
    SuggestSpec,
    SyncSpec,
    TrustPolicy,
    VerifyMode,
    crd,
    migsync_object,
    parse_spec,
    parse_status,
)
from migops.api.schema import dump, openapi

ROOT = Path(__file__).resolve().parents[2]
KEY = "-----BEGIN PGP PUBLIC KEY BLOCK-----\nx\n-----END PGP PUBLIC KEY BLOCK-----"


def _schema(part: str) -> dict:
    """The CRD's own schema of spec or status, as the API server validates it."""
    return crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"][part]


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        ({}, "spec.url: is required"),
        ({"url": ""}, "spec.url: is required"),
        ({"url": 7}, "spec.url: must be a string"),
        ({"url": "r", "interval": "soon"}, "spec.interval: 'soon' is not a duration"),
        ({"url": "r", "interval": 60}, "spec.interval: must be a duration"),
        ({"url": "r", "suspend": "yes"}, "spec.suspend: must be true or false"),
        ({"url": "r", "verify": {"mode": "always"}}, "spec.verify.mode: must be one of none, head, not 'always'"),
        ({"url": "r", "verify": {"mode": "head"}}, "spec.verify: signature verification needs trusted keys"),
        ({"url": "r", "verify": {"openpgpKeys": "k"}}, "spec.verify.openpgpKeys: must be a list"),
        ({"url": "r", "verify": {"openpgpKeys": [1]}}, "spec.verify.openpgpKeys[0]: must be a string"),
        ({"url": "r", "suggest": {"enabled": True, "interval": "2x"}}, "spec.suggest.interval: '2x' is not"),
        ({"url": "r", "suggest": []}, "spec.suggest: must be an object"),
    ],
)
def test_the_parser_names_the_field_and_the_rule(spec: dict, error: str) -> None:
    with pytest.raises(ValueError) as exc:
        parse_spec({"spec": spec})
    assert str(exc.value).startswith(error), str(exc.value)


def test_defaults_are_the_crds() -> None:
    """What the API server fills in for an empty field is what the parser reads for a missing one."""
    spec = parse_spec({"spec": {"url": "file:///r"}})
    assert spec == SyncSpec("file:///r")
    assert spec.interval == 60 and spec.suggest.interval == 300 and spec.trust.mode == VerifyMode.NONE
    served = _schema("spec")["properties"]
    assert served["interval"]["default"] == "60s" and served["suggest"]["properties"]["interval"]["default"] == "5m"
    assert served["verify"]["properties"]["mode"]["default"] == "none"
    full = parse_spec({"spec": {"url": "r", "interval": "1h30m", "suggest": {"enabled": True, "interval": "500ms"}}})
    assert full.interval == 5400 and full.suggest == SuggestSpec(True, 0.5)


_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=8)
_specs = st.builds(
    SyncSpec,
    url=_text.filter(bool),
    ref=_text,
    path=_text,
    interval=st.integers(1, 10**6).map(float),
    suspend=st.booleans(),
    trust=st.one_of(
        st.just(TrustPolicy()), st.builds(TrustPolicy, st.just(VerifyMode.HEAD), st.just("a k"), st.just((KEY,)))
    ),
    suggest=st.builds(SuggestSpec, st.booleans(), st.integers(1, 10**5).map(float)),
)


_SPEC_VALIDATOR = jsonschema.Draft202012Validator(_schema("spec"))


@settings(deadline=None)  # a shared machine's pauses are not the parser's time
@given(_specs)
def test_a_spec_reads_back_what_it_writes_and_its_crd_admits_it(spec: SyncSpec) -> None:
    written = migsync_object("m", "ns", spec)
    _SPEC_VALIDATOR.validate(written["spec"])
    assert parse_spec(written) == spec


def test_a_status_reads_back_what_it_writes_and_its_crd_admits_it() -> None:
    status = MigSyncStatus(
        observed_generation=3,
        last_applied_revision="a" * 40,
        config_map="gpu-operator/migops-mig-config",
        conditions=(
            Condition("Ready", ConditionStatus.TRUE, "Succeeded", "", 3, "2026-01-01T00:00:00Z"),
            Condition("Stalled", ConditionStatus.FALSE, "Succeeded", "x", None, "2026-01-01T00:00:00Z"),
        ),
        summary=StatusSummary("1/2", 2, 1, 0, 0, 0, 0, 1),
        nodes=(
            NodeEntry("n1", "all-1g.10gb", NodePhase.PROGRESSING, "pending"),
            NodeEntry("n2", "c", NodePhase.IN_SYNC, "success", "b" * 40),
        ),
        warnings=("w",),
    )
    body = dump(status)
    jsonschema.validate(body, _schema("status"))
    assert body["conditions"][0]["message"] == ""  # written even when empty, as kstatus readers expect
    assert "revision" not in body["nodes"][0] and "problems" not in body and "summary" in body
    assert parse_status({"status": body}) == status
    assert parse_status({}) == MigSyncStatus()
    with pytest.raises(ValueError, match=r"status\.nodes\[0\]\.phase: must be one of InSync"):
        parse_status({"status": {"nodes": [{"name": "n", "config": "c", "phase": "Done", "state": "s"}]}})


def test_the_schema_follows_the_types() -> None:
    """A field of a type is a property of its schema, enums list their values, required is what has no
    default: a field added to SyncSpec is in the CRD with nothing else edited."""
    spec = openapi(SyncSpec)
    assert list(spec["properties"]) == ["url", "ref", "path", "interval", "suspend", "verify", "suggest"]
    assert spec["required"] == ["url"]
    phases = _schema("status")["properties"]["nodes"]["items"]["properties"]["phase"]["enum"]
    assert phases == [p.value for p in NodePhase]
    conditions = _schema("status")["properties"]["conditions"]
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]
    assert conditions["items"]["required"] == ["type", "status", "reason", "lastTransitionTime"]


def test_the_shipped_crd_is_the_types_crd() -> None:
    """The chart's crds/ file (the one every manifest references) is `make generate`'s render of crd()."""
    shipped = ROOT / "charts" / "migops" / "crds" / "migsyncs.migops.io.yaml"
    assert yaml.safe_load(shipped.read_text()) == crd()
    out = subprocess.run(
        [sys.executable, str(ROOT / "hack" / "generate.py"), "--check"], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr


def test_the_check_fails_on_a_file_that_differs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sys.path.insert(0, str(ROOT / "hack"))
    try:
        import generate
    finally:
        sys.path.remove(str(ROOT / "hack"))
    stale = tmp_path / "crd.yaml"
    stale.write_text(generate.crd_text().replace("minLength: 1", "minLength: 2"))
    monkeypatch.setattr(generate, "renders", lambda parts: {stale: generate.crd_text})
    monkeypatch.setattr(generate, "ROOT", tmp_path)
    assert generate.main(["--check", "crd"]) == 1
    assert generate.main(["crd"]) == 0 and generate.main(["--check", "crd"]) == 0

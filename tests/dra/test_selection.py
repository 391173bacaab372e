"""mig/dra.py: the NVIDIA DRA driver's MIG devices, CEL selectors evaluated with Kubernetes' library,
which profiles a claim selects, demand, and the admission findings."""

from __future__ import annotations

from typing import Any

import pytest

from migops.mig import dra, selectors
from migops.mig.catalogue import GpuModel, catalogue
from migops.mig.spec import parse_config

CAT = catalogue()


def model(device_id: str) -> GpuModel:
    found = CAT.by_device_id(device_id)
    assert found is not None
    return found


A100_80 = model("0x20B210DE")  # A100-SXM4-80GB
H100 = model("0x233010DE")  # H100-SXM5-80GB
A100_40 = model("0x20B010DE")


def claim(*requests: dict[str, Any], kind: str = "ResourceClaim") -> dict[str, Any]:
    devices = {"requests": list(requests)}
    spec: dict[str, Any] = {"devices": devices}
    if kind == "ResourceClaimTemplate":
        spec = {"spec": spec}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": "c", "namespace": "team"},
        "spec": spec,
    }


def req(name: str, *exprs: str, cls: str = dra.MIG_DEVICE_CLASS, count: int = 1) -> dict[str, Any]:
    return {
        "name": name,
        "exactly": {
            "deviceClassName": cls,
            "count": count,
            "selectors": [{"cel": {"expression": e}} for e in exprs],
        },
    }


PROFILE = "device.attributes['gpu.nvidia.com'].profile == '{}'"


def test_device_follows_the_driver_contract() -> None:
    gi = next(g for g in A100_80.profiles if g.name == "3g.40gb")
    dev = dra.mig_device(A100_80, gi, facts=dra.GpuFacts(minor=1, uuid="GPU-x", driver_version="580.1.2"), start=4)
    assert dev["name"] == "gpu-1-mig-3g40gb-9-4"  # ToCanonicalName: dots dropped, GI ID 9, start 4
    a = dev["attributes"]
    assert a["type"] == {"string": "mig"} and a["profile"] == {"string": "3g.40gb"}
    assert a["parentUUID"] == {"string": "GPU-x"}
    assert a["cudaComputeCapability"] == {"version": "8.0.0"}
    assert a["driverVersion"] == {"version": "580.1.2"}
    assert a["architecture"] == {"string": "Ampere"}
    c = dev["capacity"]
    assert c["memory"] == {"value": "40192Mi"} and c["multiprocessors"] == {"value": "42"}
    assert [k for k in c if k.startswith("memorySlice")] == [f"memorySlice{i}" for i in range(4, 8)]


def test_product_names_cover_nvml_spellings() -> None:
    assert "NVIDIA A100-SXM4-80GB" in dra.product_names(A100_80)
    assert "NVIDIA H100 80GB HBM3" in dra.product_names(H100)


def test_profile_selector_picks_that_profile_on_every_model_that_has_it() -> None:
    parsed = dra.claim_requests(claim(req("gpu", PROFILE.format("3g.40gb"))))
    (sel,) = parsed.selections
    assert sel.profiles == {"3g.40gb"}
    models = {m for m, _ in sel.by_model}
    assert A100_80.device_id in models and H100.device_id in models and A100_40.device_id not in models


def test_kubernetes_cel_library_quantity_and_semver() -> None:
    expr = (
        "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('30Gi')) >= 0 && "
        "device.capacity['gpu.nvidia.com'].multiprocessors.isLessThan(quantity('70')) && "
        "device.attributes['gpu.nvidia.com'].cudaComputeCapability.isGreaterThan(semver('8.0.0'))"
    )
    (sel,) = dra.claim_requests(claim(req("r", expr)), models=[A100_80, H100]).selections
    assert dict(sel.by_model) == {H100.device_id: frozenset({"3g.40gb", "4g.40gb"})}
    assert not sel.errors


def test_the_class_selector_applies() -> None:
    only_gpus = {"spec": {"selectors": [{"cel": {"expression": "device.attributes['gpu.nvidia.com'].type == 'gpu'"}}]}}
    (sel,) = dra.claim_requests(
        claim(req("r", PROFILE.format("1g.10gb"), cls="gpu.nvidia.com")), {"gpu.nvidia.com": only_gpus}
    ).selections
    assert sel.profiles == frozenset()
    (sel,) = dra.claim_requests(claim(req("r", PROFILE.format("1g.10gb"), cls="mine"))).selections
    assert sel.class_missing and sel.undetermined


def test_product_name_selector() -> None:
    expr = "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H100 80GB HBM3'"
    (sel,) = dra.claim_requests(claim(req("r", expr))).selections
    assert {m for m, _ in sel.by_model} == {H100.device_id}


def test_template_and_first_available() -> None:
    obj = claim(
        {
            "name": "any",
            "firstAvailable": [
                {
                    "name": "big",
                    "deviceClassName": "mig.nvidia.com",
                    "selectors": [{"cel": {"expression": PROFILE.format("7g.80gb")}}],
                },
                {
                    "name": "small",
                    "deviceClassName": "mig.nvidia.com",
                    "selectors": [{"cel": {"expression": PROFILE.format("1g.10gb")}}],
                },
            ],
        },
        kind="ResourceClaimTemplate",
    )
    parsed = dra.claim_requests(obj, models=[A100_80])
    assert [s.path for s in parsed.selections] == [
        "spec.spec.devices.requests[0].firstAvailable[0]",
        "spec.spec.devices.requests[0].firstAvailable[1]",
    ]
    (d,) = dra.demand(parsed)
    assert d.profiles == {"7g.80gb"} and d.source == "ResourceClaimTemplate team/c request any/big"


def test_undetermined_attributes_are_not_a_non_match() -> None:
    expr = "device.attributes['gpu.nvidia.com'].driverVersion.isGreaterThan(semver('550.0.0'))"
    (sel,) = dra.claim_requests(claim(req("r", expr)), models=[A100_80]).selections
    assert sel.gaps and not sel.by_model and not sel.errors
    assert dra.findings([sel], [A100_80]) == ()


def test_bad_cel_is_an_error_not_a_crash() -> None:
    (sel,) = dra.claim_requests(claim(req("r", "device.attributes[")), models=[A100_80]).selections
    assert sel.errors and "does not compile" in sel.errors[0]
    (sel,) = dra.claim_requests(claim(req("r", "quantity('x').isInteger()")), models=[A100_80]).selections
    assert sel.errors and "quantity" in sel.errors[0]
    deep = "(" * 3000 + "true" + ")" * 3000  # within the API server's 10 KiB, beyond the parser's recursion
    (sel,) = dra.claim_requests(claim(req("r", deep)), models=[A100_80]).selections
    assert sel.errors and not sel.by_model
    parsed = dra.claim_requests({"kind": "ResourceClaim", "spec": {"devices": {"requests": [5, {"name": "x"}]}}})
    assert parsed.problems == (
        "spec.devices.requests[0]: must be an object",
        "spec.devices.requests[1]: needs exactly or firstAvailable",
    )


def test_pending_demand_from_claims_and_pod_templates() -> None:
    pending = claim(req("gpu", PROFILE.format("3g.40gb"), count=2))
    allocated = {**claim(req("gpu", PROFILE.format("1g.10gb"))), "status": {"allocation": {"devices": {}}}}
    template = claim(req("t", PROFILE.format("7g.80gb")), kind="ResourceClaimTemplate")
    pod = {
        "metadata": {"namespace": "team", "name": "p"},
        "spec": {
            "priority": 5,
            "nodeSelector": {"pool": "a"},
            "resourceClaims": [{"name": "m", "resourceClaimTemplateName": "c"}],
        },
        "status": {"phase": "Pending"},
    }
    out = dra.pending_demand([pending, allocated], pods=[pod], templates={("team", "c"): template})
    assert [(d.kind, d.name, sorted(d.profiles), d.count, d.priority, d.node_selector) for d in out] == [
        ("ResourceClaim", "c", ["3g.40gb"], 2, 0, ()),
        ("Pod", "p", ["7g.80gb"], 1, 5, (("pool", "a"),)),
    ]
    assert out[1].source == "Pod team/p request c/t"
    made = {**pod, "status": {"phase": "Pending", "resourceClaimStatuses": [{"name": "m", "resourceClaimName": "p-m"}]}}
    assert dra.pending_demand([], pods=[made], templates={("team", "c"): template}) == ()


CONFIG = """
version: v1
mig-configs:
  all-1g.10gb:
    - devices: all
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}
"""


def test_findings_name_the_profile_and_the_closest() -> None:
    parsed = dra.claim_requests(
        claim(
            req("typo", PROFILE.format("3g.45gb")),
            req("elsewhere", PROFILE.format("1g.5gb")),
            req("unconfigured", PROFILE.format("3g.40gb")),
            req("fine", PROFILE.format("1g.10gb")),
        )
    )
    found = dra.findings(parsed.selections, [A100_80], parse_config(CONFIG))
    by_rule = {f.where.removeprefix("request "): f for f in found}
    assert set(by_rule) == {"typo", "elsewhere", "unconfigured"}
    assert by_rule["typo"].rule == "dra-unknown-profile" and "3g.45gb" in by_rule["typo"].text
    assert "3g.40gb" in by_rule["typo"].text  # closest on the cluster's model
    assert by_rule["elsewhere"].rule == "dra-profile-not-in-cluster" and "A100-SXM4-40GB" in by_rule["elsewhere"].text
    assert by_rule["unconfigured"].rule == "dra-profile-not-configured"
    assert "3g.40gb" in by_rule["unconfigured"].text and "1g.10gb" in by_rule["unconfigured"].text


def test_full_gpu_requests_are_not_mig() -> None:
    expr = "device.attributes['gpu.nvidia.com'].type == 'gpu'"
    (sel,) = dra.claim_requests(claim(req("r", expr, cls="gpu.nvidia.com")), {"gpu.nvidia.com": {}}).selections
    assert dra.findings([sel], [A100_80]) == ()


@pytest.mark.parametrize(
    ("expr", "want"),
    [
        ("semver('1.2.3').major() == 1", True),
        ("semver('v1.2', true).isGreaterThan(semver('1.1.9'))", True),
        ("semver('1.0.0-rc.1').isLessThan(semver('1.0.0'))", True),
        ("isSemver('1.2')", False),
        ("quantity('1Gi').isGreaterThan(quantity('1000Mi'))", True),
        ("quantity('1.5').isInteger()", False),
        ("quantity('2k').asInteger() == 2000", True),
        ("'A-b'.lowerAscii() == 'a-b'", True),
        ("'a,b'.split(',').size() == 2", True),
    ],
)
def test_library_functions(expr: str, want: bool) -> None:
    assert selectors.selects(expr, selectors.cel_device({}, dra.DRIVER)) is want

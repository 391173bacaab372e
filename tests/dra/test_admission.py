"""webhook/dra.py on a hand-made Snapshot, its registration, and the matchConditions' CEL."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import celpy

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "webhook"))
from webhook_helpers import CM_NS, configmap, review

from migops.sandbox.evaluator import judge_in_process
from migops.webhook.admission import parse_review
from migops.webhook.app import RULES
from migops.webhook.registration import in_cluster
from migops.webhook.state import Snapshot, trim_node

ALL_1G = """
version: v1
mig-configs:
  all-1g.10gb:
    - devices: all
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}
"""
NODE = {
    "metadata": {
        "name": "n1",
        "labels": {
            "migops.io/gpu.device-id": "0x20B210DE",  # A100-SXM4-80GB
            "nvidia.com/gpu.count": "8",
            "nvidia.com/mig.config": "all-1g.10gb",
        },
    }
}
POLICY = {
    "metadata": {"name": "cluster-policy", "creationTimestamp": "2026-01-01T00:00:00Z"},
    "spec": {"mig": {"strategy": "mixed"}},
    "status": {"namespace": CM_NS},
}


def snap(text: str = ALL_1G) -> Snapshot:
    return Snapshot.build(1, [trim_node(NODE)], [POLICY], [configmap(text)])


def claim(profile: str, kind: str = "ResourceClaim", device_class: str = "mig.nvidia.com") -> dict[str, Any]:
    request = {
        "name": "gpu",
        "exactly": {
            "deviceClassName": device_class,
            "selectors": [{"cel": {"expression": f"device.attributes['gpu.nvidia.com'].profile == '{profile}'"}}],
        },
    }
    spec: dict[str, Any] = {"devices": {"requests": [request]}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": "c", "namespace": "team"},
        "spec": {"spec": spec} if kind == "ResourceClaimTemplate" else spec,
    }


def verdict(obj: dict[str, Any], s: Snapshot) -> Any:
    req = parse_review(json.loads(json.dumps(review(obj, group="resource.k8s.io"))))
    rule = RULES["validate"][("resource.k8s.io", req.kind)]
    return rule.validate(req, s, rule.prefetch(req, s, judge_in_process))


def test_claim_for_an_unconfigured_profile_is_warned_not_denied() -> None:
    v = verdict(claim("3g.40gb"), snap())
    assert v.allowed
    (w,) = v.warnings
    assert "3g.40gb" in w and "no geometry in force creates it" in w and "1g.10gb" in w
    assert "[dra-profile-not-configured]" in w


def test_template_with_a_typo_names_the_closest() -> None:
    v = verdict(claim("3g.41gb", kind="ResourceClaimTemplate"), snap())
    assert v.allowed
    (w,) = v.warnings
    assert "3g.41gb" in w and "3g.40gb" in w and "[dra-unknown-profile]" in w


def test_profile_of_a_model_not_in_the_cluster() -> None:
    (w,) = verdict(claim("1g.5gb"), snap()).warnings
    assert "A100-SXM4-40GB" in w and "[dra-profile-not-in-cluster]" in w


def test_configured_profile_has_no_warning() -> None:
    assert verdict(claim("1g.10gb"), snap()).warnings == ()


def test_a_class_and_a_selector_that_select_nothing_together_are_named() -> None:
    """migops's mig-<profile>.nvidia.com classes are known by name: with a selector for another profile
    (a typo or not) the request selects no device, which the warning says naming both constraints."""
    for wanted in ("3g.45gb", "3g.40gb"):
        (w,) = verdict(claim(wanted, device_class="mig-1g.10gb.nvidia.com"), snap()).warnings
        assert "[dra-selects-nothing]" in w and "class mig-1g.10gb.nvidia.com (1g.10gb)" in w, w
        assert f"selector profile == '{wanted}'" in w and len(w.split(" [")[0]) <= 120, w
    # The class and a selector that agree: nothing to say; the generic class with the typo: as before.
    assert verdict(claim("1g.10gb", device_class="mig-1g.10gb.nvidia.com"), snap()).warnings == ()
    (w,) = verdict(claim("3g.45gb"), snap()).warnings
    assert "[dra-unknown-profile]" in w
    # A class migops does not define: its selectors are unknown here, no verdict.
    assert verdict(claim("3g.45gb", device_class="gpu.example.com"), snap()).warnings == ()


def test_device_class() -> None:
    cls = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "mig-3g.45gb"},
        "spec": {"selectors": [{"cel": {"expression": "device.attributes['gpu.nvidia.com'].profile == '3g.45gb'"}}]},
    }
    v = verdict(cls, snap())
    assert v.allowed and "3g.45gb" in v.warnings[0] and "[dra-unknown-profile]" in v.warnings[0]


def test_garbage_is_answered_not_crashed() -> None:
    for spec in (
        {"devices": {"requests": "x"}},
        {"devices": {"requests": [{"exactly": {"selectors": [{"cel": {"expression": "(("}}]}}]}},
        {"devices": 3},
    ):
        obj = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "c"}, "spec": spec}
        assert verdict(obj, snap()).allowed


def _hook(name: str) -> dict[str, Any]:
    (validating, _) = in_cluster()
    return next(h for h in validating["webhooks"] if h["name"] == name)


def test_registration_sends_only_objects_with_selectors() -> None:
    """The matchConditions, evaluated with the same CEL library on objects as the API server sends them."""
    env = celpy.Environment()
    claims = _hook("resourceclaims.validate.migops.io")
    assert claims["failurePolicy"] == "Ignore"
    assert claims["rules"][0]["apiGroups"] == ["resource.k8s.io"]

    def sent(hook: dict[str, Any], obj: dict[str, Any]) -> bool:
        (cond,) = hook["matchConditions"]
        return bool(env.program(env.compile(cond["expression"])).evaluate({"object": celpy.json_to_cel(obj)}))

    assert sent(claims, claim("1g.10gb"))
    plain = {"spec": {"devices": {"requests": [{"name": "g", "exactly": {"deviceClassName": "mig.nvidia.com"}}]}}}
    assert not sent(claims, plain)
    assert sent(_hook("resourceclaimtemplates.validate.migops.io"), claim("1g.10gb", kind="ResourceClaimTemplate"))
    assert not sent(_hook("deviceclasses.validate.migops.io"), {"spec": {}})

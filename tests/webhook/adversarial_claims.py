"""ResourceClaims that cost a webhook dearly to judge, each within the API server's limits on a claim's
size and a selector's length: what tests/webhook/test_webhook_dra_bounds.py and
bench/webhook_adversarial.py submit."""

from __future__ import annotations

from typing import Any

PROFILE = "device.attributes['gpu.nvidia.com'].profile"
RANGE = "[" + ", ".join(str(i) for i in range(100)) + "]"


def claim(name: str, requests: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "team"},
        "spec": {"devices": {"requests": requests}},
    }


def _request(name: str, expressions: list[str]) -> dict[str, Any]:
    return {
        "name": name,
        "exactly": {
            "deviceClassName": "mig.nvidia.com",
            "selectors": [{"cel": {"expression": e}} for e in expressions],
        },
    }


def huge_string(tag: int = 0) -> dict[str, Any]:
    """One selector that builds a string of billions of characters by chained replace, on every device."""
    expression = PROFILE + ".replace('g', 'gggggggggg')" * 10 + f".size() > {tag}"
    return claim(f"huge-string-{tag}", [_request("gpu", [expression])])


def loops(tag: int = 0) -> dict[str, Any]:
    """Nested comprehensions: a million iterations per device."""
    expression = f"{RANGE}.all(a, {RANGE}.all(b, {RANGE}.all(c, a + b + c >= {-tag - 1})))"
    return claim(f"loops-{tag}", [_request("gpu", [expression])])


def many_requests(tag: int = 0) -> dict[str, Any]:
    """32 requests of 8 firstAvailable alternatives of 4 plain selectors each, every one distinct."""
    requests = []
    for r in range(32):
        alternatives = [
            {
                "name": f"a{a}",
                "deviceClassName": "mig.nvidia.com",
                "selectors": [
                    {"cel": {"expression": f"{PROFILE} != 'x-{tag}-{r}-{a}-{s}' && {PROFILE}.size() > {s}"}}
                    for s in range(4)
                ],
            }
            for a in range(8)
        ]
        requests.append({"name": f"r{r}", "firstAvailable": alternatives})
    return claim(f"many-requests-{tag}", requests)


ADVERSARIAL = (huge_string, loops, many_requests)

"""Pending claims read as MIG demand (the reconciler's spec.suggest, `migops suggest`) are judged in the
process's bounded evaluator (migops.sandbox.evaluator), as the webhook judges them: a claim whose
selector builds a gigabyte string costs the reader's process nothing and is no demand; the claims
beside it are read as before."""

from __future__ import annotations

import logging
import resource
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "webhook"))
from adversarial_claims import claim, huge_string

from migops.sandbox.evaluator import Evaluator, bounded_reader
from migops.suggest.claims import read_claims


def _wants(profile: str, name: str) -> dict:
    expression = f"device.attributes['gpu.nvidia.com'].profile == '{profile}'"
    request = {
        "name": "gpu",
        "exactly": {"deviceClassName": "mig.nvidia.com", "selectors": [{"cel": {"expression": expression}}]},
    }
    return claim(name, [request])


def test_a_huge_string_claim_is_no_demand_and_costs_the_reader_nothing(caplog) -> None:
    evaluator = Evaluator()
    try:
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB
        with caplog.at_level(logging.WARNING):
            found = read_claims(
                [_wants("3g.40gb", "fine"), huge_string(1), _wants("1g.10gb", "after")],
                [],
                [],
                [],
                without_pods=True,
                read=bounded_reader(evaluator),
            )
        grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) >> 10
        assert sorted((d.name, sorted(d.profiles)) for d in found) == [("after", ["1g.10gb"]), ("fine", ["3g.40gb"])]
        assert grown < 64, f"the reader's process grew {grown} MiB"
        assert "ResourceClaim team/huge-string-1 counts as no MIG demand" in caplog.text, caplog.text
        assert "memory bound" in caplog.text or "s, the bound per object" in caplog.text
    finally:
        evaluator.stop()

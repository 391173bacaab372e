"""0 × 5xx over 100,000 fuzzed reviews posted straight to the webhook (prints figures).

The reviews (bench/_fuzz.py) are mutated AdmissionReviews of every kind the webhook serves: MIG
ConfigMaps (validate and mutate, in force and labelled, UPDATE and DELETE), Nodes (label edits,
nodes/status, by the reconciler and by others), ClusterPolicies (CREATE, a strategy switch, status,
DELETE), Pods (validate and mutate), a ResourceClaim and a kind the webhook does not judge; one to four
mutations each (nasty values, wrong types, 1,000-deep nesting, removed and added keys, cut or corrupted
bytes). They go to the webhook's app in-process (Flask's test client over a fixed cluster state), as a
client that reaches the Service directly would send them, with no API server in front to refuse them
first; what is counted is the app's HTTP status. Target: 0 × 5xx.

Usage: .venv/bin/python bench/webhook_fuzz.py   (BENCH_REVIEWS, default 100000; BENCH_SEED, default 0)
"""

from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _fuzz

REVIEWS = int(os.environ.get("BENCH_REVIEWS", "100000"))
SEED = int(os.environ.get("BENCH_SEED", "0"))


def main() -> int:
    logging.basicConfig(level=logging.ERROR)  # the app's rate-limited lines about bad requests are expected
    print(f"machine: {os.cpu_count()} CPUs, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    client = _fuzz.app().test_client()
    started = time.monotonic()
    statuses: dict[int, int] = {}
    errors: list[tuple[int, str, bytes]] = []
    step = 10_000
    for first in range(0, REVIEWS, step):
        count = min(step, REVIEWS - first)
        part, bad = _fuzz.run(count, SEED * 1_000_000 + first, client=client)
        for code, n in part.items():
            statuses[code] = statuses.get(code, 0) + n
        errors += bad
        print(
            f"  {first + count:7d} reviews, {time.monotonic() - started:5.0f} s: {dict(sorted(statuses.items()))}",
            flush=True,
        )
    server_errors = sum(n for code, n in statuses.items() if code >= 500)
    print(f"HTTP statuses over {REVIEWS} fuzzed direct reviews: {dict(sorted(statuses.items()))}")
    print(
        f"5xx: {server_errors} (target 0); answers not matching their review: {len(errors) - min(len(errors), server_errors)}"
    )
    for i, path, answer in errors[:10]:
        print(f"  review {i} to {path}: {answer!r}")
    return 0  # figures, not a verdict (bench/run.py)


if __name__ == "__main__":
    sys.exit(main())

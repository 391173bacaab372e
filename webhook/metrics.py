"""Prometheus metrics: requests, denials by rule, latency, verdict cache hits.

Under gunicorn with several worker processes, each worker counts in its own files under
$PROMETHEUS_MULTIPROC_DIR (set before this module is first imported; `migops webhook` and the
container's gunicorn config do that) and /metrics adds them up.
"""

from __future__ import annotations

import os
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest, multiprocess

from migops.webhook import MULTIPROC_ENV

REQUESTS = Counter(
    "migops_webhook_requests_total",
    "Admission requests answered, by endpoint, kind and result (allowed, denied, bad_request, not_ready, error).",
    ["endpoint", "kind", "result"],
)
DENIALS = Counter(
    "migops_webhook_denials_total",
    "Denials, by the rule behind them (a denial with several rules counts once for each).",
    ["rule"],
)
LATENCY = Histogram(
    "migops_webhook_request_duration_seconds",
    "Time to answer an admission request, from the body read to the response built, by endpoint and kind.",
    ["endpoint", "kind"],
    # Fine below 10 ms, where a review's time is: p50/p99 are read from these (bench/webhook_scale.py).
    buckets=(
        0.00025,
        0.0005,
        0.00075,
        0.001,
        0.0015,
        0.002,
        0.003,
        0.005,
        0.0075,
        0.01,
        0.02,
        0.05,
        0.1,
        0.25,
        0.5,
        1.0,
        2.5,
    ),
)
CACHE = Counter("migops_webhook_verdict_cache_total", "Verdict cache lookups, by result (hit, miss).", ["result"])


def child(metric: Counter | Histogram, *labels: str) -> Any:
    """`metric.labels(*labels)`, looked up once: prometheus_client validates the labels and takes a
    lock on every `labels()` call, a cost paid per review that a dict lookup avoids."""
    key = (metric, labels)
    found = _children.get(key)
    if found is None:
        found = _children[key] = metric.labels(*labels)
    return found


_children: dict[tuple[Any, tuple[str, ...]], Any] = {}


def exposition() -> tuple[bytes, str]:
    """The metrics page: this process's, or every worker's when running multi-process."""
    if os.environ.get(MULTIPROC_ENV):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return generate_latest(registry), CONTENT_TYPE_LATEST
    return generate_latest(), CONTENT_TYPE_LATEST

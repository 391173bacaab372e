"""Slow clients against `migops webhook` itself (gunicorn, the API server in front):
TLS connections sending a POST header and then a byte every few seconds must not hold the threads
reviews need. With forty open, reviews posted directly and writes through the API server (failurePolicy Fail:
refused if the webhook does not answer) are answered at once, and the slow ones are cut with a 408
after the read deadline."""

from __future__ import annotations

import ssl
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import _slow  # bench/_slow.py: the slow-body clients
from webhook_helpers import DEFAULT_CONFIG, MANAGER, configmap, review

from migops.kube import ssa
from migops.webhook.worker import READ_TIMEOUT


def test_forty_slow_bodies_starve_no_review(hook, direct, cluster_state) -> None:
    host, port = hook.url.removeprefix("https://").split(":")
    ctx = ssl.create_default_context(cadata=(hook.certs / "ca-bundle.crt").read_text())
    body = review(configmap(DEFAULT_CONFIG), operation="UPDATE", old=configmap(DEFAULT_CONFIG))
    with _slow.SlowClients(host, int(port), ctx, count=40, interval=1.0) as slow:
        assert slow.sending == 40 and not slow.failures, slow.failures
        started = time.monotonic()
        direct_times, api_times = [], []
        for _ in range(20):
            began = time.monotonic()
            resp = direct.post("/validate", body)
            assert resp.status == 200, resp.data[:200]
            direct_times.append(time.monotonic() - began)
        for i in range(5):
            labelled = configmap(DEFAULT_CONFIG, labels={"bench": str(i)})
            began = time.monotonic()
            ssa.apply(cluster_state, labelled, field_manager=MANAGER, dry_run=True, force=True)
            api_times.append(time.monotonic() - began)
        assert slow.sending == 40, "the slow ones are still open while the others are answered"
        assert time.monotonic() - started < READ_TIMEOUT - 1
        assert max(direct_times) < 1.0 and max(api_times) < 2.0, (direct_times, api_times)
        slow.wait_cut(READ_TIMEOUT + 5)
    assert len(slow.cuts) == 40
    assert all(answer.startswith(b"HTTP/1.1 408") for _, answer in slow.cuts), slow.cuts[:3]
    assert all(READ_TIMEOUT - 0.5 <= after <= READ_TIMEOUT + 2.5 for after, _ in slow.cuts), slow.cuts

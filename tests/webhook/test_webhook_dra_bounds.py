"""A ResourceClaim never delays other reviews, nor grows the worker: its selectors are judged in the
worker's evaluator process (migops.sandbox.evaluator), never under the state's lock, within a time and a
memory bound whose hit is answered `dra-selector-error`, naming the bound.

The claims are those of tests/webhook/adversarial_claims.py: one selector building a string of
billions of characters, nested comprehensions of a million iterations per device, and 32 requests of
8 alternatives of 4 selectors. Latency and RSS figures: bench/webhook_adversarial.py (phase claims)."""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from adversarial_claims import huge_string, loops, many_requests
from webhook_helpers import DEFAULT_CONFIG, configmap, review

from migops.sandbox import evaluator as evaluator_module
from migops.sandbox.evaluator import Bound, Evaluator
from migops.webhook.app import ReviewPorts, create_app
from migops.webhook.state import Snapshot, trim_node

NODE = {
    "metadata": {
        "name": "n1",
        "labels": {"migops.io/gpu.device-id": "0x233010DE", "nvidia.com/gpu.count": "8"},
    }
}


class Fixed:
    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.synced = True
        policy = {"metadata": {"name": "cluster-policy"}, "spec": {"mig": {"strategy": "mixed"}}}
        self._snap = Snapshot.build(0, [trim_node(NODE)], [policy], [configmap(DEFAULT_CONFIG)])

    def wait_synced(self, timeout: float) -> bool:
        return True

    def snapshot(self) -> Snapshot:
        return self._snap

    def errors(self) -> dict[str, str]:
        return {}


def rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def post(app, obj: dict[str, Any], **kw: Any) -> dict[str, Any]:
    got = app.test_client().post("/validate", data=json.dumps(review(obj, **kw)), content_type="application/json")
    assert got.status_code == 200, got.data
    return got.get_json()["response"]


def label_write(i: int) -> dict[str, Any]:
    labels = {**NODE["metadata"]["labels"], "nvidia.com/mig.config": "all-1g.10gb" if i % 2 else "all-balanced"}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"n{i}", "labels": labels}}


def test_node_reviews_are_answered_while_adversarial_claims_are_judged() -> None:
    """20 adversarial claims in a loop; meanwhile 100 Node label writes are all answered before the
    loop ends (none waits for a claim: the claims hold neither the state's lock nor the worker), and
    the process serving both grows by less than 50 MiB."""
    app = create_app(Fixed())
    evaluator = app.extensions["migops.evaluator"]
    post(app, label_write(0), kind="Node")  # the app's own first-use costs, before the RSS is read
    before = rss_kib()
    answers: list[dict[str, Any]] = []
    claims_done = threading.Event()

    def submit() -> None:
        for i in range(20):
            answers.append(post(app, (huge_string, loops, many_requests)[i % 3](i), group="resource.k8s.io"))
        claims_done.set()

    claims = threading.Thread(target=submit)
    claims.start()
    while evaluator.pid is None:  # the first claim is with the evaluator
        assert claims.is_alive()
        threading.Event().wait(0.01)
    nodes = [post(app, label_write(i), kind="Node") for i in range(1, 101)]
    nodes_done_first = not claims_done.is_set()
    claims.join()
    assert nodes_done_first, "a Node review waited for the claims"
    assert all(n["allowed"] for n in nodes) and len(nodes) == 100
    assert evaluator.pid != os.getpid() and evaluator.started >= 1
    bounded = [a for a in answers if any("[dra-selector-error" in w for w in a.get("warnings", ()))]
    assert len(answers) == 20 and len(bounded) >= 13, answers  # the huge and the looping ones, at least
    assert rss_kib() - before < 50 * 1024
    evaluator.stop()


def test_a_huge_string_hits_the_memory_bound_not_the_worker() -> None:
    evaluator = Evaluator(wall=120.0)  # only the memory bound can stop it
    before = rss_kib()
    try:
        got = evaluator.judge("ResourceClaim", "c", huge_string())
        assert isinstance(got, Bound) and got.which == "memory", got
        assert f"{evaluator.memory >> 20} MiB" in got.text
        assert rss_kib() - before < 50 * 1024
        again = evaluator.judge("ResourceClaim", "c", many_requests())  # a fresh child answers the next one
        for _ in range(5):  # its start may outlast one judgement's wait on a loaded machine: busy, then answered
            if not (isinstance(again, Bound) and again.which == "busy"):
                break
            again = evaluator.judge("ResourceClaim", "c", many_requests())
        assert isinstance(again, tuple) and evaluator.started == 2, again
    finally:
        evaluator.stop()


def test_a_long_judgement_hits_the_time_bound() -> None:
    evaluator = Evaluator(wall=0.3)
    try:
        evaluator.judge("ResourceClaim", "c", many_requests())  # the child started (its start is not timed)
        got = evaluator.judge("ResourceClaim", "c", huge_string())
        assert isinstance(got, Bound) and got.which == "time" and "0.3 s" in got.text, got
    finally:
        evaluator.stop()


def test_waiting_claims_are_bounded_too() -> None:
    """With one claim judged, the next is answered at once (busy), and that answer is never cached."""
    evaluator = Evaluator(wall=5.0, queue=1)
    app = create_app(Fixed(), ReviewPorts(judge_claims=evaluator.judge))
    try:
        first = threading.Thread(target=post, args=(app, loops(1)), kwargs={"group": "resource.k8s.io"})
        first.start()
        while evaluator.pid is None:
            threading.Event().wait(0.01)
        busy = post(app, many_requests(), group="resource.k8s.io")
        assert busy["allowed"] and "busy" in busy["warnings"][0] and "[dra-selector-error]" in busy["warnings"][0]
        first.join()
        judged = post(app, many_requests(), group="resource.k8s.io")
        assert not any("busy" in w for w in judged.get("warnings", ()))
    finally:
        evaluator.stop()


def test_an_evaluator_that_does_not_start_in_time_answers_busy(monkeypatch: pytest.MonkeyPatch) -> None:
    """A start slower than its bound (a loaded machine) is a transient answer, not the memory bound."""
    monkeypatch.setattr(evaluator_module, "START_SECONDS", 0.001)
    evaluator = Evaluator(wall=120.0)  # only the start is bounded here
    try:
        got = evaluator.judge("ResourceClaim", "c", many_requests())
        assert isinstance(got, Bound) and got.which == "busy" and "did not start" in got.text, got
        monkeypatch.setattr(evaluator_module, "START_SECONDS", 60.0)
        again = evaluator.judge("ResourceClaim", "c", many_requests())  # the same child, waited for again
        assert isinstance(again, tuple) and evaluator.started == 1, again
    finally:
        evaluator.stop()

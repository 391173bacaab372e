"""The Flask app: POST /validate and /mutate (AdmissionReview v1), /healthz, /readyz, /metrics.

The hot path is short on purpose: read the body, decode it (orjson), check the envelope, look the
verdict up by (what the rule reads of the object, cluster-state version), answer with the verdict's
response bytes, serialised once per verdict; no logging, metric children looked up once. Only a miss
runs the rules, and the rules read the informers' Snapshot, never the API server (one exception: a
ClusterPolicy switching to another MIG ConfigMap reads that ConfigMap, uncached; policies.py). dryRun
is never read, so a server-side dry-run gets exactly the answer the real request will get.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, Protocol

from flask import Flask, Response, request
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge

from migops.sandbox.evaluator import Evaluator
from migops.webhook import annotate, configmaps, dra, metrics, nodelabels, pods, policies
from migops.webhook.admission import (
    ALLOW,
    MAX_BODY,
    BadReview,
    Request,
    Verdict,
    decode,
    deny,
    parse_review,
    shorten,
)
from migops.webhook.cache import LRU
from migops.webhook.ratelog import RateLimitedLog
from migops.webhook.state import Snapshot

log = logging.getLogger(__name__)
bad_requests = RateLimitedLog(log, per_interval=10, interval=10.0)  # one line per bad request, at most 10 per 10 s
errors = RateLimitedLog(log, per_interval=5, interval=10.0)

# Verdicts are weighed by the bytes they hold (Verdict.weight: flat strings, checked against
# memory.retained by tests/webhook/test_webhook_memory.py) plus a fixed allowance for their keys
# (digests and values of at most Kubernetes' limits, admission.check_object; the state's versions and
# settings they name are shared): 4 MiB of them whatever the requests hold.
CACHE_BYTES = 4 << 20
_KEY_WEIGHT = 1024
SYNC_WAIT = 2.0  # a review that arrives before the caches are synced waits at most this long
JSON = "application/json"


@dataclass(frozen=True)
class AdmissionRule:
    """One rule: what its verdict depends on in the request (`key`), the rule itself (`validate`), what
    it reads of the cluster state (`reads`: the versions of exactly the indexes it reads, so a change
    elsewhere, another node's label or an agent's capacity, keeps its verdicts), and what it reads
    through a port before the verdict (`prefetch`, given the port named `port`): a slow API server or
    a costly selector holds up no other review. Each review holds one immutable Snapshot throughout,
    without a lock. The verdict is cached under (key, reads); a rule with a prefetch gets what it
    fetched as the third argument of both."""

    key: Callable[[Request], tuple]
    validate: Callable[..., Verdict]
    reads: Callable[..., tuple]
    prefetch: Callable[[Request, Snapshot, Any], Any] | None = None
    port: str = ""  # the ReviewPorts field prefetch is given


@dataclass(frozen=True)
class ReviewPorts:
    """What rules read outside the informers' state. Without `read_configmap`, a ClusterPolicy switching
    to another MIG ConfigMap is denied as uncheckable; without `read_migsync`, a Node naming a MigSync
    the informer does not hold (yet) is denied (never admitted on a cache miss); `judge_claims` judges
    DRA objects' selectors (migops.sandbox.evaluator: a bounded child process by default)."""

    read_configmap: policies.ReadConfigMap | None = None
    read_migsync: nodelabels.ReadMigSync | None = None
    judge_claims: dra.Judge | None = None


def _placed(req: Request, snap: Snapshot) -> tuple:
    """ConfigMap and ClusterPolicy rules: the settings, the config in force, the nodes' configs and GPUs."""
    return snap.mig.key, snap.nodes.version


def _policy_reads(req: Request, snap: Snapshot, fetched: object) -> tuple:
    return _placed(req, snap)


def _pods(req: Request, snap: Snapshot) -> tuple:
    """Pod rules: the strategy, which MIG resources are offered, which GPU models are present."""
    return snap.strategy, snap.summary.offers_version, snap.summary.models_version


RULES: dict[str, dict[tuple[str, str], AdmissionRule]] = {
    "validate": {
        ("", "ConfigMap"): AdmissionRule(configmaps.cache_key, configmaps.validate, configmaps.reads),
        ("", "Node"): AdmissionRule(
            nodelabels.cache_key, nodelabels.validate, nodelabels.reads, nodelabels.prefetch, "read_migsync"
        ),
        ("nvidia.com", "ClusterPolicy"): AdmissionRule(
            policies.cache_key, policies.validate, _policy_reads, policies.prefetch, "read_configmap"
        ),
        ("", "Pod"): AdmissionRule(pods.cache_key, pods.validate, _pods),
        **{
            (dra.GROUP, kind): AdmissionRule(dra.cache_key, dra.validate, dra.reads, dra.prefetch, "judge_claims")
            for kind in dra.KINDS
        },
    },
    "mutate": {
        ("", "ConfigMap"): AdmissionRule(annotate.mutation_key, annotate.mutate, _placed),
        ("", "Pod"): AdmissionRule(pods.cache_key, pods.mutate, _pods),
    },
}


class State(Protocol):
    """What the app needs of migops.webhook.state.ClusterState (tests may pass a fixed one)."""

    @property
    def synced(self) -> bool: ...

    def wait_synced(self, timeout: float) -> bool: ...

    def snapshot(self) -> Snapshot: ...

    def errors(self) -> dict[str, str]: ...


def create_app(state: State, ports: ReviewPorts | None = None, *, cache_bytes: int = CACHE_BYTES) -> Flask:
    """The app over `state`, reading through `ports` what the informers do not hold (default: no
    ConfigMap or MigSync reads, DRA selectors judged by a bounded child process)."""
    app = Flask("migops.webhook")
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY
    verdicts: LRU[tuple, Verdict] = LRU(cache_bytes)
    ports = ports or ReviewPorts()
    if ports.judge_claims is None:
        evaluator = Evaluator()
        ports = replace(ports, judge_claims=evaluator.judge)
        app.extensions["migops.evaluator"] = evaluator
    app.extensions["migops.verdicts"] = verdicts
    reviewer = Reviewer(state, ports, verdicts)
    for endpoint in RULES:
        app.add_url_rule(f"/{endpoint}", endpoint, partial(reviewer.review, endpoint), methods=["POST"])
    app.add_url_rule("/healthz", "healthz", partial(_plain, 200, "ok"))
    app.add_url_rule("/readyz", "readyz", partial(_readyz, state))
    app.add_url_rule("/metrics", "metrics", _metrics_page)
    app.register_error_handler(HTTPException, _http_error)
    app.register_error_handler(Exception, _internal_error)
    return app


class Reviewer:
    """Answers AdmissionReviews: parse, look the verdict up, run the rule on a miss."""

    def __init__(self, state: State, ports: ReviewPorts, verdicts: LRU[tuple, Verdict]) -> None:
        self.state, self.ports, self.verdicts = state, ports, verdicts

    def review(self, endpoint: str) -> Response:
        started = time.perf_counter()
        kind, result = "-", "error"
        try:
            req = self._parse()
            if isinstance(req, Response):
                result = "bad_request"
                return req
            rule = RULES[endpoint].get((req.group, req.kind))
            kind = req.kind if rule is not None else "other"
            if not self.state.synced and not self.state.wait_synced(SYNC_WAIT):
                result = "not_ready"
                return _plain(503, "cluster state not synced yet; the API server applies the failurePolicy")
            verdict = self._verdict(endpoint, req, rule)
            result = "allowed" if verdict.allowed else "denied"
            for rule_name in verdict.rules:
                metrics.child(metrics.DENIALS, rule_name).inc()
            return Response(verdict.body(req.uid), 200, mimetype=JSON)
        except HTTPException:  # 413: over MAX_BODY
            if kind == "-":
                result = "bad_request"
            raise
        finally:
            metrics.child(metrics.REQUESTS, endpoint, kind, result).inc()
            metrics.child(metrics.LATENCY, endpoint, kind).observe(time.perf_counter() - started)

    def _parse(self) -> Request | Response:
        """The review, or the 400 that says why it is not one."""
        try:
            return parse_review(decode(_read_body()))
        except (ValueError, RecursionError) as exc:  # JSONDecodeError, UnicodeDecodeError, BadReview
            reason = str(exc) if isinstance(exc, BadReview) else f"body is not JSON: {exc}"
            reason = shorten(reason, 300)
            bad_requests.warning("bad AdmissionReview on %s: %s", request.path, reason)
            return _plain(400, f"bad AdmissionReview: {reason}")

    def _verdict(self, endpoint: str, req: Request, rule: AdmissionRule | None) -> Verdict:
        if rule is None:
            return ALLOW
        if req.refusal:  # beyond Kubernetes' limits: no rule runs, nothing is cached
            bad_requests.warning(
                "refused %s %s on %s: %s", req.kind, shorten(req.name, 60), request.path, req.refusal[0][1]
            )
            return deny(f"{req.kind} {req.name or '(no name)'}", list(req.refusal))
        snap = self.state.snapshot()  # immutable: no lock, however long the rule runs
        fetched: tuple = ()
        if rule.prefetch is not None:
            fetched = (rule.prefetch(req, snap, getattr(self.ports, rule.port)),)
        key = (endpoint, req.kind, rule.key(req), rule.reads(req, snap, *fetched))
        cached = self.verdicts.get(key)
        if cached is not None:
            metrics.child(metrics.CACHE, "hit").inc()
            return cached
        metrics.child(metrics.CACHE, "miss").inc()
        verdict = rule.validate(req, snap, *fetched)
        self.verdicts.put(key, verdict, weight=verdict.weight + _KEY_WEIGHT)
        return verdict


def _readyz(state: State) -> Response:
    if state.synced:
        return _plain(200, "ok")
    errors = "; ".join(f"{k}: {v}" for k, v in state.errors().items())
    return _plain(503, "cluster state not synced" + (f" ({errors})" if errors else ""))


def _metrics_page() -> Response:
    body, content_type = metrics.exposition()
    return Response(body, 200, content_type=content_type)


def _http_error(exc: HTTPException) -> Response:
    return _plain(exc.code or 400, f"{exc.name}: {exc.description}")


def _internal_error(exc: Exception) -> Response:
    errors.error("internal error answering %s", request.path, exc_info=exc)
    return _plain(500, "internal error; the API server applies the failurePolicy")


def _read_body() -> bytes:
    """The request body, straight from the server's input stream. werkzeug's get_data() wraps the
    stream and copies a review chunk by chunk (a large share of a cached review's cost); the
    server's stream already ends at Content-Length (or at the last chunk), so only the limit is ours."""
    length = request.content_length
    if length is not None and length > MAX_BODY:
        raise RequestEntityTooLarge()
    stream = request.environ["wsgi.input"]
    want = length if length is not None else MAX_BODY + 1
    parts = []
    while want > 0:
        chunk = stream.read(want)
        if not chunk:
            break
        parts.append(chunk)
        want -= len(chunk)
    data = b"".join(parts)
    if len(data) > MAX_BODY:
        raise RequestEntityTooLarge()
    return data


def _plain(code: int, text: str) -> Response:
    return Response(text + "\n", code, mimetype="text/plain")

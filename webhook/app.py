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
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from flask import Flask, Response, request
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge

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
from migops.webhook.state import MigSyncRef, Snapshot

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

# (what the verdict depends on in the request, the rule, what it reads of the cluster state). The
# verdict is cached under the first and the last: the versions of exactly the indexes the rule reads,
# so a change elsewhere (another node's label, an agent's capacity) keeps it.
Rule = tuple[Callable[[Request], tuple], Callable[[Request, Snapshot], Verdict], Callable[[Request, Snapshot], tuple]]


def _both(*keys: Callable[[Request], tuple]) -> Callable[[Request], tuple]:
    return lambda req: tuple(k(req) for k in keys)


def _placement(req: Request, snap: Snapshot) -> tuple:
    """ConfigMap and ClusterPolicy rules: the settings, the config in force, the nodes' configs and GPUs."""
    return snap.mig.key, snap.placement.version


def _pods(req: Request, snap: Snapshot) -> tuple:
    """Pod rules: the strategy, which MIG resources are offered, which GPU models are present."""
    return snap.strategy, snap.placement.offers_version, snap.placement.models_version


RULES: dict[str, dict[tuple[str, str], Rule]] = {
    "validate": {
        ("", "ConfigMap"): (configmaps.cache_key, configmaps.validate, _placement),
        ("", "Node"): (nodelabels.cache_key, nodelabels.validate, nodelabels.reads),
        ("nvidia.com", "ClusterPolicy"): (policies.cache_key, policies.validate, _placement),
        ("", "Pod"): (pods.cache_key, pods.validate, _pods),
        **{(dra.GROUP, kind): (dra.cache_key, dra.validate, dra.reads) for kind in dra.KINDS},
    },
    "mutate": {
        ("", "ConfigMap"): (_both(configmaps.cache_key, annotate.cache_key), annotate.mutate, _placement),
        ("", "Pod"): (pods.cache_key, pods.mutate, _pods),
    },
}


class State(Protocol):
    """What the app needs of migops.webhook.state.ClusterState (tests may pass a fixed one)."""

    lock: Any  # held while a review reads the state (its indexes are updated in place)

    @property
    def synced(self) -> bool: ...

    def wait_synced(self, timeout: float) -> bool: ...

    def snapshot(self) -> Snapshot: ...

    def errors(self) -> dict[str, str]: ...


# (namespace, name) -> the MigSync, None when it does not exist; raises when it cannot tell.
ReadMigSync = Callable[[str, str], MigSyncRef | None]


def create_app(
    state: State,
    *,
    cache_bytes: int = CACHE_BYTES,
    read_configmap: policies.ReadConfigMap | None = None,
    read_migsync: ReadMigSync | None = None,
) -> Flask:
    """The app over `state`; `read_configmap` is how a ClusterPolicy switching to another MIG ConfigMap
    gets that ConfigMap (webhook/policies.py; without it such a switch is denied as uncheckable);
    `read_migsync` how a Node naming a MigSync the informer does not hold (yet) learns whether it
    exists (without it, such an edit is denied: never admitted on a cache miss). Both are read before
    the state's lock is taken, so a slow API server holds up no other review."""
    app = Flask("migops.webhook")
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY
    verdicts: LRU[tuple, Verdict] = LRU(cache_bytes)
    policy_key, _, policy_reads = RULES["validate"][("nvidia.com", "ClusterPolicy")]
    prefetched = threading.local()

    def read_prefetched(namespace: str, name: str) -> Any:
        found = getattr(prefetched, "value", None)
        if found is None or found[0] != (namespace, name):
            raise RuntimeError("the switch target was not read before the review")  # denied as unreadable
        if isinstance(found[1], Exception):
            raise found[1]
        return found[1]

    def live_migsync() -> nodelabels.Live | None:
        found = getattr(prefetched, "migsync", None)
        return found[1] if found is not None else None

    def node_reads(req: Request, snap: Snapshot) -> tuple:
        """nodelabels.reads, and what a live read of a MigSync found (a failed read's verdict is never cached)."""
        found = getattr(prefetched, "migsync", None)
        if found is None:
            return nodelabels.reads(req, snap)
        return (*nodelabels.reads(req, snap), req.uid if isinstance(found[1], Exception) else found)

    node_key = RULES["validate"][("", "Node")][0]
    # RULES' ClusterPolicy rule is policies.validate with no way to read a ConfigMap, and its Node rule
    # nodelabels.validate with no live read of a MigSync; here they get them.
    bound: dict[str, dict[tuple[str, str], Rule]] = {
        **RULES,
        "validate": {
            **RULES["validate"],
            ("nvidia.com", "ClusterPolicy"): (
                policy_key,
                lambda req, snap: policies.validate(req, snap, read_prefetched if read_configmap else None),
                policy_reads,
            ),
            ("", "Node"): (
                node_key,
                lambda req, snap: nodelabels.validate(req, snap, live_migsync()),
                node_reads,
            ),
        },
    }

    def prefetch(req: Request) -> None:
        """A ClusterPolicy naming another MIG ConfigMap than the one in force, or a Node naming a
        MigSync the informer does not hold: read it now, unlocked."""
        prefetched.value = None
        prefetched.migsync = None
        if (req.group, req.kind) == ("", "Node"):
            owner = nodelabels.uncached_owner(req, state.snapshot())
            if owner is None:
                return
            if read_migsync is None:
                prefetched.migsync = (owner, LookupError("this webhook cannot read MigSyncs"))
                return
            namespace, _, name = owner.partition("/")
            try:
                found = read_migsync(namespace, name) if namespace and name else None
                prefetched.migsync = (owner, nodelabels.ABSENT if found is None else found)
            except Exception as exc:  # noqa: BLE001 - the rule turns it into a denial that says why
                prefetched.migsync = (owner, exc)
            return
        if read_configmap is None or (req.group, req.kind) != ("nvidia.com", "ClusterPolicy"):
            return
        snap = state.snapshot()
        target = policies.after(req, snap).configmap
        if req.operation not in ("CREATE", "UPDATE", "DELETE") or target == snap.settings.configmap:
            return
        try:
            prefetched.value = (target, read_configmap(*target))
        except Exception as exc:  # noqa: BLE001 - the rule turns it into a denial that says why
            prefetched.value = (target, exc)

    app.extensions["migops.verdicts"] = verdicts

    def review(endpoint: str) -> Response:
        started = time.perf_counter()
        kind, result = "-", "error"
        rules = bound[endpoint]
        try:
            try:
                req = parse_review(decode(_read_body()))
            except HTTPException:  # 413: over MAX_BODY
                result = "bad_request"
                raise
            except (ValueError, RecursionError) as exc:  # JSONDecodeError, UnicodeDecodeError, BadReview
                result = "bad_request"
                reason = str(exc) if isinstance(exc, BadReview) else f"body is not JSON: {exc}"
                reason = shorten(reason, 300)
                bad_requests.warning("bad AdmissionReview on %s: %s", request.path, reason)
                return _plain(400, f"bad AdmissionReview: {reason}")
            rule = rules.get((req.group, req.kind))
            kind = req.kind if rule is not None else "other"
            if not state.synced and not state.wait_synced(SYNC_WAIT):
                result = "not_ready"
                return _plain(503, "cluster state not synced yet; the API server applies the failurePolicy")
            if rule is None:
                verdict = ALLOW
            elif req.refusal:  # beyond Kubernetes' limits: no rule runs, nothing is cached
                bad_requests.warning(
                    "refused %s %s on %s: %s", req.kind, shorten(req.name, 60), request.path, req.refusal[0][1]
                )
                verdict = deny(f"{req.kind} {req.name or '(no name)'}", list(req.refusal))
            else:
                prefetch(req)
                with state.lock:
                    snap = state.snapshot()
                    key = (endpoint, req.kind, rule[0](req), rule[2](req, snap))
                    cached = verdicts.get(key)
                    if cached is None:
                        metrics.child(metrics.CACHE, "miss").inc()
                        verdict = rule[1](req, snap)
                        verdicts.put(key, verdict, weight=verdict.weight + _KEY_WEIGHT)
                    else:
                        metrics.child(metrics.CACHE, "hit").inc()
                        verdict = cached
            result = "allowed" if verdict.allowed else "denied"
            for rule_name in verdict.rules:
                metrics.child(metrics.DENIALS, rule_name).inc()
            return Response(verdict.body(req.uid), 200, mimetype=JSON)
        finally:
            metrics.child(metrics.REQUESTS, endpoint, kind, result).inc()
            metrics.child(metrics.LATENCY, endpoint, kind).observe(time.perf_counter() - started)

    @app.post("/validate")
    def validate() -> Response:
        return review("validate")

    @app.post("/mutate")
    def mutate() -> Response:
        return review("mutate")

    @app.get("/healthz")
    def healthz() -> Response:
        return _plain(200, "ok")

    @app.get("/readyz")
    def readyz() -> Response:
        if state.synced:
            return _plain(200, "ok")
        errors = "; ".join(f"{k}: {v}" for k, v in state.errors().items())
        return _plain(503, "cluster state not synced" + (f" ({errors})" if errors else ""))

    @app.get("/metrics")
    def metrics_page() -> Response:
        body, content_type = metrics.exposition()
        return Response(body, 200, content_type=content_type)

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> Response:
        return _plain(exc.code or 400, f"{exc.name}: {exc.description}")

    @app.errorhandler(Exception)
    def internal_error(exc: Exception) -> Response:
        errors.error("internal error answering %s", request.path, exc_info=exc)
        return _plain(500, "internal error; the API server applies the failurePolicy")

    return app


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

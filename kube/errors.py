"""What a failed request to the API server means: try again, or not.

- 409 Conflict, 429 Too Many Requests, 502/503/504, connection errors and timeouts are transient: the
  server is away, busy or restarting, and the same request may succeed later.
- 500 "failed to create typed patch object" is kube-apiserver's answer to an apply body with wrong
  types (a known upstream bug, pinned in tests/cluster): a bad request in 5xx clothing, never retried;
  any other 500 is transient.
- any other 4xx (400, 403, 404, 422, an admission webhook's denial) is terminal: the request itself is
  refused, and sending it again changes nothing.
"""

from __future__ import annotations

import json
import logging
import random
import threading
from collections.abc import Callable
from typing import Literal, TypeVar

from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError as Urllib3Error

log = logging.getLogger(__name__)

Kind = Literal["transient", "terminal"]
T = TypeVar("T")
TRANSIENT_STATUS = frozenset({409, 429, 502, 503, 504})
TYPED_PATCH_BUG = "failed to create typed patch object"


def classify(exc: BaseException) -> tuple[Kind, int | None, str]:
    """(kind, HTTP status or None, the API server's own message)."""
    if isinstance(exc, ApiException):
        message = api_message(exc)
        if exc.status in TRANSIENT_STATUS:
            return "transient", exc.status, message
        if exc.status == 500:
            return ("terminal" if TYPED_PATCH_BUG in message else "transient"), 500, message
        return "terminal", exc.status, message
    if isinstance(exc, (Urllib3Error, OSError, TimeoutError)):
        return "transient", None, f"{type(exc).__name__}: {exc}"
    return "terminal", None, f"{type(exc).__name__}: {exc}"


def is_transient(exc: BaseException) -> bool:
    return classify(exc)[0] == "transient"


def api_message(exc: ApiException) -> str:
    try:
        return str(json.loads(exc.body).get("message") or exc.reason)
    except (TypeError, ValueError, AttributeError):
        return str(exc.reason or exc.body or exc.status)


def retry_after(exc: BaseException) -> float | None:
    """The server's Retry-After, in seconds, when it sent one."""
    headers = getattr(exc, "headers", None) or {}
    try:
        value = headers.get("Retry-After")
        return float(value) if value else None
    except (TypeError, ValueError):
        return None


def until_answered(
    call: Callable[[], T], what: str, stop: threading.Event, *, base: float = 0.2, cap: float = 5.0
) -> T:
    """Run `call` until the API server answers it: transient failures are retried with exponential
    backoff and jitter (honouring Retry-After, at most `cap` seconds apart) for as long as it takes;
    a terminal one is raised as it is. Once `stop` is set, the last failure is raised instead."""
    delay = base
    while True:
        try:
            return call()
        except Exception as exc:  # classified below
            kind, _, message = classify(exc)
            if kind == "terminal" or stop.is_set():
                raise
            wait = min(cap, retry_after(exc) or delay * (0.5 + random.random()))
            log.warning("%s: the API server did not answer (%s); retrying in %.1fs", what, message, wait)
            stop.wait(wait)
            delay = min(cap, delay * 2)

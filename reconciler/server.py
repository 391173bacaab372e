"""The reconciler's HTTP endpoints: /healthz, /readyz, /metrics and POST /hook.

`/hook` starts a sync at once (instead of at the next poll) when a git host says something was pushed.
Every request must be signed with the shared secret, in one of the styles git hosts use:
GitHub's `X-Hub-Signature-256: sha256=<HMAC-SHA256 of the body>` (also Gitea, and Flux's generic-hmac
`X-Signature: sha256=...`), or GitLab's `X-Gitlab-Token: <secret>`. Comparisons are constant-time.
Without a configured secret the hook is off (404): an unauthenticated trigger is never accepted.
A trigger only wakes the loop; the repo, ref and path come from the MigSync, never from the request.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import cast

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from migops.reconciler.metrics import Metrics

log = logging.getLogger(__name__)
MAX_HOOK_BODY = 1 << 20  # GitHub caps payloads at 25 MB; a push event is a few KB. We read at most 1 MiB.
Probe = Callable[[], tuple[bool, str]]


def _raw(value: str) -> bytes:
    """A header's value as bytes, whatever characters it holds: compared as bytes, a value that is not
    ASCII is a mismatch like any other (`hmac.compare_digest` refuses non-ASCII strings)."""
    return value.encode("utf-8", "surrogatepass")


def check_signature(secret: bytes, body: bytes, headers: dict[str, str]) -> str | None:
    """None when the request is signed with `secret`; else why not."""
    for header in ("x-hub-signature-256", "x-signature"):
        value = headers.get(header)
        if value is not None:
            algo, _, digest = value.partition("=")
            digest = digest.strip().lower()
            if algo != "sha256" or not digest:
                return f"{header} must be sha256=<hex>"
            expected = hmac.new(secret, body, hashlib.sha256).hexdigest().encode()
            return None if hmac.compare_digest(expected, _raw(digest)) else "signature does not match"
    token = headers.get("x-gitlab-token")
    if token is not None:
        return None if hmac.compare_digest(_raw(token), secret) else "token does not match"
    return "unsigned request (need X-Hub-Signature-256, X-Signature or X-Gitlab-Token)"


class _Handler(BaseHTTPRequestHandler):
    server_version = "migops-reconciler"
    protocol_version = "HTTP/1.1"
    timeout = 10  # seconds a client may take to send its request: a stalled one cannot pin a thread

    @property
    def owner(self) -> Server:
        return cast(Server, self.server.owner)  # type: ignore[attr-defined]

    def log_message(self, fmt: str, *args: object) -> None:  # requests are logged at debug level only
        log.debug("%s " + fmt, self.address_string(), *args)

    def _send(self, code: int, body: bytes, content_type: str = "text/plain; charset=utf-8") -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path in ("/healthz", "/livez"):
            ok, why = self.owner.healthy()
        elif path == "/readyz":
            ok, why = self.owner.ready()
        elif path == "/metrics":
            self._send(200, generate_latest(self.owner.metrics.registry), CONTENT_TYPE_LATEST)
            return
        else:
            self._send(404, b"not found\n")
            return
        self._send(200 if ok else 503, (why or ("ok" if ok else "not ready")).encode() + b"\n")

    def do_POST(self) -> None:
        owner = self.owner
        if self.path.split("?", 1)[0] != "/hook" or owner.hook_secret is None:
            self._send(404, b"not found\n")
            return
        body = self._body()
        if body is None:
            owner.metrics.hooks.labels("rejected").inc()
            return
        headers = {k.lower(): v for k, v in self.headers.items()}
        why = check_signature(owner.hook_secret, body, headers)
        if why is not None:
            owner.metrics.hooks.labels("unauthorized").inc()
            self._send(401, why.encode() + b"\n")
        elif headers.get("x-github-event") == "ping":
            owner.metrics.hooks.labels("ping").inc()
            self._send(200, b"pong\n")
        else:
            owner.metrics.hooks.labels("accepted").inc()
            owner.trigger()
            self._send(202, b"sync triggered\n")

    def _body(self) -> bytes | None:
        """The request body, or None (answered 400, 411 or 413, the connection closed: the rest of what the
        client sends is never read as a next request) when its length is not a plain decimal, missing
        while the client sends one anyway (chunked), too large, or not all sent in time."""
        if self.headers.get("Transfer-Encoding") is not None:
            self._refuse(411, b"a Content-Length is required\n")
            return None
        text = (self.headers.get("Content-Length") or "0").strip()
        # str.isdigit takes superscripts and other scripts' digits; int() takes "1_0" and "+1".
        length = int(text) if text.isascii() and text.isdigit() and len(text) <= 12 else -1
        if length < 0:
            self._refuse(400, b"bad Content-Length\n")
            return None
        if length > MAX_HOOK_BODY:
            self._refuse(413, b"body too large\n")
            return None
        try:
            body = self.rfile.read(length)
        except TimeoutError:
            body = b""
        if len(body) < length:
            self._refuse(400, b"body shorter than its Content-Length\n")
            return None
        return body

    def _refuse(self, code: int, why: bytes) -> None:
        self.close_connection = True
        self._send(code, why)


class Server:
    def __init__(
        self,
        address: tuple[str, int],
        *,
        metrics: Metrics,
        trigger: Callable[[], None],
        healthy: Probe,
        ready: Probe,
        hook_secret: bytes | None = None,
    ) -> None:
        self.metrics, self.trigger, self.healthy, self.ready, self.hook_secret = (
            metrics,
            trigger,
            healthy,
            ready,
            hook_secret,
        )
        self.httpd = ThreadingHTTPServer(address, _Handler)
        self.httpd.owner = self  # type: ignore[attr-defined]
        self.httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self.httpd.server_address[1]

    def start(self) -> Server:
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="http", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        if self._thread is not None:
            self._thread.join(5)

"""POST /hook signatures (GitHub, generic HMAC, GitLab), probes, /metrics; write errors classified."""

from __future__ import annotations

import hashlib
import hmac
import http.client
import json
import threading

import pytest
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import ProtocolError

from migops.kube.errors import classify
from migops.reconciler.apply import WriteError, Writer, with_retries
from migops.reconciler.metrics import Metrics
from migops.reconciler.server import Server

SECRET = b"s3cret"


@pytest.fixture
def server():
    fired = threading.Event()
    srv = Server(
        ("127.0.0.1", 0),
        metrics=Metrics(),
        trigger=fired.set,
        healthy=lambda: (True, "ok"),
        ready=lambda: (False, "caches not synced yet"),
        hook_secret=SECRET,
    ).start()
    srv.fired = fired  # type: ignore[attr-defined]
    yield srv
    srv.stop()


def _post(srv: Server, body: bytes, headers: dict[str, str]) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=10)
    conn.request("POST", "/hook", body, headers)
    resp = conn.getresponse()
    out = resp.status, resp.read().decode()
    conn.close()
    return out


def _get(srv: Server, path: str) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=10)
    conn.request("GET", path)
    resp = conn.getresponse()
    out = resp.status, resp.read().decode()
    conn.close()
    return out


def test_hook_accepts_only_signed_requests(server: Server) -> None:
    body = json.dumps({"ref": "refs/heads/main"}).encode()
    good = "sha256=" + hmac.new(SECRET, body, hashlib.sha256).hexdigest()
    assert _post(server, body, {})[0] == 401
    assert _post(server, body, {"X-Hub-Signature-256": "sha256=" + "0" * 64})[0] == 401
    assert _post(server, body, {"X-Hub-Signature-256": "sha1=abc"})[0] == 401
    assert _post(server, body, {"X-Gitlab-Token": "wrong"})[0] == 401
    assert not server.fired.is_set()  # type: ignore[attr-defined]
    assert _post(server, body, {"X-Hub-Signature-256": good, "X-GitHub-Event": "ping"}) == (200, "pong\n")
    assert not server.fired.is_set()  # type: ignore[attr-defined]
    for headers in ({"X-Hub-Signature-256": good}, {"X-Signature": good}, {"X-Gitlab-Token": SECRET.decode()}):
        server.fired.clear()  # type: ignore[attr-defined]
        assert _post(server, body, headers)[0] == 202
        assert server.fired.is_set()  # type: ignore[attr-defined]
    assert _post(server, b"x" * 10, {"Content-Length": str(2 << 20)})[0] == 413


def test_probes_and_metrics(server: Server) -> None:
    assert _get(server, "/healthz") == (200, "ok\n")
    assert _get(server, "/readyz") == (503, "caches not synced yet\n")
    code, text = _get(server, "/metrics")
    assert code == 200 and 'migops_hook_requests_total{result="unauthorized"}' not in text
    assert "# TYPE migops_reconcile_total counter" in text
    assert _get(server, "/nope")[0] == 404


def test_hook_off_without_a_secret() -> None:
    srv = Server(
        ("127.0.0.1", 0),
        metrics=Metrics(),
        trigger=lambda: None,
        healthy=lambda: (True, ""),
        ready=lambda: (True, ""),
        hook_secret=None,
    ).start()
    try:
        assert _post(srv, b"{}", {"X-Gitlab-Token": ""})[0] == 404
    finally:
        srv.stop()


def _api_error(status: int, message: str = "m") -> ApiException:
    exc = ApiException(status=status, reason="r")
    exc.body = json.dumps({"message": message})
    return exc


def test_classification() -> None:
    assert [classify(_api_error(s))[0] for s in (409, 429, 502, 503, 504, 500)] == ["transient"] * 6
    assert classify(_api_error(500, "failed to create typed patch object (...)"))[0] == "terminal"
    assert [classify(_api_error(s))[0] for s in (400, 403, 404, 422)] == ["terminal"] * 4
    assert classify(_api_error(400, 'admission webhook "mig.migops.io" denied the request: x'))[2].startswith(
        "admission webhook"
    )
    assert classify(ProtocolError("reset"))[0] == "transient"


def test_retries_transient_then_gives_up_and_never_retries_terminal() -> None:
    calls = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise _api_error(429)
        return "done"

    assert with_retries(flaky, "t", base=0.001) == "done" and len(calls) == 3
    calls.clear()

    def denied() -> None:
        calls.append(1)
        raise _api_error(422, "invalid")

    with pytest.raises(WriteError) as err:
        with_retries(denied, "Node/x", base=0.001)
    assert len(calls) == 1 and err.value.kind == "terminal" and str(err.value) == "Node/x: HTTP 422: invalid"


def test_the_apiservers_500_for_a_mistyped_apply_is_not_retried(rapi, gpu_nodes) -> None:
    (name,) = gpu_nodes(1)
    metrics = Metrics()
    writer = Writer(rapi, count=metrics.count_write)
    with pytest.raises(WriteError) as err:
        writer._apply(
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": ["not", "a", "map"]}},
            "nodes",
            f"Node/{name}",
            force=True,
        )
    assert err.value.status == 500 and err.value.kind == "terminal"
    assert "failed to create typed patch object" in err.value.message
    text = "\n".join(f"{s.name}{s.labels}={s.value}" for m in metrics.requests.collect() for s in m.samples)
    assert "'result': 'retry'" not in text and "'result': 'error', 'code': '500'" in text


def _raw(srv: Server, request: bytes) -> bytes:
    """What the server answers to these bytes (its status line and body; b"" when it drops the connection)."""
    import socket

    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as sock:
        sock.sendall(request)
        sock.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


@pytest.mark.parametrize("header", ["X-Hub-Signature-256", "X-Signature", "X-Gitlab-Token"])
@pytest.mark.parametrize(
    "value",
    [b"sha256=\xe9" + b"0" * 63, b"sha256=\xff\xfe", b"\xc3\xa9", b"sha256= ", b"sha256=" + b"0" * 4096, b"="],
    ids=["latin1", "invalid-utf8", "utf8", "blank-digest", "long", "bare-equals"],
)
def test_hook_answers_any_malformed_signature_header_with_401(server: Server, header: str, value: bytes) -> None:
    """A signature header of any bytes (not ASCII, not UTF-8) is answered 401, never a dropped connection."""
    body = b'{"ref": "refs/heads/main"}'
    request = (
        b"POST /hook HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
        + f"Content-Length: {len(body)}\r\n{header}: ".encode()
        + value
        + b"\r\n\r\n"
        + body
    )
    answer = _raw(server, request)
    assert answer.startswith(b"HTTP/1.1 401 "), answer
    assert not server.fired.is_set()  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "length",
    [b"\xe9", b"-1", b"1e3", b"", b"9" * 40, b"0x10", b"1_0", b"\xb2", b"100"],
    ids=["latin1", "negative", "float", "empty", "huge", "hex", "underscore", "superscript", "short-body"],
)
def test_hook_answers_a_malformed_content_length_with_4xx(server: Server, length: bytes) -> None:
    request = b"POST /hook HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: " + length + b"\r\n\r\n{}"
    answer = _raw(server, request)
    assert answer[9:10] == b"4", answer
    assert not server.fired.is_set()  # type: ignore[attr-defined]


def test_hook_refuses_a_chunked_body_and_reads_no_further(server: Server) -> None:
    """A body without a length (chunked) is refused with 411 and the connection closed: its bytes are
    never read as a next request."""
    request = (
        b"POST /hook HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nX-Gitlab-Token: s3cret\r\n\r\n"
        b"2\r\n{}\r\n0\r\n\r\n"
    )
    answer = _raw(server, request)
    assert answer.startswith(b"HTTP/1.1 411 ") and answer.count(b"HTTP/1.1") == 1, answer
    assert not server.fired.is_set()  # type: ignore[attr-defined]

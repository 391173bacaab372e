"""The webhook's gunicorn worker (migops.webhook.worker.ThreadWorker) against a real gunicorn over TLS:
connections that never send a request do not starve the threads, and closing a connection does not
hold up the worker's other connections."""

from __future__ import annotations

import socket
import ssl
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from migops.certs.rotation import DirectoryStore, rotate
from migops.local.ports import free_ports
from migops.local.process import spawn, stop

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[tuple[int, ssl.SSLContext]]:
    """One worker with ONE thread: any thread held by an idle connection shows at once."""
    tmp = tmp_path_factory.mktemp("worker")
    store = DirectoryStore(tmp / "certs")
    rotate(store, dns_names=["localhost"], ip_addresses=["127.0.0.1"], publish=lambda b: None)
    (port,) = free_ports(1)
    proc, ref = spawn(
        [sys.executable, str(HERE / "worker_server.py"), str(store.serving_file), str(port), "1"], tmp / "server.log"
    )
    ctx = ssl.create_default_context(cafile=str(tmp / "certs" / "ca-bundle.crt"))
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with _connect(port, ctx) as tls:
                    assert _get(tls) == b"pong"
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError((tmp / "server.log").read_text()[-2000:]) from None
                time.sleep(0.2)
        yield port, ctx
    finally:
        stop(ref, popen=proc)


def _connect(port: int, ctx: ssl.SSLContext) -> ssl.SSLSocket:
    raw = socket.create_connection(("127.0.0.1", port), timeout=20)
    return ctx.wrap_socket(raw, server_hostname="127.0.0.1")  # the handshake completes here


def _get(tls: ssl.SSLSocket) -> bytes:
    tls.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n")
    data = b""
    while b"\r\n\r\n" not in data or not data.endswith(b"pong"):
        chunk = tls.recv(4096)
        if not chunk:
            break
        data += chunk
    assert data.startswith(b"HTTP/1.1 200"), data[:200]
    return data.rsplit(b"\r\n\r\n", 1)[1]


def test_idle_pooled_connections_do_not_hold_the_threads(server) -> None:
    """Go's HTTP client parks freshly dialed connections unused; with stock gthread each one held a
    thread in a blocking read until the client closed it, and requests behind them hung."""
    port, ctx = server
    idle = [_connect(port, ctx) for _ in range(3)]  # handshaken, never used: three times the threads
    try:
        time.sleep(0.5)  # every idle connection has been taken by the worker by now
        with _connect(port, ctx) as busy:  # raises socket.timeout (20 s) if the request is not answered
            for _ in range(3):
                assert _get(busy) == b"pong"
        assert _get(idle[1]) == b"pong"  # a parked connection is served when it is finally used
    finally:
        for s in idle:
            s.close()


def test_closing_connections_do_not_stall_the_others(server) -> None:
    """A malformed request is answered 400 and the server closes that connection, waiting up to 2 s
    for the client's FIN; stock gthread waited on its main loop, so every kept-alive connection of
    the worker waited too, 2 s for each such connection (12 s for the six here). These clients never
    close: the kept-alive connection's next request must still be answered (socket timeout 8 s)."""
    port, ctx = server
    with _connect(port, ctx) as keep:
        assert _get(keep) == b"pong"  # kept alive, now waiting in the poller
        bad = [_connect(port, ctx) for _ in range(6)]
        try:
            for tls in bad:
                tls.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\nContent-Length: nope\r\n\r\n")
            for tls in bad:
                assert tls.recv(4096).startswith(b"HTTP/1.1 400")
            keep.settimeout(8)
            assert _get(keep) == b"pong"
        finally:
            for tls in bad:
                tls.close()


def _answer(tls: ssl.SSLSocket) -> bytes:
    """One whole response (headers and its Content-Length of body)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = tls.recv(4096)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(
        next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length"))
    )
    while len(body) < length:
        body += tls.recv(4096)
    return head + b"\r\n\r\n" + body


def test_slow_bodies_hold_no_thread_and_are_cut_at_the_deadline(server) -> None:
    """A POST header, then a byte now and then. Stock gthread gives each such connection a thread
    until the body is complete, so with this one-thread worker the ping below would wait behind them; here the body is read in the poller, and the request is cut with a 408 after READ_TIMEOUT."""
    from migops.webhook.worker import READ_TIMEOUT

    port, ctx = server
    slow = [_connect(port, ctx) for _ in range(4)]
    try:
        for tls in slow:
            tls.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\nx")
        started = time.monotonic()
        time.sleep(0.3)
        with _connect(port, ctx) as fast:
            fast.settimeout(3)
            for _ in range(5):
                assert _get(fast) == b"pong"
        assert time.monotonic() - started < 2.0
        for tls in slow:
            tls.settimeout(READ_TIMEOUT + 5)
            tls.sendall(b"y")  # a byte more: the deadline runs from the first byte, not the last
        cut = [tls.recv(4096) for tls in slow]
        elapsed = time.monotonic() - started
        assert all(answer.startswith(b"HTTP/1.1 408") for answer in cut), cut
        assert READ_TIMEOUT - 1 <= elapsed <= READ_TIMEOUT + 3, elapsed
    finally:
        for tls in slow:
            tls.close()


def test_bodies_in_pieces_chunked_pipelined_and_with_expect(server) -> None:
    port, ctx = server
    with _connect(port, ctx) as tls:
        tls.settimeout(5)
        tls.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n12345")
        time.sleep(0.2)
        tls.sendall(b"67890")
        assert _answer(tls).endswith(b"10 bytes")
        tls.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n")
        time.sleep(0.2)
        tls.sendall(b"2;ext=1\r\nde\r\n0\r\n\r\n")
        assert _answer(tls).endswith(b"5 bytes")
        # Two requests in one write: the second is answered too, without another byte from the client.
        tls.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n" * 2)
        assert _answer(tls).endswith(b"pong") and _answer(tls).endswith(b"pong")
        tls.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n")
        assert tls.recv(4096).startswith(b"HTTP/1.1 100 Continue")
        tls.sendall(b"abc")
        assert _answer(tls).split(b"\r\n\r\n")[-1].endswith(b"3 bytes")


def test_oversized_requests_are_refused_before_they_are_read(server) -> None:
    from migops.webhook.worker import MAX_HEADER

    port, ctx = server
    with _connect(port, ctx) as tls:
        tls.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999\r\n\r\n")
        assert tls.recv(4096).startswith(b"HTTP/1.1 413")
    with _connect(port, ctx) as tls:
        tls.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\nX: " + b"a" * (MAX_HEADER + 10))
        assert tls.recv(4096).startswith(b"HTTP/1.1 431")
    with _connect(port, ctx) as tls:  # gunicorn's own judgement of a bad length: 400 at once, no wait
        tls.settimeout(3)
        tls.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n")
        assert tls.recv(4096).startswith(b"HTTP/1.1 400")


def test_connections_per_peer_are_capped(server) -> None:
    """A client that opens connections without end is refused past MAX_PER_PEER (closed at accept),
    and the worker's other clients are served meanwhile; closing its connections frees the places."""
    from migops.webhook.worker import MAX_PER_PEER

    port, ctx = server
    opened = []
    try:
        while len(opened) < MAX_PER_PEER:
            opened.append(_connect(port, ctx))
        with pytest.raises((OSError, ssl.SSLError)):
            extra = _connect(port, ctx)
            extra.settimeout(3)
            _get(extra)  # refused: the handshake or the first read fails
        assert _get(opened[-1]) == b"pong"  # those within the cap are served
    finally:
        for tls in opened:
            tls.close()

    def one() -> bytes:
        with _connect(port, ctx) as tls:
            tls.settimeout(3)
            return _get(tls)

    deadline = time.monotonic() + 10
    while True:  # the worker notices the closes as it reads them
        try:
            assert one() == b"pong"
            break
        except (OSError, ssl.SSLError, AssertionError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)

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

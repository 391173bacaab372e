"""gunicorn's gthread worker with two fixes for a TLS server whose client is a connection pool.

`migops webhook` and the container run this class (gunicorn_options names it). The stock worker of
gunicorn 27.0.1 (pinned: this subclass relies on its `TConn`, `_DEFER`, `finish_request` and
`murder_pending`) has two ways to stall every request of a worker behind one connection:

1. **Idle new connections pin threads.** A thread takes a new connection as soon as its TLS
   ClientHello arrives, completes the handshake and then blocks reading the HTTP request. Go's HTTP
   client (the API server's admission client, vegeta) dials a new connection when all are busy and,
   when another connection frees up first, sends the request there and parks the new one in its idle
   pool: handshake done, no request. Once such connections outnumber the threads, every thread
   waits on a silent socket and the requests queued behind them wait until those clients give up
   (30 s in vegeta, the webhook timeout in the API server). Here the thread completes the handshake
   and, when no request follows at once, hands the connection back to the poller (gunicorn's own
   `_DEFER` path for connections that have not spoken yet), so a thread only ever waits on a socket
   that has a request for it. The handshake itself is bounded by HANDSHAKE_TIMEOUT.
2. **Closing lingers on the main loop.** A connection the server closes (a malformed request, an
   error) is closed gracefully (RFC 9112 9.6): half-close, then read until the client's FIN, for at
   most 2 s. Stock gunicorn does that with a blocking read on the main thread, so a client that keeps
   such a socket open stops the poller, and with it every kept-alive connection of the worker, for
   2 s per connection. Here the half-closed socket waits in the poller like any other: drained when
   readable, closed at the client's FIN or after LINGER.

tests/webhook/test_webhook_worker.py reproduces both against a real gunicorn.
"""

from __future__ import annotations

import selectors
import socket
import time
from collections import deque
from functools import partial
from typing import Any

from gunicorn import util
from gunicorn.workers import gthread

HANDSHAKE_TIMEOUT = 10.0  # a client that starts a TLS handshake must finish it within this
REQUEST_GRACE = 0.01  # after the handshake, how long a thread waits for the request before handing the
# connection to the poller (Go sends it right behind its Finished message: microseconds)
LINGER = 2.0  # as gunicorn's close_graceful: how long a half-closed connection waits for the client's FIN
MAX_DRAIN = 65536  # and how much it reads from it meanwhile

_CLOSED = object()  # handle() closed the connection itself: finish_request only counts it


class ThreadWorker(gthread.ThreadWorker):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lingering: deque[tuple[float, gthread.TConn]] = deque()  # in deadline order

    # ------------------------------------------------------------------ worker threads
    def handle(self, conn: gthread.TConn) -> Any:
        if self.cfg.is_ssl and not conn.initialized:
            outcome = self._handshake(conn)
            if outcome is not None:
                return outcome
        return super().handle(conn)

    def _handshake(self, conn: gthread.TConn) -> Any:
        """TLS handshake in this thread; None to go on and read the request here, else what handle returns."""
        if not conn.data_ready and not conn.wait_for_data(gthread.DEFAULT_WORKER_DATA_TIMEOUT):
            return gthread._DEFER  # not even a ClientHello yet: the poller waits for it
        try:
            conn.sock.settimeout(HANDSHAKE_TIMEOUT)  # wrap_socket copies it to the TLS socket
            conn.init()
        except (OSError, ValueError) as exc:  # ssl.SSLError, a timeout, a reset
            self.log.debug("TLS handshake with %s failed: %s", conn.client, exc)
            util.close(conn.sock)
            return _CLOSED
        if conn.is_http2 or conn.sock.pending() or _readable(conn.sock, REQUEST_GRACE):
            conn.data_ready = True
            return None
        conn.data_ready = False
        return gthread._DEFER  # an idle pooled connection: wait in the poller, not in a thread

    # ------------------------------------------------------------------ main loop
    def finish_request(self, conn: gthread.TConn, fs: Any) -> None:
        result = fs.result() if not fs.cancelled() and fs.exception() is None else None
        if result is _CLOSED:
            self.nr_conns -= 1
        elif result is False:
            self._linger(conn)
        else:
            super().finish_request(conn, fs)

    def _linger(self, conn: gthread.TConn) -> None:
        """gunicorn's close_graceful without blocking: half-close now, the rest from the poller."""
        try:
            conn.sock.shutdown(socket.SHUT_WR)
            conn.sock.setblocking(False)
            self.poller.register(conn.sock, selectors.EVENT_READ, partial(self._drain, conn, [0]))
        except (OSError, ValueError):
            self._closed(conn)
            return
        self.lingering.append((time.monotonic() + LINGER, conn))

    def _drain(self, conn: gthread.TConn, drained: list[int], _sock: Any) -> None:
        try:
            data = conn.sock.recv(4096)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        drained[0] += len(data)
        if not data or drained[0] >= MAX_DRAIN:
            self.lingering = deque(item for item in self.lingering if item[1] is not conn)
            self._closed(conn)

    def _closed(self, conn: gthread.TConn) -> None:
        try:
            self.poller.unregister(conn.sock)
        except (KeyError, ValueError, OSError):
            pass
        util.close(conn.sock)
        self.nr_conns -= 1

    def murder_pending(self) -> None:
        """Also close lingering connections whose client never sent its FIN (run once per loop)."""
        super().murder_pending()
        now = time.monotonic()
        while self.lingering and self.lingering[0][0] <= now:
            self._closed(self.lingering.popleft()[1])


def _readable(sock: Any, timeout: float) -> bool:
    with selectors.DefaultSelector() as sel:
        try:
            sel.register(sock, selectors.EVENT_READ)
            return bool(sel.select(timeout))
        except (OSError, ValueError):
            return True  # closed or broken: let the read find out and close it

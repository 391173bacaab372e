"""gunicorn's gthread worker, made safe for a TLS server that any client in the cluster can reach.

`migops webhook` and the container run this class (gunicorn_options names it). It relies on gunicorn
27.0.1's gthread internals (pinned: `TConn`, `handle_request`, `finish_request`, `murder_pending`,
`enqueue_req`, the parser's unreader).

**Threads run complete requests only.** Everything that waits on a client happens in the main loop,
non-blocking, in the poller: the TLS handshake, and reading each request's headers and body into a
buffer. Only once the whole request is there does a thread get it, and gunicorn's parser then reads it
from that buffer, not from the socket. Stock gthread hands a connection to a thread as soon as it is
readable, and the thread reads the request with blocking reads: as many TLS connections as there are
threads, each sending a POST header and then one byte every few seconds, hold every thread, and every
review from the API server times out behind them. Here such a client costs a file descriptor and the bytes it sent. Bounds:
- a request must arrive whole (headers and body) within READ_TIMEOUT of its first byte, else it is
  answered 408 and closed: the API server stops waiting for a review after the registration's
  timeoutSeconds (5 s), so a slower request has no one left to answer;
- a TLS handshake must complete within HANDSHAKE_TIMEOUT of the accept; an idle connection between
  requests is kept for gunicorn's keepalive (75 s), as the API server's pool expects;
- at most MAX_PER_PEER open connections per client address (more are closed at accept, before any TLS
  work), and at most BUFFER_BUDGET bytes of unfinished requests in the worker (a request that would
  go over is answered 503); headers over MAX_HEADER are answered 431, a body over MAX_BODY 413;
- a thread's own socket operations (writing the response) wait at most IO_TIMEOUT each.
The probes and the admission paths share the threads, and since no thread ever waits on a client, none
is starved by one.

**Closing lingers in the poller.** A connection the server closes (a malformed request, an error) is
closed gracefully (RFC 9112 9.6): half-close, then read until the client's FIN, for at most LINGER. Stock
gunicorn does that with a blocking read on the main thread, which stopped the poller for 2 s per such
connection; here the half-closed socket waits in the poller like any other.

tests/webhook/test_webhook_worker.py reproduces each case against a real gunicorn, and
tests/webhook/test_webhook_slow_clients.py slow clients against `migops webhook` itself.
"""

from __future__ import annotations

import errno
import heapq
import itertools
import logging
import re
import selectors
import socket
import ssl
import time
from collections import Counter, deque
from functools import partial
from typing import Any

from gunicorn import http, util
from gunicorn import sock as gsock
from gunicorn.workers import gthread

from migops.webhook.admission import MAX_BODY
from migops.webhook.ratelog import RateLimitedLog

HANDSHAKE_TIMEOUT = 10.0  # from accept to a completed TLS handshake
READ_TIMEOUT = 5.0  # from a request's first byte to its last: registration.TIMEOUT_SECONDS, the API server's wait
IO_TIMEOUT = 5.0  # each blocking socket operation of a thread (it only writes: the request is read already)
MAX_PER_PEER = 128  # open connections per client address; the API server keeps a few dozen at most
MAX_HEADER = 64 << 10  # the request line and headers (an API server's are under 1 KB)
BUFFER_BUDGET = 64 << 20  # bytes of unfinished requests held by the worker, all connections together
RECV = 256 << 10  # one read from a socket
READ_PER_EVENT = 1 << 20  # at most this much read from one connection per event (then the next connection)
LINGER = 2.0  # as gunicorn's close_graceful: how long a half-closed connection waits for the client's FIN
MAX_DRAIN = 65536  # and how much it reads from it meanwhile

_CLOSED = object()  # handle() closed the connection itself: finish_request only counts it
_HANDSHAKE, _IDLE, _READING = "handshake", "idle", "reading"

log = logging.getLogger(__name__)


# ------------------------------------------------------------------------------------------ framing
_CHUNK_LINE = re.compile(rb"([0-9A-Fa-f]{1,16})[ \t]*(?:;[^\r\n]*)?\r\n")
_MAX_CHUNK_LINE = 4096


class Framer:
    """Where the first HTTP/1.1 request in a growing buffer ends (RFC 9112 section 6): just enough
    framing to know that the whole request has arrived. gunicorn's parser reads and judges it after;
    anything this cannot frame (a malformed length, both Content-Length and Transfer-Encoding) is
    handed on at once, with its headers complete, for gunicorn to answer 400 without waiting."""

    __slots__ = ("body", "length", "chunk_at", "chunked_total", "expect")

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.body = -1  # offset of the body, once the headers are complete
        self.length = 0  # Content-Length; -1 for chunked
        self.chunk_at = 0  # chunked: offset of the next chunk-size line
        self.chunked_total = 0
        self.expect = False  # Expect: 100-continue

    def end(self, buf: bytes | bytearray) -> int | str | None:
        """The offset just past the request; None while more is needed; "pass" to hand it on as it
        is (gunicorn answers); or the status line to refuse it with ("413 ...", "431 ...")."""
        if self.body < 0 and not self._headers(buf):
            return "431 Request Header Fields Too Large" if len(buf) > MAX_HEADER else None
        if self.body < 0:
            return "pass"
        if self.length >= 0:
            if self.length > MAX_BODY:
                return "413 Content Too Large"
            end = self.body + self.length
            return end if len(buf) >= end else None
        return self._chunks(buf)

    def _headers(self, buf: bytes | bytearray) -> bool:
        """Parse the header block once it is complete; False while it is not. Leaves body < 0 when
        the framing is gunicorn's to refuse."""
        head_end = buf.find(b"\r\n\r\n", 0, MAX_HEADER + 4)
        if head_end < 0:
            return False
        length: int | None = None
        chunked = False
        for line in bytes(buf[:head_end]).split(b"\r\n")[1:]:
            name, sep, value = line.partition(b":")
            name, value = name.lower(), value.strip()
            if not sep:
                return True  # not a header line: gunicorn says so
            if name == b"content-length":
                if length is not None or not value.isdigit():  # bytes.isdigit: ASCII digits only
                    return True
                length = int(value)
            elif name == b"transfer-encoding":
                if value.lower() != b"chunked" or chunked:
                    return True
                chunked = True
            elif name == b"expect":
                self.expect = value.lower() == b"100-continue"
        if length is not None and chunked:
            return True
        self.body = head_end + 4
        self.length = -1 if chunked else (length or 0)
        self.chunk_at = self.body
        return True

    def _chunks(self, buf: bytes | bytearray) -> int | str | None:
        pos = self.chunk_at
        while True:
            match = _CHUNK_LINE.match(buf, pos)
            if match is None:
                incomplete = buf.find(b"\r\n", pos, pos + _MAX_CHUNK_LINE) < 0 and len(buf) - pos < _MAX_CHUNK_LINE
                return None if incomplete else "pass"
            size = int(match.group(1), 16)
            if size == 0:
                break
            if self.chunked_total + size > MAX_BODY:
                return "413 Content Too Large"
            nxt = match.end() + size + 2
            if len(buf) < nxt:
                return None  # the chunk is not all here: resume at its size line next time
            if buf[nxt - 2 : nxt] != b"\r\n":
                return "pass"
            self.chunked_total += size
            pos = self.chunk_at = nxt
        trailers = match.end()
        if buf[trailers : trailers + 2] == b"\r\n":
            return trailers + 2
        end = buf.find(b"\r\n\r\n", trailers, trailers + MAX_HEADER)
        if end >= 0:
            return end + 4
        return "431 Request Header Fields Too Large" if len(buf) - trailers > MAX_HEADER else None


# ------------------------------------------------------------------------------------------ the worker
class Conn(gthread.TConn):
    """A connection and where it stands in the main loop."""

    def __init__(self, cfg: Any, sock: Any, client: Any, server: Any, peer: str) -> None:
        super().__init__(cfg, sock, client, server)
        self.peer = peer
        self.phase = _HANDSHAKE
        self.buf = bytearray()
        self.framer = Framer()
        self.deadline = 0.0
        self.serial = 0  # bumped at each change of deadline: older heap entries are stale
        self.continued = False  # a 100 Continue was sent for the request being read
        self.events = selectors.EVENT_READ


class ThreadWorker(gthread.ThreadWorker):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lingering: deque[tuple[float, gthread.TConn]] = deque()  # in deadline order
        self.waiting: set[Conn] = set()  # connections in the poller, handshaking or reading
        self.deadlines: list[tuple[float, int, int, Conn]] = []  # heap: (deadline, serial, tiebreak, conn)
        self.peers: Counter[str] = Counter()
        self.buffered = 0  # bytes in waiting connections' buffers
        self._tiebreak = itertools.count()
        self._stopping: float | None = None
        self.refusals = RateLimitedLog(log, per_interval=5, interval=10.0)

    # ------------------------------------------------------------------ accepting
    def accept(self, listener: Any) -> None:
        try:
            client_sock, client_addr = listener.accept()
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.ECONNABORTED, errno.EWOULDBLOCK):
                raise
            return
        peer = str(client_addr[0]) if isinstance(client_addr, tuple) else str(client_addr)
        if self.peers[peer] >= MAX_PER_PEER:
            self.refusals.warning(
                "refused a connection from %s: %d open already (the cap per client)", peer, MAX_PER_PEER
            )
            util.close(client_sock)
            return
        self.peers[peer] += 1
        self.nr_conns += 1
        conn = Conn(self.cfg, client_sock, client_addr, listener.getsockname(), peer)
        if self.cfg.is_ssl:
            self._wait(conn, _HANDSHAKE, time.monotonic() + HANDSHAKE_TIMEOUT)
        else:
            conn.initialized = True
            conn.parser = http.get_parser(self.cfg, conn.sock, conn.client)
            self._wait(conn, _IDLE, time.monotonic() + self.cfg.keepalive)

    # ------------------------------------------------------------------ main loop: waiting on clients
    def _wait(self, conn: Conn, phase: str, deadline: float) -> None:
        """Put `conn` in the poller (or keep it there) in `phase`, to be cut at `deadline`."""
        conn.phase = phase
        if conn not in self.waiting:
            self.waiting.add(conn)
            conn.events = selectors.EVENT_READ
            self.poller.register(conn.sock, conn.events, partial(self._ready, conn))
        self._deadline(conn, deadline)

    def _deadline(self, conn: Conn, deadline: float) -> None:
        if self._stopping is not None and conn.phase == _IDLE:
            deadline = min(deadline, self._stopping)
        conn.deadline = deadline
        conn.serial += 1
        heapq.heappush(self.deadlines, (deadline, conn.serial, next(self._tiebreak), conn))
        if len(self.deadlines) > 4 * len(self.waiting) + 1024:
            # Superseded entries go when their time comes; under a high request rate with a 75 s
            # keepalive that is many, so they are dropped here too, in one pass now and then.
            self.deadlines = [e for e in self.deadlines if e[1] == e[3].serial and e[3] in self.waiting]
            heapq.heapify(self.deadlines)

    def _unwait(self, conn: Conn) -> None:
        if conn in self.waiting:
            self.waiting.discard(conn)
            self.buffered -= len(conn.buf)
            try:
                self.poller.unregister(conn.sock)
            except (KeyError, ValueError, OSError):
                pass
        conn.serial += 1  # its heap entries are stale now

    def _ready(self, conn: Conn, _sock: Any) -> None:
        """The poller says `conn` can make progress: handshake, read, and hand on a complete request."""
        try:
            if conn.phase == _HANDSHAKE and not self._handshake(conn):
                return
            if conn.is_http2:  # only when gunicorn's http_protocols offer h2: a thread per connection
                self._unwait(conn)
                self.enqueue_req(conn)
                return
            data, eof = self._recv(conn)
        except (OSError, ValueError) as exc:  # ssl.SSLError, a reset
            self.log.debug("connection from %s failed: %s", conn.client, exc)
            self._drop(conn)
            return
        if data:
            if conn.phase == _IDLE:
                conn.phase = _READING
                self._deadline(conn, time.monotonic() + READ_TIMEOUT)
            conn.buf += data
            self.buffered += len(data)
            if self.buffered > BUFFER_BUDGET:
                self.refusals.warning(
                    "refused a request from %s: %d bytes of unfinished requests in this worker (the budget)",
                    conn.peer,
                    self.buffered,
                )
                self._refuse(conn, "503 Service Unavailable")
                return
            self._frame(conn)
        if eof and conn in self.waiting:
            self._drop(conn)  # closed before a whole request arrived

    def _handshake(self, conn: Conn) -> bool:
        """One step of the TLS handshake, non-blocking; True once it is complete."""
        if not conn.initialized:
            self.poller.unregister(conn.sock)  # wrapping detaches the plain socket
            conn.sock = gsock.ssl_context(self.cfg).wrap_socket(
                conn.sock,
                server_side=True,
                suppress_ragged_eofs=self.cfg.suppress_ragged_eofs,
                do_handshake_on_connect=False,
            )
            conn.initialized = True
            conn.events = selectors.EVENT_READ
            self.poller.register(conn.sock, conn.events, partial(self._ready, conn))
        try:
            conn.sock.do_handshake()
        except ssl.SSLWantReadError:
            self._events(conn, selectors.EVENT_READ)
            return False
        except ssl.SSLWantWriteError:
            self._events(conn, selectors.EVENT_WRITE)
            return False
        self._events(conn, selectors.EVENT_READ)
        if gsock.is_http2_negotiated(conn.sock):
            conn.is_http2 = True
            conn.parser = http.get_parser(self.cfg, conn.sock, conn.client, http2_connection=True)
            conn.parser.initiate_connection()
        else:
            conn.parser = http.get_parser(self.cfg, conn.sock, conn.client)
        conn.phase = _IDLE
        self._deadline(conn, time.monotonic() + self.cfg.keepalive)
        return True

    def _events(self, conn: Conn, events: int) -> None:
        if conn.events != events:
            conn.events = events
            self.poller.modify(conn.sock, events, partial(self._ready, conn))

    def _recv(self, conn: Conn) -> tuple[bytes, bool]:
        """What the socket has now (at most READ_PER_EVENT, and whatever TLS holds decrypted), and
        whether the client closed."""
        parts: list[bytes] = []
        total = 0
        while total < READ_PER_EVENT or (isinstance(conn.sock, ssl.SSLSocket) and conn.sock.pending()):
            try:
                chunk = conn.sock.recv(RECV)
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError, InterruptedError):
                break
            if not chunk:
                return b"".join(parts), True
            parts.append(chunk)
            total += len(chunk)
        return b"".join(parts), False

    def _frame(self, conn: Conn) -> None:
        """Hand the request on once it is complete; refuse it here when it cannot be."""
        end = conn.framer.end(conn.buf)
        if end is None:
            if conn.framer.expect and conn.framer.body >= 0 and not conn.continued:
                conn.continued = True  # the client waits for this before it sends the body
                self._send(conn, b"HTTP/1.1 100 Continue\r\n\r\n")
            return
        if isinstance(end, str) and end != "pass":
            self._refuse(conn, end)
            return
        self._unwait(conn)
        conn.parser.unreader.unread(bytes(conn.buf))
        conn.buf = bytearray()
        conn.framer.reset()
        conn.continued = False
        self.enqueue_req(conn)

    def _send(self, conn: Conn, data: bytes) -> None:
        try:
            conn.sock.send(data)  # a few bytes into an empty send buffer: never partial in practice
        except (OSError, ValueError):
            pass

    def _refuse(self, conn: Conn, status: str) -> None:
        """Answer `status` and close: the client's request is not read any further."""
        text = f"{status.split(' ', 1)[1]}\n".encode()
        self._send(
            conn,
            f"HTTP/1.1 {status}\r\nConnection: close\r\nContent-Type: text/plain\r\n"
            f"Content-Length: {len(text)}\r\n\r\n".encode()
            + text,
        )
        self._unwait(conn)
        conn.buf = bytearray()
        self._linger(conn)

    def _drop(self, conn: Conn) -> None:
        self._unwait(conn)
        conn.buf = bytearray()
        util.close(conn.sock)
        self._forget(conn)

    def _forget(self, conn: gthread.TConn) -> None:
        """One connection fewer (every close ends here)."""
        self.nr_conns -= 1
        peer = getattr(conn, "peer", None)
        if peer is not None:
            self.peers[peer] -= 1
            if self.peers[peer] <= 0:
                del self.peers[peer]

    # ------------------------------------------------------------------ worker threads
    def handle(self, conn: gthread.TConn) -> Any:
        """A complete request, already buffered in the parser's unreader (or an HTTP/2 connection)."""
        if conn.is_http2:
            return super().handle(conn)
        req = None
        try:
            conn.sock.settimeout(IO_TIMEOUT)
            req = next(conn.parser)
            if not req:
                return False
            req._expected_100_continue = False  # the body is here: the main loop sent 100 Continue if it was due
            return self._keepalive_after(conn, self.handle_request(req, conn))
        except (http.errors.NoMoreData, StopIteration) as exc:
            self.log.debug("Closing connection. %s", exc)
        except TimeoutError:
            self.log.debug("%s stopped reading the response", conn.client)
        except ssl.SSLError as exc:
            if exc.args[0] != ssl.SSL_ERROR_EOF:
                self.log.debug("TLS error on %s: %s", conn.client, exc)
        except OSError as exc:
            if exc.errno not in (errno.EPIPE, errno.ECONNRESET, errno.ENOTCONN):
                self.log.exception("Socket error processing request.")
        except Exception as exc:  # noqa: BLE001 - gunicorn's own answer to a bad request (400) or an error
            self.handle_error(req, conn.sock, conn.client, exc)
        return False

    # ------------------------------------------------------------------ main loop: after a request
    def finish_request(self, conn: gthread.TConn, fs: Any) -> None:
        result = fs.result() if not fs.cancelled() and fs.exception() is None else False
        if result is _CLOSED:
            self._forget(conn)
        elif result is True and isinstance(conn, Conn):
            self._keep(conn)
        else:
            self._linger(conn)

    def _keep(self, conn: Conn) -> None:
        """Back to the poller for the next request (and at once if it came with the last one)."""
        try:
            conn.sock.setblocking(False)
        except (OSError, ValueError):
            self._forget(conn)
            return
        ahead = conn.parser.unreader.take_buffered()
        self._wait(conn, _IDLE, time.monotonic() + self.cfg.keepalive)
        if ahead:
            conn.buf += ahead
            self.buffered += len(ahead)
            conn.phase = _READING
            self._deadline(conn, time.monotonic() + READ_TIMEOUT)
            self._frame(conn)

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
        except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
            return
        except (OSError, ValueError):
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
        self._forget(conn)

    def murder_pending(self) -> None:
        """Cut connections past their deadline, and lingering ones whose client never sent its FIN
        (run once per loop, at least every second)."""
        super().murder_pending()
        now = time.monotonic()
        if not self.alive and self._stopping is None:
            # Stopping: idle connections go within gunicorn's stop linger (a request arriving
            # meanwhile is still answered, with Connection: close).
            self._stopping = now + gthread.STOP_KEEPALIVE_LINGER
            for conn in list(self.waiting):
                if conn.phase == _IDLE:
                    self._deadline(conn, conn.deadline)
        while self.deadlines and self.deadlines[0][0] <= now:
            _, serial, _, conn = heapq.heappop(self.deadlines)
            if serial != conn.serial or conn not in self.waiting:
                continue
            if conn.phase == _READING:
                self.refusals.warning(
                    "cut a request from %s: not complete %.0f s after its first byte", conn.peer, READ_TIMEOUT
                )
                self._refuse(conn, "408 Request Timeout")
            else:
                self._drop(conn)
        while self.lingering and self.lingering[0][0] <= now:
            self._closed(self.lingering.popleft()[1])

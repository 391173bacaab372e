"""Slow-body clients: TLS connections that send a POST header and then one byte of
the body every `interval` seconds, as a client holding a worker's thread would. Used by tests/webhook/
test_webhook_slow_clients.py and bench/webhook_adversarial.py."""

from __future__ import annotations

import socket
import ssl
import threading
import time
from types import TracebackType

HEADER = (
    b"POST /validate HTTP/1.1\r\nHost: webhook\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"
)


class SlowClients:
    """`count` slow-body connections to host:port, each in its own thread. `cuts` records, for each
    connection the server ended, (seconds from its first byte, the first bytes of its answer). With
    `reconnect`, a cut connection is opened again at once, so `count` stay open all along."""

    def __init__(
        self,
        host: str,
        port: int,
        ctx: ssl.SSLContext,
        *,
        count: int = 40,
        interval: float = 5.0,
        reconnect: bool = False,
    ) -> None:
        self.host, self.port, self.ctx = host, port, ctx
        self.count, self.interval, self.reconnect = count, interval, reconnect
        self.cuts: list[tuple[float, bytes]] = []
        self.failures: list[str] = []  # connections that could not be opened
        self.sending = 0  # connections that have sent their header now
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(count)]

    def __enter__(self) -> SlowClients:
        for thread in self._threads:
            thread.start()
        deadline = time.monotonic() + 30
        while self.sending + len(self.failures) < self.count and time.monotonic() < deadline:
            time.sleep(0.05)
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=self.interval + 5)

    def wait_cut(self, timeout: float) -> None:
        """Until every connection has been cut once (or `timeout`)."""
        deadline = time.monotonic() + timeout
        while len(self.cuts) < self.count and time.monotonic() < deadline:
            time.sleep(0.1)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                raw = socket.create_connection((self.host, self.port), timeout=10)
                tls = self.ctx.wrap_socket(raw, server_hostname=self.host)
                tls.sendall(HEADER)
            except OSError as exc:
                with self._lock:
                    self.failures.append(str(exc))
                self._stop.wait(0.5)
                continue
            started = time.monotonic()
            with self._lock:
                self.sending += 1
            try:
                self._trickle(tls, started)
            finally:
                with self._lock:
                    self.sending -= 1
                tls.close()
            if not self.reconnect:
                return

    def _trickle(self, tls: ssl.SSLSocket, started: float) -> None:
        tls.settimeout(self.interval)
        while not self._stop.is_set():
            try:
                answer = tls.recv(4096)
            except TimeoutError:
                try:
                    tls.sendall(b" ")  # one more byte of the body
                except OSError as exc:
                    answer = f"send failed: {exc}".encode()
                else:
                    continue
            except OSError as exc:
                answer = f"recv failed: {exc}".encode()
            with self._lock:
                self.cuts.append((time.monotonic() - started, answer[:40]))
            return

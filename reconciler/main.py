"""Run a reconciler as a service: leader election, the HTTP endpoints, the loop, a graceful SIGTERM.

Replicas that are not the leader serve /healthz and /readyz (they are healthy standbys) and do nothing
else; the leader starts its informers and the loop. Losing the Lease stops every write at once and
ends the process with exit status 1 (the kubelet restarts it as a standby), as controller-runtime does.
SIGTERM (or SIGINT) finishes the write in flight, skips the rest, stops the loop, then releases the
Lease so a standby takes over within one retry period.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
from dataclasses import dataclass

from migops.kube.lease import LeaderElector
from migops.reconciler.controller import Reconciler
from migops.reconciler.server import Server

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServeOptions:
    http_host: str = "0.0.0.0"
    http_port: int = 8080
    hook_secret: bytes | None = None
    leader_elect: bool = True
    lease_namespace: str | None = None  # default: the MigSync's namespace
    identity: str = ""
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0


def lease_name(migsync: str) -> str:
    return f"migops-reconciler-{migsync}"[:253]


def serve(
    reconciler: Reconciler,
    options: ServeOptions,
    stop: threading.Event | None = None,
    started: threading.Event | None = None,
) -> int:
    """Block until `stop` (or SIGTERM/SIGINT when run on the main thread); the exit status."""
    stop = stop or threading.Event()
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda signum, frame: stop.set())
    service = _Service(reconciler, options, stop)
    server = Server(
        (options.http_host, options.http_port),
        metrics=reconciler.metrics,
        trigger=service.trigger,
        healthy=service.healthy,
        ready=service.ready,
        hook_secret=options.hook_secret,
    ).start()
    log.info(
        "serving /healthz /readyz /metrics%s on %s:%d",
        " /hook" if options.hook_secret else "",
        options.http_host,
        server.port,
    )
    elector_stop = threading.Event()  # released only after the loop has stopped writing
    elector_thread = service.elect(elector_stop)
    if started is not None:
        started.set()
    try:
        return service.lead()
    finally:
        reconciler.stop()
        if service.loop is not None:
            service.loop.join(30)
        elector_stop.set()
        if elector_thread is not None:
            elector_thread.join(10)
        server.stop()


class _Service:
    """The states a replica goes through: standby, leading (informers and loop), lost the Lease."""

    def __init__(self, reconciler: Reconciler, options: ServeOptions, stop: threading.Event) -> None:
        self.reconciler, self.options, self.stop = reconciler, options, stop
        self.hook = threading.Event()
        self.leading = threading.Event()
        self.lost = threading.Event()
        self.loop: threading.Thread | None = None

    def trigger(self) -> None:
        self.hook.set()
        self.reconciler.wake.set()

    def healthy(self) -> tuple[bool, str]:
        if self.lost.is_set():
            return False, "lost the lease"
        if self.loop is not None and not self.loop.is_alive() and not self.stop.is_set():
            return False, "the reconcile loop has stopped"
        return True, "ok"

    def ready(self) -> tuple[bool, str]:
        if not self.leading.is_set():
            return True, "standby (not the leader)"
        return (True, "ok") if self.reconciler.synced else (False, "caches not synced yet")

    def elect(self, elector_stop: threading.Event) -> threading.Thread | None:
        """Start leader election (or lead at once without it); the elector's thread."""
        options, reconciler = self.options, self.reconciler
        if not options.leader_elect:
            self.leading.set()
            return None
        identity = options.identity or f"{socket.gethostname()}_{os.getpid()}"
        elector = LeaderElector(
            reconciler.api,
            options.lease_namespace or reconciler.namespace,
            lease_name(reconciler.name),
            identity,
            lease_duration=options.lease_duration,
            renew_deadline=options.renew_deadline,
            retry_period=options.retry_period,
        )

        def run() -> None:
            if not elector.run(elector_stop, on_started=self.leading.set):
                self.lost.set()
                reconciler.stop()  # stop writing now: another replica may already lead
                self.stop.set()
            reconciler.metrics.leader.set(0)

        thread = threading.Thread(target=run, name="leader-election", daemon=True)
        thread.start()
        return thread

    def lead(self) -> int:
        """Wait for the Lease, then run the loop until stopped; the exit status."""
        while not self.stop.is_set() and not self.leading.wait(0.2):
            pass
        if self.leading.is_set() and not self.stop.is_set():
            self.reconciler.metrics.leader.set(1)
            try:
                self.reconciler.start()
            except Exception as exc:  # noqa: BLE001 - e.g. no permission to list Nodes: say so, exit non-zero
                log.error("cannot start: %s", exc)
                self.lost.set()
                return 1
            self.loop = threading.Thread(
                target=self.reconciler.run, kwargs={"stop": self.stop, "hook": self.hook}, name="reconcile", daemon=True
            )
            self.loop.start()
            self.stop.wait()
        return 1 if self.lost.is_set() else 0

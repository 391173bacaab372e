"""DRA objects' selectors, judged in a child process of their own under hard bounds.

A ResourceClaim's selectors are code from whoever may create claims: one may run for seconds (nested
comprehensions) or build a gigabyte string (chained replace), within the API server's own CEL cost
limit or posted to the webhook directly. So they never run in the process that asks: a webhook worker,
where Node, ConfigMap and ClusterPolicy reviews are answered, or the reconciler and `migops suggest`,
which read pending claims as demand. Each such process has one evaluator process (started when first
needed, and again after it is stopped), which judges one object at a time, at a lower CPU priority,
with an address-space limit. The caller waits for its answer at most WALL_SECONDS; past that, or when
the child runs out of memory, the child is killed and the answer names the bound (the webhook warns
`dra-selector-error`; suggest counts no demand from that claim and logs it). At most QUEUE callers wait
for it at once; more are answered at once, so DRA reviews never hold more than QUEUE of a worker's
threads.

The child is `python -m migops.sandbox.evaluator`: it reads pickled requests from its stdin and writes
pickled answers to its stdout (it is the caller's own child: nothing else writes to those pipes), and
ends when its stdin closes (the caller is gone).
"""

from __future__ import annotations

import logging
import os
import pickle
import resource
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from migops.api import objects
from migops.mig import dra
from migops.mig.catalogue import catalogue

log = logging.getLogger(__name__)

WALL_SECONDS = 2.0  # one object's judgement, from the request to the answer
MEMORY_BYTES = 192 << 20  # address space the child may add to its own once ready
QUEUE = 2  # DRA reviews waiting on the child at once, the one judged included
START_SECONDS = 10.0  # the child's start (an interpreter, the CEL runtime, the catalogue's devices)
NICE = 10


@dataclass(frozen=True)
class Bound:
    """A judgement that hit a bound, named for the warning: `which` is time, memory or busy (others waiting,
    or the evaluator not started in time: an answer never cached)."""

    which: str
    text: str


def judge_in_process(
    kind: str, name: str, obj: Mapping[str, Any], classes: Mapping[str, Any] | None = None
) -> tuple[dra.Selection, ...]:
    """What a DRA object's selectors select (the child's work; tests call it directly)."""
    if kind == "DeviceClass":
        expressions = dra.class_expressions(obj)
        if not expressions:
            return ()
        over = False
        try:
            by_model, errors, gaps = dra.evaluate(expressions, catalogue().gpus)
        except dra.CelError as exc:
            by_model, errors, gaps, over = (), (str(exc),), False, isinstance(exc, dra.OverBudget)
        return (dra.Selection("spec.selectors", "", name, expressions, "All", 1, by_model, errors, False, gaps, over),)
    return read_in_process({**obj, "kind": kind}, classes).selections


def read_in_process(claim: Mapping[str, Any], classes: Mapping[str, Any] | None = None) -> dra.ClaimRequests:
    """A claim (or template) read and its requests judged, with the DeviceClasses by name."""
    return dra.claim_requests(claim, classes)


class Evaluator:
    """The worker's side: one child, started when first needed, killed when it passes a bound."""

    def __init__(
        self, wall: float = WALL_SECONDS, memory: int = MEMORY_BYTES, queue: int = QUEUE, nice: int = NICE
    ) -> None:
        self.wall, self.memory, self.nice, self.queue = wall, memory, nice, queue
        self._slots = threading.BoundedSemaphore(queue)
        self._lock = threading.Lock()  # one judgement at a time
        self._child: subprocess.Popen[bytes] | None = None
        self._send: Connection | None = None
        self._recv: Connection | None = None
        self._starting = False  # the child has not said it is ready yet
        self.started = 0  # children started (tests: a bound hit restarts it)

    @property
    def pid(self) -> int | None:
        return self._child.pid if self._child is not None else None

    def judge(self, kind: str, name: str, obj: Mapping[str, Any]) -> tuple[dra.Selection, ...] | Bound:
        """What a DRA object's selectors select (the webhook's question), or the bound it hit."""
        return self._ask(("judge", kind, name, dict(obj)))

    def read(self, claim: Mapping[str, Any], classes: Mapping[str, Any] | None = None) -> dra.ClaimRequests | Bound:
        """A pending claim's requests judged (suggest's question: demand), with the DeviceClasses it names."""
        names = dra.class_names(claim)
        wanted = {n: classes[n] for n in names if n in classes} if classes else None
        return self._ask(("read", dict(claim), wanted))

    def _ask(self, question: tuple[Any, ...]) -> Any:
        if not self._slots.acquire(blocking=False):
            return Bound("busy", f"not judged: {self._busy()}")
        try:
            if not self._lock.acquire(timeout=self.wall):
                return Bound("busy", f"not judged: {self._busy()}")
            try:
                return self._judge(question)
            finally:
                self._lock.release()
        finally:
            self._slots.release()

    def _busy(self) -> str:
        return f"the selector evaluator is busy with other DRA objects (at most {self.queue} wait for it)"

    def _judge(self, question: tuple[Any, ...]) -> Any:
        try:
            send, recv = self._ready()
        except (OSError, EOFError) as exc:  # not started in time (a loaded machine): busy, never cached
            log.warning("the DRA selector evaluator did not start: %s", exc)
            return Bound("busy", f"not judged: the selector evaluator did not start within {START_SECONDS:g} s")
        try:
            send.send_bytes(pickle.dumps(question, protocol=pickle.HIGHEST_PROTOCOL))
            if not recv.poll(self.wall):
                self.stop()
                return Bound("time", f"selectors not judged within {self.wall:g} s, the bound per object")
            answer = pickle.loads(recv.recv_bytes())  # from our own child
        except (OSError, EOFError, pickle.PickleError) as exc:
            log.warning("the DRA selector evaluator ended: %s", exc)
            self.stop()
            return Bound("memory", self._memory_text())
        if answer == "memory":
            self.stop()
            return Bound("memory", self._memory_text())
        return answer

    def _memory_text(self) -> str:
        return f"selectors not judged within {self.memory >> 20} MiB, the memory bound per object"

    def _ready(self) -> tuple[Connection, Connection]:
        child, send, recv = self._child, self._send, self._recv
        if child is None or child.poll() is not None or send is None or recv is None:
            child, send, recv = self._spawn()
        if self._starting:
            # A start slower than its bound (a loaded machine) goes on: the next judgement waits for it again
            # instead of starting another from nothing.
            if not recv.poll(START_SECONDS):
                raise OSError(f"the DRA selector evaluator did not start within {START_SECONDS:g} s")
            if recv.recv_bytes() != b"ready":
                self.stop()
                raise OSError("the DRA selector evaluator did not start")
            self._starting = False
        return send, recv

    def _spawn(self) -> tuple[subprocess.Popen[bytes], Connection, Connection]:
        self.stop()
        child = subprocess.Popen(
            [sys.executable, "-m", "migops.sandbox.evaluator", str(self.memory), str(self.nice)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            close_fds=True,
        )
        assert child.stdin is not None and child.stdout is not None
        send = Connection(os.dup(child.stdin.fileno()), readable=False)
        recv = Connection(os.dup(child.stdout.fileno()), writable=False)
        child.stdin.close()
        child.stdout.close()
        self._child, self._send, self._recv = child, send, recv
        self._starting = True
        self.started += 1
        return child, send, recv

    def stop(self) -> None:
        """Kill the child (a later judgement starts another)."""
        child, self._child = self._child, None
        for conn in (self._send, self._recv):
            if conn is not None:
                conn.close()
        self._send = self._recv = None
        self._starting = False
        if child is not None:
            if child.poll() is None:
                child.send_signal(signal.SIGKILL)
            child.wait()


_SHARED: list[Evaluator] = []
_SHARED_LOCK = threading.Lock()


def shared() -> Evaluator:
    """This process's evaluator (the reconciler's, `migops suggest`'s): made on first use."""
    with _SHARED_LOCK:
        if not _SHARED:
            _SHARED.append(Evaluator())
        return _SHARED[0]


def bounded_reader(evaluator: Evaluator | None = None) -> dra.Reader:
    """mig.dra's Reader that judges each claim in `evaluator`'s child (default: this process's): a claim
    over a bound is no demand, and the log says which and why."""
    found = evaluator or shared()

    def read(claim: Mapping[str, Any], classes: Mapping[str, Any] | None) -> dra.ClaimRequests | None:
        answer = found.read(claim, classes)
        if isinstance(answer, Bound):
            meta = objects.meta(claim)
            where = f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"
            log.warning("%s %s counts as no MIG demand: %s", claim.get("kind") or "ResourceClaim", where, answer.text)
            return None
        return answer

    return read


# ------------------------------------------------------------------------------------------ the child
def serve(memory: int, nice: int) -> None:
    """The child's loop: warm the catalogue's devices, bound itself, then answer until stdin closes."""
    send = Connection(os.dup(sys.stdout.fileno()), readable=False)
    recv = Connection(os.dup(sys.stdin.fileno()), writable=False)
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # stray prints never reach the pipe
    dra.warm()  # trusted work, at the caller's priority: a start on a busy machine stays within START_SECONDS
    os.nice(nice)
    size = _address_space()
    resource.setrlimit(resource.RLIMIT_AS, (size + memory, size + memory))
    send.send_bytes(b"ready")
    while True:
        try:
            question = pickle.loads(recv.recv_bytes())  # from our own caller
        except EOFError:
            return
        try:
            answer: Any = judge_in_process(*question[1:]) if question[0] == "judge" else read_in_process(*question[1:])
        except MemoryError:
            answer = "memory"
        send.send_bytes(pickle.dumps(answer, protocol=pickle.HIGHEST_PROTOCOL))


def _address_space() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


if __name__ == "__main__":
    serve(int(sys.argv[1]), int(sys.argv[2]))

"""Writes to the API server, with errors classified (`migops.kube.errors`) instead of retried blindly:
transient ones are retried here with exponential backoff and jitter (honouring Retry-After), a few
times; terminal ones are reported, not retried until something changes (a new commit, a node change,
or the next interval).

Node labels are written by a small thread pool: each write is one server-side apply of the one label
and our two annotations (managed-by, revision; nothing else) under the field manager
`migops-reconciler`, forced, because that label is ours by contract: the GPU Operator seeds it (manager
`gpu-operator`) and a hand edit (`kubectl-label`) takes it over; force moves ownership of those fields
to us and leaves every other field where it was. A node leaving management loses the annotations by
a merge patch that touches nothing else.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from kubernetes import client as k8s

from migops import logs
from migops.api.migsync import API_VERSION, KIND
from migops.api.names import (
    CONFIGMAP_KEY,
    MANAGED_BY_ANNOTATION,
    MIG_CONFIG_LABEL,
    MIGSYNC_FINALIZER,
    RECONCILER_MANAGER,
    REVISION_ANNOTATION,
)
from migops.kube import ssa
from migops.kube.errors import Kind, classify, retry_after

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class WriteError(Exception):
    """A write that did not happen, classified, with the API server's own message."""

    target: str  # Node/gpu-node-3, ConfigMap/gpu-operator/default-mig-parted-config
    kind: Kind
    status: int | None
    message: str

    def __str__(self) -> str:
        code = f"HTTP {self.status}: " if self.status else ""
        return f"{self.target}: {code}{self.message}"


def with_retries(
    call: Callable[[], T],
    target: str,
    *,
    attempts: int = 5,
    base: float = 0.2,
    cap: float = 5.0,
    on_retry: Callable[[int | None], None] = lambda status: None,
    stop: threading.Event | None = None,
) -> T:
    """Run `call`; retry transient failures with backoff; raise WriteError when it gives up."""
    delay = base
    for attempt in range(1, attempts + 1):
        try:
            return call()
        except Exception as exc:  # classified below
            kind, status, message = classify(exc)
            if kind == "terminal" or attempt == attempts or (stop is not None and stop.is_set()):
                raise WriteError(target, kind, status, message) from exc
            on_retry(status)
            wait = min(cap, retry_after(exc) or delay * (0.5 + random.random()))
            log.info("%s: %s (%s); retrying in %.2fs", target, message, status, wait)
            if stop is not None:
                stop.wait(wait)
            else:
                time.sleep(wait)
            delay = min(cap, delay * 2)
    raise AssertionError("unreachable")


class Writer:
    """Applies the reconciler's objects; counts every request it sends (for metrics and benchmarks)."""

    def __init__(
        self,
        api: k8s.ApiClient,
        *,
        workers: int = 8,
        dry_run: bool = False,
        stop: threading.Event | None = None,
        count: Callable[[str, str, int | None], None] | None = None,
        owner: str = "",
    ) -> None:
        self.api = api
        self.owner = owner  # "<namespace>/<migsync>": the managed-by annotation's value
        self.dry_run = dry_run
        self._stop = stop
        # Threads beyond the connection pool would only open and throw away connections.
        self.workers = max(1, min(workers, int(api.configuration.connection_pool_maxsize or workers)))
        self._count = count or (lambda resource, result, status: None)

    def _apply(
        self, body: Mapping[str, Any], resource: str, target: str, *, force: bool, subresource: str | None = None
    ) -> None:
        def once() -> None:
            ssa.apply(
                self.api,
                body,
                field_manager=RECONCILER_MANAGER,
                force=force,
                subresource=subresource,
                dry_run=self.dry_run,
                decode=False,
                timeout=30,
            )

        try:
            with_retries(once, target, stop=self._stop, on_retry=lambda status: self._count(resource, "retry", status))
        except WriteError as err:
            self._count(resource, "error", err.status)
            raise
        self._count(resource, "ok", 200)

    def configmap(self, namespace: str, name: str, text: str) -> None:
        """data["config.yaml"] of the MIG ConfigMap: the only field of it we own."""
        self._apply(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": namespace},
                "data": {CONFIGMAP_KEY: text},
            },
            "configmaps",
            f"ConfigMap/{namespace}/{name}",
            force=True,
        )

    def label(self, node: str, config: str | None, revision: str = "") -> None:
        """Apply our label with the managed-by and revision annotations (one SSA); None applies none of
        them, which releases them (removed, as no one else owns them)."""
        meta: dict[str, Any] = {"name": node, "labels": {}}
        if config is not None:
            meta["labels"] = {MIG_CONFIG_LABEL: config}
            meta["annotations"] = {
                MANAGED_BY_ANNOTATION: self.owner,
                **({REVISION_ANNOTATION: revision} if revision else {}),
            }
        self._apply({"apiVersion": "v1", "kind": "Node", "metadata": meta}, "nodes", f"Node/{node}", force=True)

    def release(self, node: str) -> None:
        """Drop our annotations from a node that left management, and nothing else: its label stays as it is
        (a merge patch: an apply would have to send the label, racing a person who now owns it)."""
        body = {"metadata": {"annotations": {MANAGED_BY_ANNOTATION: None, REVISION_ANNOTATION: None}}}

        def once() -> None:
            k8s.CoreV1Api(self.api).patch_node(
                node,
                body,
                field_manager=RECONCILER_MANAGER,
                _request_timeout=30,
                _content_type="application/merge-patch+json",
                **({"dry_run": "All"} if self.dry_run else {}),
            )

        try:
            with_retries(
                once, f"Node/{node}", stop=self._stop, on_retry=lambda status: self._count("nodes", "retry", status)
            )
        except WriteError as err:
            self._count("nodes", "error", err.status)
            raise
        self._count("nodes", "ok", 200)

    def labels(self, items: Iterable[tuple[str, str | None]], revision: str = "") -> tuple[list[str], list[WriteError]]:
        """Label many nodes in parallel; (written node names, errors)."""
        wanted = dict(items)
        return self._each(list(wanted), lambda name: self.label(name, wanted[name], revision))

    def releases(self, nodes: Iterable[str]) -> tuple[list[str], list[WriteError]]:
        return self._each(list(nodes), self.release)

    def _each(self, names: list[str], write: Callable[[str], None]) -> tuple[list[str], list[WriteError]]:
        done: list[str] = []
        errors: list[WriteError] = []
        if not names:
            return done, errors

        def one(name: str) -> tuple[str, WriteError | None]:
            if self._stop is not None and self._stop.is_set():
                return name, WriteError(f"Node/{name}", "transient", None, "stopping")
            try:
                write(name)
                return name, None
            except WriteError as err:
                return name, err

        if len(names) == 1 or self.workers == 1:
            results = [one(n) for n in names]
        else:
            with ThreadPoolExecutor(self.workers, thread_name_prefix="label") as pool:
                results = list(pool.map(logs.carried(one), names))  # its lines name the revision too
        for name, err in results:
            if err is None:
                done.append(name)
            else:
                errors.append(err)
        return done, errors

    def finalizer(self, namespace: str, name: str, present: bool) -> None:
        """Our finalizer on the MigSync, or (present False) our claim to it dropped, which removes it
        (server-side apply: the list is a set, other finalizers stay as they are)."""
        meta: dict[str, Any] = {"name": name, "namespace": namespace}
        if present:
            meta["finalizers"] = [MIGSYNC_FINALIZER]
        body = {"apiVersion": API_VERSION, "kind": KIND, "metadata": meta}
        self._apply(body, "migsyncs", f"MigSync/{namespace}/{name}", force=True)

    def record(self, body: Mapping[str, Any]) -> None:
        """The applied record (reconciler/record.py): a ConfigMap of ours, all its fields ours."""
        meta = body["metadata"]
        self._apply(body, "applied-records", f"ConfigMap/{meta['namespace']}/{meta['name']}", force=True)

    def status(self, body: Mapping[str, Any]) -> None:
        meta = body["metadata"]
        self._apply(
            body, "migsyncs/status", f"MigSync/{meta['namespace']}/{meta['name']}", force=True, subresource="status"
        )


class WritePort(Protocol):
    """The writes a sync makes (reconciler.apply.Writer, by server-side apply)."""

    def configmap(self, namespace: str, name: str, text: str) -> None: ...
    def labels(
        self, items: Iterable[tuple[str, str | None]], revision: str = ""
    ) -> tuple[list[str], list[WriteError]]: ...
    def releases(self, nodes: Iterable[str]) -> tuple[list[str], list[WriteError]]: ...
    def record(self, body: Mapping[str, Any]) -> None: ...
    def finalizer(self, namespace: str, name: str, present: bool) -> None: ...
    def status(self, body: Mapping[str, Any]) -> None: ...


class NullWriter:
    """A WritePort that sends nothing and keeps what it was asked to write (`migops diff` runs the
    sync's own steps with it, so it cannot diverge from a sync and changes nothing)."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, Any]] = []

    def configmap(self, namespace: str, name: str, text: str) -> None:
        self.asked.append(("configmap", (namespace, name)))

    def labels(self, items: Iterable[tuple[str, str | None]], revision: str = "") -> tuple[list[str], list[WriteError]]:
        done = [n for n, _ in items]
        self.asked += [("label", n) for n in done]
        return done, []

    def releases(self, nodes: Iterable[str]) -> tuple[list[str], list[WriteError]]:
        done = list(nodes)
        self.asked += [("release", n) for n in done]
        return done, []

    def record(self, body: Mapping[str, Any]) -> None:
        self.asked.append(("record", body))

    def finalizer(self, namespace: str, name: str, present: bool) -> None:
        self.asked.append(("finalizer", present))

    def status(self, body: Mapping[str, Any]) -> None:
        self.asked.append(("status", body))

"""List + watch one kind of object into an in-memory cache, and keep it current.

The Python client has no informer (client-go's reflector + store): this is the small one migops needs.
One thread per informer lists, then watches from the list's resourceVersion; a watch that ends is
resumed from the last resourceVersion seen; 410 Gone (the version fell out of etcd's window) and any
connection or server error lead to a fresh list after a backoff. With `missing_ok`, a 404 on the list
(the kind's CRD is not installed, e.g. no GPU Operator yet) counts as an empty, synced list, checked
again every `backoff[1]` seconds until the kind appears. Each list replaces the cache and
reports the differences as ordinary events, so handlers never miss a change across a gap.

Objects are kept as plain dicts (optionally trimmed by `transform`, e.g. dropping managedFields): the
client's generated models cost about a millisecond per Node to build, and a reconciler caches thousands.
The watch loop reads the raw response itself because `kubernetes.watch.Watch` without deserialisation
raises KeyError on an ERROR event, which is exactly the 410 this loop must handle.
"""

from __future__ import annotations

import json
import logging
import random
import threading
from collections.abc import Callable, Mapping
from typing import Any

from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

from migops.api import objects

log = logging.getLogger(__name__)

Obj = dict[str, Any]
Handler = Callable[[str, Obj], None]  # (ADDED | MODIFIED | DELETED, object)


def object_key(obj: Mapping[str, Any]) -> str:
    """`namespace/name`, or `name` for cluster-scoped objects."""
    meta = objects.meta(obj)
    ns = meta.get("namespace")
    return f"{ns}/{meta.get('name')}" if ns else str(meta.get("name"))


def drop_managed_fields(obj: Obj) -> Obj:
    """The default transform: managedFields are large and no reader of the cache needs them."""
    (obj.get("metadata") or {}).pop("managedFields", None)  # in place: the object is the informer's own copy
    return obj


class Informer:
    """Cache of the objects `list_fn(*args, **kwargs)` returns, kept current by a watch.

    `list_fn` is a typed client list function (`CoreV1Api.list_node`,
    `CoreV1Api.list_namespaced_config_map`, `CustomObjectsApi.list_cluster_custom_object`, ...) and
    `kwargs` its filters (`field_selector`, `label_selector`, ...). `version` increases on every change
    to the cache, so callers can key derived results by it.
    """

    def __init__(
        self,
        list_fn: Callable[..., Any],
        *args: Any,
        name: str = "",
        handler: Handler | None = None,
        transform: Callable[[Obj], Obj] = drop_managed_fields,
        watch_timeout: int = 290,
        read_timeout: float | None = None,
        backoff: tuple[float, float] = (0.2, 10.0),
        missing_ok: bool = False,
        **kwargs: Any,
    ) -> None:
        self._list_fn = list_fn
        self._args = args
        self._kwargs = kwargs
        self.name = name or getattr(list_fn, "__name__", "informer")
        self._handler = handler
        self._transform = transform
        self._watch_timeout = watch_timeout
        # A dead connection must not hang the watch: the server closes it after watch_timeout, so
        # a read that waits much longer than that means the peer is gone.
        self._read_timeout = read_timeout if read_timeout is not None else watch_timeout + 30.0
        self._backoff = backoff
        self._missing_ok = missing_ok
        self.missing = False  # with missing_ok: the last list answered 404
        self._items: dict[str, Obj] = {}
        self._lock = threading.Lock()
        self._synced = threading.Event()
        self._stop = threading.Event()
        self._response: Any = None
        self._thread: threading.Thread | None = None
        self.resource_version: str | None = None
        self.version = 0
        self.lists = 0  # how many times the informer has listed (1 + resyncs after errors or 410)
        self.last_error: str | None = None

    # ------------------------------------------------------------------------------ reading
    @property
    def synced(self) -> bool:
        return self._synced.is_set()

    def wait_synced(self, timeout: float | None = None) -> bool:
        return self._synced.wait(timeout)

    def get(self, key: str) -> Obj | None:
        with self._lock:
            return self._items.get(key)

    def items(self) -> dict[str, Obj]:
        """A snapshot (a new dict; the objects themselves are shared: do not modify them)."""
        with self._lock:
            return dict(self._items)

    def __len__(self) -> int:
        return len(self._items)

    # ------------------------------------------------------------------------------ lifecycle
    def start(self) -> Informer:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=f"informer-{self.name}", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        response = self._response
        if response is not None:
            try:
                response.shutdown()  # unblocks a read waiting on the watch socket
            except Exception:  # noqa: BLE001 - already closed
                pass
        if self._thread is not None:
            self._thread.join(timeout)

    def __enter__(self) -> Informer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------------------ the loop
    def _run(self) -> None:
        delay = self._backoff[0]
        while not self._stop.is_set():
            try:
                self._list()
                delay = self._backoff[0]
                while not self._stop.is_set():
                    if not self._watch_once():
                        break  # 410 Gone: list again
            except ApiException as exc:
                if self._stop.is_set():
                    break
                if self._missing_ok and exc.status == 404:
                    self._replace({}, None)  # the kind does not exist (yet): nothing of it exists
                    self.missing = True
                    self._stop.wait(self._backoff[1])
                    continue
                self.last_error = _describe(exc)
                log.warning("informer %s: %s; listing again in %.1fs", self.name, self.last_error, delay)
                self._stop.wait(delay * (0.5 + random.random()))
                delay = min(delay * 2, self._backoff[1])
            except Exception as exc:  # noqa: BLE001 - any failure: back off, then list again
                if self._stop.is_set():
                    break
                self.last_error = _describe(exc)
                log.warning("informer %s: %s; listing again in %.1fs", self.name, self.last_error, delay)
                self._stop.wait(delay * (0.5 + random.random()))
                delay = min(delay * 2, self._backoff[1])

    def _list(self) -> None:
        response = self._list_fn(
            *self._args, _preload_content=False, _request_timeout=self._read_timeout, **self._kwargs
        )
        try:
            doc = json.loads(response.data)
        finally:
            response.release_conn()
        fresh = {}
        for obj in doc.get("items") or ():
            obj = self._transform(obj)
            fresh[object_key(obj)] = obj
        self.missing = False
        self._replace(fresh, objects.meta(doc).get("resourceVersion"))

    def _replace(self, fresh: dict[str, Obj], resource_version: str | None) -> None:
        """Make `fresh` the cache (a list's result) and report the differences as events."""
        with self._lock:
            old, self._items = self._items, fresh
            self.resource_version = resource_version
            self.version += 1
            self.lists += 1
        self.last_error = None
        self._synced.set()
        if self._handler is not None:
            for key, obj in fresh.items():
                before = old.get(key)
                if before is None:
                    self._notify("ADDED", obj)
                elif _rv(before) != _rv(obj):
                    self._notify("MODIFIED", obj)
            for key, obj in old.items():
                if key not in fresh:
                    self._notify("DELETED", obj)

    def _watch_once(self) -> bool:
        """Watch until the server ends the request; False when the cache must be listed again."""
        response = self._list_fn(
            *self._args,
            watch=True,
            resource_version=self.resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=self._watch_timeout,
            _preload_content=False,
            _request_timeout=self._read_timeout,
            **self._kwargs,
        )
        self._response = response
        try:
            for line in iter_resp_lines(response):
                if self._stop.is_set():
                    return True
                event = json.loads(line)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        log.info(
                            "informer %s: resourceVersion %s expired; listing again", self.name, self.resource_version
                        )
                        return False
                    raise ApiException(status=obj.get("code"), reason=f"{obj.get('reason')}: {obj.get('message')}")
                rv = _rv(obj)
                if kind == "BOOKMARK":
                    self.resource_version = rv
                    continue
                obj = self._transform(obj)
                key = object_key(obj)
                with self._lock:
                    if kind == "DELETED":
                        self._items.pop(key, None)
                    else:
                        self._items[key] = obj
                    self.resource_version = rv
                    self.version += 1
                self._notify(kind, obj)
        finally:
            self._response = None
            response.release_conn()
        return True

    def _notify(self, kind: str, obj: Obj) -> None:
        if self._handler is None:
            return
        try:
            self._handler(kind, obj)
        except Exception:
            log.exception("informer %s: handler failed on %s %s", self.name, kind, object_key(obj))


def _rv(obj: Mapping[str, Any]) -> str | None:
    return objects.meta(obj).get("resourceVersion")


def _describe(exc: BaseException) -> str:
    if isinstance(exc, ApiException):
        return f"HTTP {exc.status} {exc.reason}"
    return f"{type(exc).__name__}: {exc}"

"""Server-side apply of any object, through the Kubernetes client's dynamic client.

The typed API needs one method per kind; an apply body already says its apiVersion and kind, so one
function serves every kind migops writes. Where a kind lives (its resource name, whether it is
namespaced, its subresources) comes from the API server's discovery, never from a list kept here.
Bodies are plain dicts (the client's generated models changed in v37; dicts did not), sent as
`application/apply-patch+yaml` with a named field manager, so a manager owns exactly the fields it
sends (what it owns is read back by `migops.api.objects.owned_keys`): a label it stops sending is
removed, fields owned by the GPU Operator, Argo CD or Flux are never touched.

Discovery is a few requests to the API server, made once per ApiClient (at its first apply) and kept
while the client lives; a kind resolved once is a dictionary lookup after that, so a controller that
writes thousands of Nodes asks discovery once. A kind not found is looked up again (the client
re-reads discovery then): a CRD installed after the first apply is found at its first use.
"""

from __future__ import annotations

import json
import os
import threading
import weakref
from collections.abc import Mapping
from typing import Any

from kubernetes import client as k8s
from kubernetes.dynamic import DynamicClient, LazyDiscoverer, Resource

from migops.api import objects

# A path that cannot exist (a name under a device file): the discoverer reads no cache from disk.
_NO_CACHE_FILE = os.path.join(os.devnull, "discovery.json")
DISCOVERY_TIMEOUT = 30.0


class _MemoryDiscoverer(LazyDiscoverer):  # type: ignore[misc]  # the client library is untyped
    """The dynamic client's lazy discovery, kept in memory only. The library's default cache is a file
    in the temporary directory named after the server's address alone: it outlives the process, and
    another cluster later served at the same address would be read through it."""

    def __init__(self, client: DynamicClient, cache_file: str | None) -> None:
        super().__init__(client, _NO_CACHE_FILE)

    def _write_cache(self) -> None:
        """Nothing is written: the cache is this object's memory."""


class _BoundedClient(DynamicClient):  # type: ignore[misc]  # the client library is untyped
    """A dynamic client whose requests without a timeout of their own (discovery's) give up after
    DISCOVERY_TIMEOUT seconds: an API server that accepts a connection and never answers must not hold
    a writer for ever."""

    def request(self, method: str, path: str, body: Any = None, **params: Any) -> Any:
        params.setdefault("_request_timeout", DISCOVERY_TIMEOUT)
        return super().request(method, path, body, **params)


class _Discovery:
    """The dynamic client of one ApiClient and the kinds it has resolved, both made at first use. It
    holds the ApiClient by a weak reference, so keeping it beside that client does not keep it alive."""

    def __init__(self, api: k8s.ApiClient) -> None:
        self._api = weakref.proxy(api)
        self._lock = threading.Lock()  # discovery's cache is not safe to share between threads
        self._client: DynamicClient | None = None
        self._kinds: dict[tuple[str, str], Resource] = {}

    def resolve(self, api_version: str, kind: str) -> tuple[DynamicClient, Resource]:
        """The dynamic client, and the resource of `kind`; only the first use of each asks the server."""
        client, found = self._client, self._kinds.get((api_version, kind))
        if client is not None and found is not None:
            return client, found
        with self._lock:
            if self._client is None:
                self._client = _BoundedClient(self._api, discoverer=_MemoryDiscoverer)
            found = self._kinds.get((api_version, kind))
            if found is None:
                prefix = "apis" if "/" in api_version else "api"  # the core group is served under /api
                found = self._client.resources.get(prefix=prefix, api_version=api_version, kind=kind)
                self._kinds[(api_version, kind)] = found
            return self._client, found


_discoveries: weakref.WeakKeyDictionary[k8s.ApiClient, _Discovery] = weakref.WeakKeyDictionary()
_discoveries_lock = threading.Lock()


def _discovery(api: k8s.ApiClient) -> _Discovery:
    with _discoveries_lock:
        found = _discoveries.get(api)
        if found is None:
            found = _discoveries[api] = _Discovery(api)
        return found


def resource(api: k8s.ApiClient, api_version: str, kind: str) -> Resource:
    """The API server's resource for `kind` of `api_version`: raises
    kubernetes.dynamic.exceptions.ResourceNotFoundError when the server serves no such kind."""
    return _discovery(api).resolve(api_version, kind)[1]


def apply(
    api: k8s.ApiClient,
    body: Mapping[str, Any],
    *,
    field_manager: str,
    force: bool = False,
    subresource: str | None = None,
    namespace: str | None = None,
    dry_run: bool = False,
    decode: bool = True,
    timeout: float | None = None,
) -> dict[str, Any]:
    """Apply `body` (apiVersion, kind, metadata.name[, namespace] and the fields this manager owns).

    `force` takes fields over from other managers (use it only for fields migops owns by contract);
    without it a conflict is a 409. `subresource="status"` applies the status. `namespace` places a
    namespaced object whose metadata names none (as `kubectl apply -n`); a namespaced object with
    neither is a ValueError. Raises ApiException, or ResourceNotFoundError for a kind the server does
    not serve. `decode=False` skips parsing the returned object (a Node is kilobytes of JSON; a
    controller that writes thousands of labels has no use for it) and returns {}.
    """
    client, target = _discovery(api).resolve(body["apiVersion"], body["kind"])
    if subresource:
        target = target.subresources[subresource]
    meta = objects.meta(body)
    response = client.server_side_apply(
        target,
        body=dict(body),
        name=meta["name"],
        namespace=meta.get("namespace") or namespace,
        field_manager=field_manager,
        force_conflicts=True if force else None,
        dry_run="All" if dry_run else None,
        _request_timeout=timeout,
        serialize=False,
    )
    try:
        if not decode:
            response.drain_conn()  # read to the end, so the connection goes back to the pool for reuse
            return {}
        decoded: dict[str, Any] = json.loads(response.data)
        return decoded
    finally:
        response.release_conn()

"""Helpers for the webhook tests (constants, objects, AdmissionReviews, a TLS client)."""

from __future__ import annotations

import json
import ssl
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import urllib3

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CONFIG = (ROOT / "examples" / "nvidia-default-config.yaml").read_text()
H100, A100 = "0x233010DE", "0x20B010DE"
CM_NS, CM_NAME = "gpu-operator", "default-mig-parted-config"
MANAGER = "webhook-tests"


def configmap(text: str, name: str = CM_NAME, namespace: str = CM_NS, labels: dict | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels:
        meta["labels"] = labels
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"config.yaml": text}}


def eventually(check: Callable[[], Any], timeout: float = 20.0, interval: float = 0.1) -> Any:
    """Retry `check` until it stops raising AssertionError or pytest's Failed (`pytest.raises` that did
    not raise: a write the webhook admitted before its informers saw what denies it; they follow the API
    server a moment behind the write a test just made)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return check()
        except (AssertionError, pytest.fail.Exception):
            if time.monotonic() > deadline:
                raise
            time.sleep(interval)


class Direct:
    """Posts to the webhook itself over TLS (keep-alive), as the API server does."""

    def __init__(self, url: str, bundle: bytes) -> None:
        host, port = url.removeprefix("https://").split(":")
        ctx = ssl.create_default_context(cadata=bundle.decode())
        self.pool = urllib3.HTTPSConnectionPool(
            host, int(port), ssl_context=ctx, maxsize=4, timeout=urllib3.Timeout(connect=5, read=10), retries=False
        )

    def post(self, path: str, body: bytes | str | dict, headers: dict | None = None) -> urllib3.BaseHTTPResponse:
        data = json.dumps(body).encode() if isinstance(body, dict) else body
        return self.pool.request(
            "POST", path, body=data, headers={"Content-Type": "application/json", **(headers or {})}
        )

    def get(self, path: str) -> urllib3.BaseHTTPResponse:
        return self.pool.request("GET", path)


def review(
    obj: dict | None,
    *,
    operation: str = "CREATE",
    old: dict | None = None,
    kind: str | None = None,
    group: str = "",
    dry_run: bool = False,
) -> dict[str, Any]:
    """An AdmissionReview as the API server sends it."""
    some = obj or old or {}
    meta = some.get("metadata") if isinstance(some.get("metadata"), dict) else {}
    kind = kind or some.get("kind", "ConfigMap")
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": group, "version": "v1", "kind": kind},
            "resource": {"group": group, "version": "v1", "resource": kind.lower() + "s"},
            "name": meta.get("name", ""),
            "namespace": meta.get("namespace", ""),
            "operation": operation,
            "userInfo": {"username": "tester"},
            "object": obj,
            "oldObject": old,
            "dryRun": dry_run,
        },
    }

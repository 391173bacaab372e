"""Install CustomResourceDefinitions: apply them, then wait until each is Established (before that the API
server rejects their objects) and listed by discovery (which the API server updates a moment later, and
through which `migops.kube.ssa` finds where its objects live). The one way migops, its local stack and
the GitOps tools beside it do it.

A CRD being deleted (an uninstall, a test's cleanup) is waited out first: applied while it terminates,
the apply would only patch the doomed object, which stays Established until the API server removes it
and its objects, and the CRD would then be gone.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from kubernetes import client as k8s
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic.exceptions import ResourceNotFoundError

from migops.kube import ssa


def established(ext: k8s.ApiextensionsV1Api, name: str) -> bool:
    got = ext.read_custom_resource_definition(name)
    if got.metadata.deletion_timestamp is not None:
        return False
    conditions = (got.status.conditions or []) if got.status else []
    return any(c.type == "Established" and c.status == "True" for c in conditions)


def discovered(api: ApiClient, crd: dict[str, Any]) -> bool:
    """Whether discovery lists the CRD's kind in every version it serves."""
    spec = crd["spec"]
    try:
        for version in spec["versions"]:
            if version.get("served", True):
                ssa.resource(api, f"{spec['group']}/{version['name']}", spec["names"]["kind"])
    except ResourceNotFoundError:
        return False
    return True


def _terminating(ext: k8s.ApiextensionsV1Api, name: str) -> bool:
    try:
        return ext.read_custom_resource_definition(name).metadata.deletion_timestamp is not None
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise


def install(
    api: ApiClient, crds: Iterable[dict[str, Any]], *, field_manager: str, force: bool = False, timeout: float = 30.0
) -> None:
    """Server-side apply every CRD (`force`: take fields another manager owns), then wait for all to be
    Established and discovered; TimeoutError names the first that is not after `timeout` seconds."""
    ext = k8s.ApiextensionsV1Api(api)
    deadline = time.monotonic() + timeout
    applied = []
    for crd in crds:
        name = crd["metadata"]["name"]
        while _terminating(ext, name):
            if time.monotonic() > deadline:
                raise TimeoutError(f"CRD {name} still being deleted after {timeout:.0f}s")
            time.sleep(0.1)
        ssa.apply(api, crd, field_manager=field_manager, force=force)
        applied.append(crd)
    for crd in applied:
        name = crd["metadata"]["name"]
        while not (established(ext, name) and discovered(api, crd)):
            if time.monotonic() > deadline:
                raise TimeoutError(f"CRD {name} not Established and discovered after {timeout:.0f}s")
            time.sleep(0.1)

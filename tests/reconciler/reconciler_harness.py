"""Helpers of the reconciler tests (imported by name: `conftest` is ambiguous across test folders).

The migops agent's side is played by `agent_reports`: what the agent writes on the API server (state
label + digest annotation under the field manager migops-agent), or what NVIDIA's mig-manager writes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kubernetes import client as k8s
from kubernetes.client import ApiClient
from polling import until

from migops.api.names import (
    AGENT_MANAGER,
    DIGEST_ANNOTATION,
    MIG_CONFIG_LABEL,
    MIG_CONFIG_STATE_LABEL,
    REASON_ANNOTATION,
)
from migops.kube import ssa
from migops.mig.spec import parse_config


def labels_of(api: ApiClient, names: list[str]) -> dict[str, dict[str, str]]:
    core = k8s.CoreV1Api(api)
    return {n: core.read_node(n).metadata.labels or {} for n in names}


def agent_reports(
    api: ApiClient,
    config_text: str,
    names: list[str],
    *,
    fail: dict[str, str] | None = None,
    state: str | None = None,
    mig_manager: bool = False,
) -> None:
    """What the migops agent writes when it has applied (or failed to apply) each node's label;
    `mig_manager=True`: what NVIDIA's mig-manager writes instead (the state label, no annotations)."""
    config = parse_config(config_text)
    core = k8s.CoreV1Api(api)
    for name in names:
        label = (core.read_node(name).metadata.labels or {}).get(MIG_CONFIG_LABEL)
        if label is None:
            continue
        labels: dict[str, Any] = {MIG_CONFIG_STATE_LABEL: state or "success"}
        annotations: dict[str, Any] = {}
        if fail and name in fail:
            labels[MIG_CONFIG_STATE_LABEL] = "failed"
            annotations[REASON_ANNOTATION] = fail[name]
        elif labels[MIG_CONFIG_STATE_LABEL] == "success" and not mig_manager:
            annotations[DIGEST_ANNOTATION] = config.digest(label)
        ssa.apply(
            api,
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name, "labels": labels, "annotations": annotations},
            },
            field_manager="nvidia-mig-manager" if mig_manager else AGENT_MANAGER,
            force=True,
        )


def events_for(api: ApiClient, name: str, reason: str | None = None, namespace: str | None = None) -> list[Any]:
    core = k8s.CoreV1Api(api)
    found = (
        core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}")
        if namespace
        else core.list_event_for_all_namespaces(field_selector=f"involvedObject.name={name}")
    )
    return [e for e in found.items if reason is None or e.reason == reason]


def migsync(api: ApiClient, name: str, namespace: str = "migops-system") -> dict[str, Any]:
    return k8s.CustomObjectsApi(api).get_namespaced_custom_object("migops.io", "v1alpha1", namespace, "migsyncs", name)


def eventually(call: Callable[[], Any], ok: Callable[[Any], bool] = bool, timeout: float = 45.0) -> Any:
    """Call until `ok(value)`; return the value (polling.until with a predicate: a value may be falsy
    and still what the test waits for)."""
    seen: list[Any] = []

    def check() -> bool:
        seen.append(call())
        return ok(seen[-1])

    until(check, timeout, what=f"ok({call})")
    return seen[-1]


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(c for c in obj["status"]["conditions"] if c["type"] == kind)

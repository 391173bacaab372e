"""The GPU Operator's MIG settings, read from its ClusterPolicy (docs/interfaces.md).

The operator acts on one ClusterPolicy; with several, it uses the oldest and reports the others as
ignored, and so do we.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes import client as k8s

GROUP, VERSION, PLURAL = "nvidia.com", "v1", "clusterpolicies"
DEFAULT_STRATEGY = "single"  # the ClusterPolicy CRD's default for spec.mig.strategy
DEFAULT_CONFIG_NAME = "default-mig-parted-config"
DEFAULT_NAMESPACE = "gpu-operator"
DEFAULT_CONFIG = "all-disabled"


@dataclass(frozen=True)
class MigSettings:
    strategy: str = DEFAULT_STRATEGY
    config_name: str = DEFAULT_CONFIG_NAME  # the MIG config ConfigMap
    namespace: str = DEFAULT_NAMESPACE  # where it lives: the operator's namespace
    default_config: str = DEFAULT_CONFIG  # what the operator labels new MIG-capable nodes with
    policy: str | None = None  # the ClusterPolicy read, None when there is none

    @property
    def configmap(self) -> tuple[str, str]:
        """(namespace, name) of the MIG config ConfigMap."""
        return self.namespace, self.config_name


def settings_from_policies(policies: Iterable[Mapping[str, Any]]) -> MigSettings:
    """The settings of the oldest ClusterPolicy; defaults when there is none."""
    chosen = sorted(
        policies,
        key=lambda p: (
            (p.get("metadata") or {}).get("creationTimestamp") or "",
            (p.get("metadata") or {}).get("name") or "",
        ),
    )
    if not chosen:
        return MigSettings()
    policy = chosen[0]
    spec = policy.get("spec") or {}
    manager = (spec.get("migManager") or {}).get("config") or {}
    return MigSettings(
        strategy=(spec.get("mig") or {}).get("strategy") or DEFAULT_STRATEGY,
        config_name=manager.get("name") or DEFAULT_CONFIG_NAME,
        namespace=(policy.get("status") or {}).get("namespace") or DEFAULT_NAMESPACE,
        default_config=manager.get("default") or DEFAULT_CONFIG,
        policy=(policy.get("metadata") or {}).get("name"),
    )


def read_settings(api: k8s.ApiClient) -> MigSettings:
    """One GET (a list). Long-running components watch ClusterPolicies with an Informer instead and
    call settings_from_policies on its cache."""
    try:
        found = k8s.CustomObjectsApi(api).list_cluster_custom_object(GROUP, VERSION, PLURAL)
    except k8s.exceptions.ApiException as exc:
        if exc.status == 404:  # no GPU Operator CRD in this cluster: its defaults apply
            return MigSettings()
        raise
    return settings_from_policies(found.get("items") or ())

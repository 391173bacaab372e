"""The GPU Operator's ClusterPolicy: its API names and one read of the settings in force
(docs/interfaces.md). What a ClusterPolicy says is read by `migops.api.objects.MigSettings` (the
strategy parsed once); this module reads ClusterPolicies from the API server.

The operator acts on one ClusterPolicy; with several, it uses the oldest and reports the others as
ignored, and so do we.
"""

from __future__ import annotations

from typing import Any

from kubernetes import client as k8s

from migops.api.objects import MigSettings, settings_from_policies
from migops.kube.informer import Informer

GROUP, VERSION, PLURAL = "nvidia.com", "v1", "clusterpolicies"


def informer(api: k8s.ApiClient, **options: Any) -> Informer:
    """The ClusterPolicies' informer every part runs (webhook, reconciler, agent): the CRD is optional
    (no GPU Operator yet counts as none: the GPU Operator's defaults apply), so a 404 is waited out;
    `options` (handler, transform, backoff, watch_timeout) are Informer's."""
    return Informer(
        k8s.CustomObjectsApi(api).list_cluster_custom_object,
        GROUP,
        VERSION,
        PLURAL,
        name="clusterpolicies",
        missing_ok=True,
        **options,
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

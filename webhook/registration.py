"""The webhook configurations, written once: the chart (charts/migops, and so manifests/) writes them
for the in-cluster Service (tests/webhook keeps its render equal to `in_cluster()`), and `migops
local` registers them with a loopback URL.

Scope, so that the webhook can never lock out the cluster or itself:
- namespaced objects in kube-system, kube-node-lease and any namespace labelled migops.io/webhook=skip
  (migops-system is) are never sent;
- Nodes, and their status subresource (which stores labels too), only when nvidia.com/mig.config is
  set or changed or the migops.io/managed-by or migops.io/mig.config.revision annotation changes (matchConditions: kubelets and
  mig-manager write Nodes constantly, and a Node write must never wait on the webhook otherwise);
- ConfigMaps only when they could hold a MIG config (a config.yaml key, the migops label, or the GPU
  Operator's namespace), and an UPDATE only when it changes what the webhook judges (data,
  binaryData, the migops label; the mutation also when the digest annotation is gone): re-applies
  of unchanged content, every interval under GitOps, never wait on the webhook;
- Pods only when they request nvidia.com/mig-* resources;
- ClusterPolicies on CREATE, UPDATE and DELETE, and their status subresource only when
  status.namespace changes (where mig-manager's ConfigMap is read; the operator writes the rest often);
- ResourceClaims, ResourceClaimTemplates and DeviceClasses (resource.k8s.io/v1) only when they hold a
  CEL selector: warnings only, failurePolicy Ignore;
- failurePolicy Fail for MIG ConfigMaps, Nodes and ClusterPolicies (an unchecked MIG config is what
  this webhook exists to stop), Ignore for Pods and for every mutation (workloads never depend on it);
- timeouts of a few seconds; sideEffects None (dry-runs are answered like real requests).
"""

from __future__ import annotations

import base64
import copy
from typing import Any

from kubernetes import client as k8s

from migops.api.names import (
    CONFIG_DIGEST_ANNOTATION,
    CONFIGMAP_KEY,
    MANAGED_BY_ANNOTATION,
    MIG_CONFIG_LABEL,
    MIG_CONFIGMAP_LABEL,
    MIG_RESOURCE_PREFIX,
    REVISION_ANNOTATION,
    TRANSLATE_LABEL,
    WEBHOOK_SKIP_LABEL,
)
from migops.kube import ssa

NAME = "migops-webhook"
SERVICE_NAMESPACE = "migops-system"
OPERATOR_NAMESPACE = "gpu-operator"
TIMEOUT_SECONDS = 5

_EXCLUDED = {
    "matchExpressions": [
        {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", "kube-node-lease"]},
        {"key": WEBHOOK_SKIP_LABEL, "operator": "NotIn", "values": ["skip"]},
    ]
}


def _has_key(var: str, field: str, key: str) -> str:
    return f"({var} != null && has({var}.{field}) && '{key}' in {var}.{field})"


def _label(var: str) -> str:
    return (
        f"(has({var}.metadata.labels) && '{MIG_CONFIG_LABEL}' in {var}.metadata.labels ? "
        f"{var}.metadata.labels['{MIG_CONFIG_LABEL}'] : '')"
    )


_MIG_CONFIGMAP = " || ".join(
    [
        _has_key("object", "data", CONFIGMAP_KEY),
        _has_key("oldObject", "data", CONFIGMAP_KEY),
        _has_key("object", "binaryData", CONFIGMAP_KEY),
        _has_key("object", "metadata.labels", MIG_CONFIGMAP_LABEL),
        _has_key("oldObject", "metadata.labels", MIG_CONFIGMAP_LABEL),
        f"request.namespace == '{OPERATOR_NAMESPACE}'",
    ]
)


def _same(field: str) -> str:
    """object.<field> and oldObject.<field> are both absent, or present and equal (UPDATE only)."""
    return (
        f"(has(object.{field}) ? (has(oldObject.{field}) && object.{field} == oldObject.{field}) "
        f": !has(oldObject.{field}))"
    )


def _label_value(var: str, key: str) -> str:
    return f"(has({var}.metadata.labels) && '{key}' in {var}.metadata.labels ? {var}.metadata.labels['{key}'] : '')"


# Every other write is one the webhook already answered: what it judges of a ConfigMap is its data,
# its binaryData and the migops label (namespace and name cannot change). An UPDATE that leaves them
# as they are (Flux and Argo CD re-applying an unchanged manifest every interval, a label or an
# annotation edited by hand) is not sent at all: that content was admitted when it was written, as
# Kubernetes itself ratchets CRD validation (an unchanged field is not judged again). CREATE and
# DELETE are always sent.
_MIG_CONTENT_CHANGED = (
    f"request.operation != 'UPDATE' || !({_same('data')} && {_same('binaryData')} && "
    f"{_label_value('object', MIG_CONFIGMAP_LABEL)} == "
    f"{_label_value('oldObject', MIG_CONFIGMAP_LABEL)})"
)
# The mutation (annotate.py) is also wanted when the write dropped its digest annotation, so the
# annotations always describe the content in force.
_DIGEST_MISSING = f"!(has(object.metadata.annotations) && '{CONFIG_DIGEST_ANNOTATION}' in object.metadata.annotations)"


def _annotation(var: str, key: str) -> str:
    return (
        f"(has({var}.metadata.annotations) && '{key}' in {var}.metadata.annotations ? "
        f"{var}.metadata.annotations['{key}'] : '')"
    )


_NODE_LABEL_CHANGED = (
    f"request.operation == 'CREATE' ? {_label('object')} != '' : {_label('object')} != {_label('oldObject')}"
)
# The owner of a managed node's labels (nodelabels.ownership) is judged on writes of the annotation too.
_MANAGED_BY_CHANGED = (
    f"request.operation == 'UPDATE' && {_annotation('object', MANAGED_BY_ANNOTATION)} != "
    f"{_annotation('oldObject', MANAGED_BY_ANNOTATION)}"
)
# The revision the MigSync status reports for the node is the reconciler's alone to write (nodelabels).
_REVISION_CHANGED = (
    f"request.operation == 'CREATE' ? {_annotation('object', REVISION_ANNOTATION)} != '' : "
    f"{_annotation('object', REVISION_ANNOTATION)} != {_annotation('oldObject', REVISION_ANNOTATION)}"
)
_NODE_CONDITIONS = {
    "mig-config-label-owner-or-revision-changed": (
        f"({_NODE_LABEL_CHANGED}) || ({_MANAGED_BY_CHANGED}) || ({_REVISION_CHANGED})"
    )
}


def _status_namespace(var: str) -> str:
    return f"(has({var}.status) && has({var}.status.namespace) ? {var}.status.namespace : '')"


_STATUS_NAMESPACE_CHANGED = f"{_status_namespace('object')} != {_status_namespace('oldObject')}"


def _wants_mig(containers: str) -> str:
    return (
        f"(has(object.spec.{containers}) && object.spec.{containers}.exists(c, has(c.resources) && "
        f"((has(c.resources.limits) && c.resources.limits.exists(k, k.startsWith('{MIG_RESOURCE_PREFIX}'))) || "
        f"(has(c.resources.requests) && c.resources.requests.exists(k, k.startsWith('{MIG_RESOURCE_PREFIX}'))))))"
    )


_POD_WANTS_MIG = f"{_wants_mig('containers')} || {_wants_mig('initContainers')}"
# A DRA object is sent only when it holds a CEL selector (a request naming a class alone is judged by
# that class). Claims' and templates' specs are immutable and their status is a subresource the rules
# do not cover, so the scheduler's and the controllers' writes are never sent.


def _requests_with_cel(spec: str) -> str:
    return (
        f"has({spec}.devices) && has({spec}.devices.requests) && {spec}.devices.requests.exists(r, "
        "(has(r.exactly) && has(r.exactly.selectors)) || "
        "(has(r.firstAvailable) && r.firstAvailable.exists(s, has(s.selectors))))"
    )


_DRA_CONDITIONS = {
    "resourceclaims": _requests_with_cel("object.spec"),
    "resourceclaimtemplates": f"has(object.spec.spec) && {_requests_with_cel('object.spec.spec')}",
    "deviceclasses": "has(object.spec.selectors)",
}


def _hook(
    name: str,
    path: str,
    client: dict[str, Any],
    rules: list[dict[str, Any]],
    failure: str,
    *,
    conditions: dict[str, str] | None = None,
    namespaces: dict[str, Any] | None = None,
) -> dict[str, Any]:
    config = copy.deepcopy(client)
    if "service" in config:
        config["service"]["path"] = path
    else:
        config["url"] = config["url"].rstrip("/") + path
    hook: dict[str, Any] = {
        "name": name,
        "admissionReviewVersions": ["v1"],
        "clientConfig": config,
        "rules": rules,
        "failurePolicy": failure,
        "matchPolicy": "Equivalent",
        "sideEffects": "None",
        "timeoutSeconds": TIMEOUT_SECONDS,
        "namespaceSelector": copy.deepcopy(namespaces or _EXCLUDED),
        "objectSelector": {},
    }
    if conditions:
        hook["matchConditions"] = [{"name": k, "expression": v} for k, v in conditions.items()]
    return hook


def _rule(group: str, version: str, resource: str, *operations: str) -> dict[str, Any]:
    return {
        "apiGroups": [group],
        "apiVersions": [version],
        "resources": [resource],
        "operations": list(operations),
        "scope": "*",
    }


def configurations(client: dict[str, Any], ca_bundle: bytes | None = None) -> list[dict[str, Any]]:
    """[ValidatingWebhookConfiguration, MutatingWebhookConfiguration]; `client` is
    {"service": {"name", "namespace", "port"}} or {"url": "https://host:port"}."""
    if ca_bundle:
        client = {**client, "caBundle": base64.b64encode(ca_bundle).decode()}
    meta = {"name": NAME, "labels": {"app.kubernetes.io/name": NAME, "app.kubernetes.io/part-of": "migops"}}
    return [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": copy.deepcopy(meta),
            "webhooks": [*_mig_hooks(client), *_workload_hooks(client)],
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": copy.deepcopy(meta),
            "webhooks": _mutating_hooks(client),
        },
    ]


def _mig_hooks(client: dict[str, Any]) -> list[dict[str, Any]]:
    """What decides a MIG geometry (failurePolicy Fail): the MIG ConfigMaps, Nodes' config label (through
    the Node and its status), the ClusterPolicy (its spec, deletion and status.namespace)."""
    return [
        _hook(
            "configmaps.validate.migops.io",
            "/validate",
            client,
            [_rule("", "v1", "configmaps", "CREATE", "UPDATE", "DELETE")],
            "Fail",
            conditions={"may-hold-a-mig-config": _MIG_CONFIGMAP, "mig-content-changed": _MIG_CONTENT_CHANGED},
        ),
        _hook(
            "nodes.validate.migops.io",
            "/validate",
            client,
            [_rule("", "v1", "nodes", "CREATE", "UPDATE")],
            "Fail",
            conditions=_NODE_CONDITIONS,
        ),
        # A write of the status subresource (the kubelet's, every few seconds) keeps metadata as sent:
        # labels changed there are stored as well, so the same rule reviews it, under its own hook.
        _hook(
            "nodes-status.validate.migops.io",
            "/validate",
            client,
            [_rule("", "v1", "nodes/status", "UPDATE")],
            "Fail",
            conditions=_NODE_CONDITIONS,
        ),
        # Every way the MIG strategy or the ConfigMap in force changes: the spec, its deletion (the
        # operator's defaults take over) and status.namespace (where the ConfigMap is read), whose
        # writes are sent only when they change it (the operator writes its status constantly).
        _hook(
            "clusterpolicies.validate.migops.io",
            "/validate",
            client,
            [_rule("nvidia.com", "v1", "clusterpolicies", "CREATE", "UPDATE", "DELETE")],
            "Fail",
        ),
        _hook(
            "clusterpolicies-status.validate.migops.io",
            "/validate",
            client,
            [_rule("nvidia.com", "v1", "clusterpolicies/status", "UPDATE")],
            "Fail",
            conditions={"status-namespace-changed": _STATUS_NAMESPACE_CHANGED},
        ),
    ]


def _workload_hooks(client: dict[str, Any]) -> list[dict[str, Any]]:
    """What asks for MIG devices (failurePolicy Ignore: workloads never depend on the webhook): Pods, and
    DRA objects whose selectors may pick MIG devices (webhook/dra.py: warnings only)."""
    return [
        _hook(
            "pods.validate.migops.io",
            "/validate",
            client,
            [_rule("", "v1", "pods", "CREATE")],
            "Ignore",
            conditions={"requests-mig-devices": _POD_WANTS_MIG},
        ),
        *(
            _hook(
                f"{resource}.validate.migops.io",
                "/validate",
                client,
                [_rule("resource.k8s.io", "v1", resource, "CREATE", "UPDATE")],
                "Ignore",
                conditions={"has-cel-selectors": condition},
            )
            for resource, condition in _DRA_CONDITIONS.items()
        ),
    ]


def _mutating_hooks(client: dict[str, Any]) -> list[dict[str, Any]]:
    """The MIG ConfigMaps' annotations and the single-strategy translation of Pods (opted-in namespaces)."""
    translate = {"matchLabels": {TRANSLATE_LABEL: "single"}, **copy.deepcopy(_EXCLUDED)}
    hooks = [
        _hook(
            "configmaps.mutate.migops.io",
            "/mutate",
            client,
            [_rule("", "v1", "configmaps", "CREATE", "UPDATE")],
            "Ignore",
            conditions={
                "may-hold-a-mig-config": _MIG_CONFIGMAP,
                "mig-content-changed-or-unannotated": f"{_MIG_CONTENT_CHANGED} || {_DIGEST_MISSING}",
            },
        ),
        _hook(
            "pods.mutate.migops.io",
            "/mutate",
            client,
            [_rule("", "v1", "pods", "CREATE")],
            "Ignore",
            conditions={"requests-mig-devices": _POD_WANTS_MIG},
            namespaces=translate,
        ),
    ]
    for hook in hooks:
        hook["reinvocationPolicy"] = "Never"
    return hooks


def in_cluster() -> list[dict[str, Any]]:
    """As the chart installs them (caBundle filled in later by `migops certs rotate`): the Service's own
    namespace is never reviewed either, whatever its labels."""
    found = configurations({"service": {"name": NAME, "namespace": SERVICE_NAMESPACE, "port": 443}})
    for configuration in found:
        for hook in configuration["webhooks"]:
            names = hook["namespaceSelector"]["matchExpressions"][0]
            names["values"] = [*names["values"], SERVICE_NAMESPACE]
    return found


def register(api: k8s.ApiClient, url: str, ca_bundle: bytes, *, field_manager: str) -> None:
    """Apply both configurations pointing at `url` (server-side apply: idempotent)."""
    for body in configurations({"url": url}, ca_bundle):
        ssa.apply(api, body, field_manager=field_manager, force=True)


def unregister(api: k8s.ApiClient) -> None:
    admission = k8s.AdmissionregistrationV1Api(api)
    for delete in (admission.delete_validating_webhook_configuration, admission.delete_mutating_webhook_configuration):
        try:
            delete(NAME)
        except k8s.exceptions.ApiException as exc:
            if exc.status != 404:
                raise

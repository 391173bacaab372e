"""Rules for a Node whose nvidia.com/mig.config label is set or changed.

The webhook configuration's matchConditions send only those writes here (kubelets and mig-manager
write Nodes constantly). The name must exist in the MIG ConfigMap in force, and that config must be
placeable on this node's GPUs under the cluster's MIG strategy (so under `single`, one MIG device
type): `migops.mig.fit` answers that, with the errors of the config's text itself (as `migops
validate` and gitops do). Removing the label is always allowed: mig-manager then leaves the GPUs as
they are.
"""
from __future__ import annotations

import difflib

from migops.kube.names import DEVICE_ID_LABEL, GPU_COUNT_LABEL, GPU_PRODUCT_LABEL, GPUS_ANNOTATION, MIG_CONFIG_LABEL
from migops.mig.gfd import NodeGpus
from migops.mig.problems import MigError
from migops.mig.text import listed
from migops.mig.validate import STRATEGIES
from migops.webhook import checks
from migops.webhook.admission import ALLOW, Request, Verdict, allow, deny, labels, merge_warnings
from migops.webhook.findings import Warning_, split
from migops.webhook.state import Snapshot, node_view

_GPU_KEYS = (GPU_PRODUCT_LABEL, GPU_COUNT_LABEL, DEVICE_ID_LABEL)


def cache_key(req: Request) -> tuple:
    new, old = labels(req.object), labels(req.old_object)
    annotations = ((req.object or {}).get("metadata") or {}).get("annotations") or {}
    return (req.name, req.operation, new.get(MIG_CONFIG_LABEL), old.get(MIG_CONFIG_LABEL),
            tuple(new.get(k) for k in _GPU_KEYS), annotations.get(GPUS_ANNOTATION) if isinstance(annotations, dict) else None)


def validate(req: Request, snap: Snapshot) -> Verdict:
    if req.operation not in ("CREATE", "UPDATE"):
        return ALLOW
    value = labels(req.object).get(MIG_CONFIG_LABEL)
    if value is None or value == labels(req.old_object).get(MIG_CONFIG_LABEL):
        return ALLOW  # removed or unchanged
    subject = f"Node {req.name}: {MIG_CONFIG_LABEL}={value}"
    where = f"metadata.labels.\"{MIG_CONFIG_LABEL}\""
    if not isinstance(value, str):
        return deny(subject, [("label-value", f"{where}: must be a string")])
    config = snap.active_config
    if config is None:
        return deny(subject, [("configmap-missing", f"{where}: the MIG ConfigMap {snap.configmap_name} (named by the "
                               "ClusterPolicy) does not exist or has no config.yaml; mig-manager has nothing to apply")])
    if isinstance(config, MigError):
        first = config.problems[0]
        return deny(subject, [("configmap-invalid", f"{where}: the MIG ConfigMap {snap.configmap_name} is itself "
                               f"invalid ({first.path}: {first.message})")])
    names = config.names()
    if value not in names:
        near = difflib.get_close_matches(value, names, n=1)
        hint = f"; did you mean {near[0]!r}?" if near else ""
        shown = listed(names, 8)
        return deny(subject, [("config-not-found", f"{where}: no config {value!r} in {snap.configmap_name} "
                               f"(has: {shown}){hint}")])
    node = node_view(req.object or {})
    warnings: list[Warning_] = []
    strategy = snap.strategy if snap.strategy in STRATEGIES else None
    if node.gpus:
        verdict = checks.fit(config, value, NodeGpus(node.gpus, node.exact), strategy)  # type: ignore[arg-type]
        context = f"on this node: {node.describe()}"
    else:  # the text's own errors still hold; the geometry on this node cannot be checked
        why = node.gpu_problem or "the node has no GPU labels"
        warnings.append(("gpus-unknown", req.name, f"geometry not checked: {why}"))
        verdict = checks.fit(config, value, None, strategy)  # type: ignore[arg-type]
        context = ""
    findings, warns = split(verdict.problems, context)
    warnings += warns
    if findings:
        return deny(subject, findings, warnings=merge_warnings(warnings))
    return allow(merge_warnings(warnings))

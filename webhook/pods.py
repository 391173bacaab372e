"""Rules for Pods requesting MIG devices by resource name (nvidia.com/mig-<profile>).

Validation (failurePolicy Ignore: workloads never depend on the webhook being up):
- a resource no known GPU model offers (a typo such as mig-1g.10g) is denied, with the nearest name;
- under MIG strategy `single` MIG devices are advertised as nvidia.com/gpu, so a mig-<profile>
  request can never be scheduled: denied, saying what to request instead;
- when no node offers the resource right now, the Pod is admitted with a warning.

Mutation (opt-in: namespaces labelled migops.io/mig-translate=single): under `single`, a Pod asking
for one MIG profile is rewritten to ask for nvidia.com/gpu with the same count, and to select the
nodes GFD labels with that profile (nvidia.com/gpu.product=<product>-MIG-<profile>), so one workload
spec serves both strategies.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator, Mapping
from typing import Any

from migops.api.names import GPU_PRODUCT_LABEL as PRODUCT_LABEL
from migops.api.names import GPU_RESOURCE, MIG_RESOURCE_PREFIX, TRANSLATE_LABEL, TRANSLATED_ANNOTATION
from migops.mig.gfd import mig_resources, single_product
from migops.webhook.admission import ALLOW, Request, Verdict, allow, deny, escape_pointer, merge_warnings
from migops.webhook.checks import digest
from migops.webhook.findings import Finding, Warning_
from migops.webhook.state import Snapshot

_CONTAINER_LISTS = ("initContainers", "containers")


def _containers(pod: Mapping[str, Any]) -> Iterator[tuple[str, int, dict[str, Any]]]:
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return
    for kind in _CONTAINER_LISTS:
        items = spec.get(kind)
        if isinstance(items, list):
            for i, c in enumerate(items):
                if isinstance(c, dict):
                    yield kind, i, c


def _field(obj: Mapping[str, Any], key: str) -> dict[str, Any]:
    """obj[key] when it is an object, else {}: a review may hold anything there."""
    found = obj.get(key)
    return found if isinstance(found, dict) else {}


def _resources(container: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    res = container.get("resources")
    if not isinstance(res, dict):
        return {}
    return {part: res[part] for part in ("limits", "requests") if isinstance(res.get(part), dict)}


def requested(pod: Mapping[str, Any]) -> dict[str, str]:
    """MIG resources the Pod requests (limits or requests of any container) -> a quantity seen."""
    out: dict[str, str] = {}
    for _, _, c in _containers(pod):
        for values in _resources(c).values():
            for k, v in values.items():
                if isinstance(k, str) and k.startswith(MIG_RESOURCE_PREFIX):
                    out.setdefault(k, str(v))
    return out


def cache_key(req: Request) -> tuple:
    pod = req.object or {}
    spec = _field(pod, "spec")
    # Digests: bounded keys (a review may hold megabytes there), and no two pods that differ share one.
    return (
        req.operation,
        digest(repr([(k, i, c.get("resources")) for k, i, c in _containers(pod)])),
        digest(repr(spec.get("nodeSelector"))),
        digest(repr(spec.get("affinity"))),
    )


def products(resource: str, snap: Snapshot) -> list[str]:
    """Product label values of nodes that can serve `resource` under `single`: the models in the
    cluster that have the profile, else every known model that has it."""
    profile, models = mig_resources()[resource]
    present = [m for m in models if m in snap.models_present]
    return list(dict.fromkeys(single_product(m, profile) for m in (present or models)))


def validate(req: Request, snap: Snapshot) -> Verdict:
    if req.operation != "CREATE":
        return ALLOW
    wanted = requested(req.object or {})
    if not wanted:
        return ALLOW
    known = mig_resources()
    findings: list[Finding] = []
    warnings: list[Warning_] = []
    for res in wanted:
        if res not in known:
            near = difflib.get_close_matches(res, known, n=1, cutoff=0.8)
            hint = f"; did you mean {near[0]}?" if near else ""
            findings.append(("unknown-mig-resource", f"{res}: no known GPU has this MIG profile{hint}"))
    if snap.strategy == "single":
        for res, qty in wanted.items():
            if res in known:
                selector = " or ".join(f"{PRODUCT_LABEL}={p}" for p in products(res, snap)[:3])
                findings.append(
                    (
                        "strategy-single",
                        f"{res}: under MIG strategy single MIG devices are advertised "
                        f"as {GPU_RESOURCE}; request {GPU_RESOURCE}: {qty} on nodes with {selector} (or "
                        f"label the namespace {TRANSLATE_LABEL}=single to have it rewritten)",
                    )
                )
    elif not findings:
        for res in wanted:
            if res not in snap.offered:
                warnings.append(("not-offered", res, "no node offers it now; the Pod stays Pending until one does"))
    subject = f"Pod {req.namespace}/{req.name or '(generated name)'}"
    if findings:
        return deny(subject, findings, warnings=merge_warnings(warnings))
    return allow(merge_warnings(warnings))


def mutate(req: Request, snap: Snapshot) -> Verdict:
    """The single-strategy translation; no patch when it cannot be done unambiguously (validation then
    explains what to change)."""
    pod = req.object or {}
    if req.operation != "CREATE" or snap.strategy != "single":
        return ALLOW
    wanted = requested(pod)
    known = mig_resources()
    if len(wanted) != 1 or any(r not in known for r in wanted):
        return ALLOW  # nothing to do, or several profiles (one node has one MIG device type under single)
    (res,) = wanted
    resources = _resource_ops(pod, res)
    placement = _placement_ops(_field(pod, "spec"), products(res, snap))
    if resources is None or placement is None:
        return ALLOW
    ops = [*resources, *placement, _annotation_op(_field(pod, "metadata"), res)]
    return allow(merge_warnings([("mig-translated", res, f"rewritten to {GPU_RESOURCE} for MIG strategy single")]), ops)


def _resource_ops(pod: Mapping[str, Any], res: str) -> list[dict[str, Any]] | None:
    """`res` becomes nvidia.com/gpu in every container; None when one asks for whole GPUs too
    (ambiguous under single: left to validation)."""
    ops: list[dict[str, Any]] = []
    for kind, i, c in _containers(pod):
        for part, values in _resources(c).items():
            if GPU_RESOURCE in values:
                return None
            if res in values:
                base = f"/spec/{kind}/{i}/resources/{part}"
                ops.append({"op": "remove", "path": f"{base}/{escape_pointer(res)}"})
                ops.append({"op": "add", "path": f"{base}/{escape_pointer(GPU_RESOURCE)}", "value": values[res]})
    return ops


def _placement_ops(spec: Mapping[str, Any], choices: list[str]) -> list[dict[str, Any]] | None:
    """Pinned to the products that offer the profile: a nodeSelector for one, a required node affinity
    over several; None when the user's own choice stands (a product that cannot serve it: validation
    says so; their own required node affinity: not ours to rewrite)."""
    selector = spec.get("nodeSelector")
    if isinstance(selector, dict) and PRODUCT_LABEL in selector:
        return [] if selector[PRODUCT_LABEL] in choices else None
    if len(choices) == 1:
        if isinstance(selector, dict):
            return [{"op": "add", "path": f"/spec/nodeSelector/{escape_pointer(PRODUCT_LABEL)}", "value": choices[0]}]
        return [{"op": "add", "path": "/spec/nodeSelector", "value": {PRODUCT_LABEL: choices[0]}}]
    term = {"nodeSelectorTerms": [{"matchExpressions": [{"key": PRODUCT_LABEL, "operator": "In", "values": choices}]}]}
    required = "requiredDuringSchedulingIgnoredDuringExecution"
    affinity = spec.get("affinity")
    if not isinstance(affinity, dict):
        return [{"op": "add", "path": "/spec/affinity", "value": {"nodeAffinity": {required: term}}}]
    if not isinstance(affinity.get("nodeAffinity"), dict):
        return [{"op": "add", "path": "/spec/affinity/nodeAffinity", "value": {required: term}}]
    if required not in affinity["nodeAffinity"]:
        return [{"op": "add", "path": f"/spec/affinity/nodeAffinity/{required}", "value": term}]
    return None


def _annotation_op(meta: Mapping[str, Any], res: str) -> dict[str, Any]:
    """migops.io/mig-translated-from: the resource the Pod asked for."""
    if isinstance(meta.get("annotations"), dict):
        return {"op": "add", "path": f"/metadata/annotations/{escape_pointer(TRANSLATED_ANNOTATION)}", "value": res}
    return {"op": "add", "path": "/metadata/annotations", "value": {TRANSLATED_ANNOTATION: res}}

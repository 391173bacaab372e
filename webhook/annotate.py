"""The mutating side for MIG ConfigMaps: annotations that record what the webhook checked.

GitOps-safe by construction: Argo CD and Flux re-apply the same manifest on every sync, so a mutation
must leave nothing to diff. Only these annotations are written, never a field of the user's:
  migops.io/config-digest     sha256 of data."config.yaml"
  migops.io/validated-strategy  the MIG strategy it was checked under
  migops.io/validated-gpus    the PCI device IDs of the GPU models of the nodes that select its configs
                              (`catalogue` when no node does, or for a ConfigMap not in force)
An annotation the request itself sets to a new value is the user's, and left alone; an absent or
unchanged one is (re)computed, and when it already holds the computed value, no patch is sent.
"""
from __future__ import annotations

from typing import Any

from migops.webhook import checks
from migops.webhook.admission import ALLOW, Request, Verdict, allow, annotations, escape_pointer
from migops.webhook.configmaps import in_scope, payload
from migops.webhook.state import Snapshot

DIGEST_ANNOTATION = "migops.io/config-digest"
STRATEGY_ANNOTATION = "migops.io/validated-strategy"
GPUS_ANNOTATION = "migops.io/validated-gpus"
OURS = (DIGEST_ANNOTATION, STRATEGY_ANNOTATION, GPUS_ANNOTATION)


def cache_key(req: Request) -> tuple:
    new, old = annotations(req.object), annotations(req.old_object)
    return tuple((new.get(k), old.get(k)) for k in OURS)


def wanted(req: Request, snap: Snapshot) -> dict[str, str]:
    active, labelled = in_scope(req, snap)
    text, _ = payload(req.object)
    if not (active or labelled) or text is None:
        return {}
    models: set[str] = set()
    if active:
        for node in snap.nodes:
            if node.config:
                models.update(g.device_id for g in node.gpus)
    return {DIGEST_ANNOTATION: "sha256:" + checks.digest(text), STRATEGY_ANNOTATION: snap.strategy,
            GPUS_ANNOTATION: ",".join(sorted(models)) or "catalogue"}


def mutate(req: Request, snap: Snapshot) -> Verdict:
    if req.operation not in ("CREATE", "UPDATE"):
        return ALLOW
    want = wanted(req, snap)
    if not want:
        return ALLOW
    have, before = annotations(req.object), annotations(req.old_object)
    meta = (req.object or {}).get("metadata")
    ops: list[dict[str, Any]] = []
    base = {}
    for key, value in want.items():
        current = have.get(key)
        if current == value:
            continue
        if key in have and (req.operation == "CREATE" or current != before.get(key)):
            continue  # written by this request: the user's value, not ours to change
        base[key] = value
    if not base:
        return ALLOW
    if isinstance(meta, dict) and isinstance(meta.get("annotations"), dict):
        ops = [{"op": "add", "path": f"/metadata/annotations/{escape_pointer(k)}", "value": v} for k, v in base.items()]
    else:
        ops = [{"op": "add", "path": "/metadata/annotations", "value": base}]
    return allow(patch=ops)

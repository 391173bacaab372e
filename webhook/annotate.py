"""The mutating side for MIG ConfigMaps: annotations that record what the webhook checked.

GitOps-safe by construction: Argo CD and Flux re-apply the same manifest on every sync, so a mutation
must leave nothing to diff. Only these annotations are written, never a field of the user's:
  migops.io/config-digest     sha256 of data."config.yaml"
  migops.io/validated-strategy  the MIG strategy it was checked under
  migops.io/validated-gpus    the PCI device IDs of the GPU models of the nodes that select its configs
                              (`catalogue` when no node does, or for a ConfigMap not in force)
Whose an annotation is, the object itself says: the API server records in metadata.managedFields which
field manager set each field, and the webhook's own additions belong to no manager. So an annotation
that some manager owns (it is in the user's manifest, or someone edited it) is the user's and never
touched; an unowned or absent one is (re)computed, and when it already holds the computed value no
patch is sent, so the second apply of the same object changes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from migops.api.names import CONFIG_DIGEST_ANNOTATION, VALIDATED_GPUS_ANNOTATION, VALIDATED_STRATEGY_ANNOTATION
from migops.api.objects import annotations_of, managed_entries
from migops.webhook import checks, configmaps
from migops.webhook.admission import ALLOW, Request, Verdict, allow, escape_pointer
from migops.webhook.configmaps import in_scope, payload
from migops.webhook.state import Snapshot

OURS = (CONFIG_DIGEST_ANNOTATION, VALIDATED_STRATEGY_ANNOTATION, VALIDATED_GPUS_ANNOTATION)


def owned(obj: Mapping[str, Any] | None) -> frozenset[str]:
    """Annotation keys some field manager owns (fieldsV1: f:metadata -> f:annotations -> f:<key>)."""
    return frozenset(k for e in managed_entries(obj) for k in e.keys(("metadata", "annotations")))


def cache_key(req: Request) -> tuple:
    have = annotations_of(req.object)
    return tuple(have.get(k) for k in OURS), owned(req.object) & frozenset(OURS)


def mutation_key(req: Request) -> tuple:
    """What the mutation depends on in the request: the content the ConfigMap rule judges, and the
    annotations it may set."""
    return configmaps.cache_key(req), cache_key(req)


def wanted(req: Request, snap: Snapshot) -> dict[str, str]:
    active, labelled = in_scope(req, snap)
    text, _ = payload(req.object)
    if not (active or labelled) or text is None:
        return {}
    models = snap.config_models if active else frozenset()
    return {
        CONFIG_DIGEST_ANNOTATION: "sha256:" + checks.digest(text),
        VALIDATED_STRATEGY_ANNOTATION: snap.settings.strategy_text,
        VALIDATED_GPUS_ANNOTATION: ",".join(sorted(models)) or "catalogue",
    }


def mutate(req: Request, snap: Snapshot) -> Verdict:
    if req.operation not in ("CREATE", "UPDATE"):
        return ALLOW
    want = wanted(req, snap)
    if not want:
        return ALLOW
    have, theirs = annotations_of(req.object), owned(req.object)
    meta = (req.object or {}).get("metadata")
    ops: list[dict[str, Any]] = []
    base = {k: v for k, v in want.items() if k not in theirs and have.get(k) != v}
    if not base:
        return ALLOW
    if isinstance(meta, dict) and isinstance(meta.get("annotations"), dict):
        ops = [{"op": "add", "path": f"/metadata/annotations/{escape_pointer(k)}", "value": v} for k, v in base.items()]
    else:
        ops = [{"op": "add", "path": "/metadata/annotations", "value": base}]
    return allow(patch=ops)

"""Rules for Dynamic Resource Allocation objects: ResourceClaims, ResourceClaimTemplates, DeviceClasses
(resource.k8s.io/v1) whose CEL selectors pick MIG devices of NVIDIA's DRA driver.

Warnings only, never a denial (the hook's failurePolicy is Ignore too): a claim may legitimately wait
for capacity, so one that selects a MIG profile no GPU model in the cluster offers, or that no geometry
of the MIG config in force creates, is admitted with a warning naming the profile and the closest ones.
Which profiles a selector picks is migops.mig.dra's verdict (the selectors evaluated with a CEL library
against the devices the driver publishes), the same one `migops suggest` reads demand from.

The DeviceClass a claim names is not watched by the webhook: the driver's own `mig.nvidia.com` is
known; a claim naming another class is judged by its own selectors only when they name a profile.
"""

from __future__ import annotations

from typing import Any

from migops.mig import dra
from migops.mig.catalogue import catalogue
from migops.mig.spec import MigPartedConfig
from migops.webhook.admission import ALLOW, Request, Verdict, allow, merge_warnings
from migops.webhook.checks import digest
from migops.webhook.state import Snapshot

GROUP = "resource.k8s.io"
KINDS = ("ResourceClaim", "ResourceClaimTemplate", "DeviceClass")


def cache_key(req: Request) -> tuple[Any, ...]:
    obj = req.object or {}
    # What the rule reads: the kind and the spec (bounded by a digest: a spec may hold megabytes).
    return (req.operation, req.kind, digest(repr(obj.get("spec"))))


def reads(req: Request, snap: Snapshot) -> tuple[Any, ...]:
    """The GPU models present and the config in force."""
    return snap.mig.key, snap.placement.models_version


def _config(snap: Snapshot) -> MigPartedConfig | None:
    config = snap.mig.active_config
    return config if isinstance(config, MigPartedConfig) else None


def selections(req: Request) -> tuple[dra.Selection, ...]:
    obj = req.object or {}
    if req.kind == "DeviceClass":
        expressions = dra.class_expressions(obj)
        if not expressions:
            return ()
        try:
            by_model, errors, gaps = dra.evaluate(expressions, catalogue().gpus)
        except dra.CelError as exc:
            by_model, errors, gaps = (), (str(exc),), False
        return (dra.Selection("spec.selectors", "", req.name, expressions, "All", 1, by_model, errors, False, gaps),)
    claim = {**obj, "kind": req.kind}
    return dra.claim_requests(claim).selections


def validate(req: Request, snap: Snapshot) -> Verdict:
    if req.operation not in ("CREATE", "UPDATE") or req.kind not in KINDS:
        return ALLOW
    found = dra.findings(
        selections(req), sorted(snap.placement.models_present, key=lambda m: m.device_id), _config(snap)
    )
    if not found:
        return ALLOW
    return allow(merge_warnings((f.rule, f.where, f.text) for f in found))

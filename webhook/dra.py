"""Rules for Dynamic Resource Allocation objects: ResourceClaims, ResourceClaimTemplates, DeviceClasses
(resource.k8s.io/v1) whose CEL selectors pick MIG devices of NVIDIA's DRA driver.

Warnings only, never a denial (the hook's failurePolicy is Ignore too): a claim may legitimately wait
for capacity, so one that selects a MIG profile no GPU model in the cluster offers, or that no geometry
of the MIG config in force creates, is admitted with a warning naming the profile and the closest ones.
Which profiles a selector picks is migops.mig.dra's verdict (the selectors evaluated with a CEL library
against the devices the driver publishes), the same one `migops suggest` reads demand from.

The selectors are evaluated before the rule, outside the state's lock, by the worker's bounded
evaluator process (migops.sandbox.evaluator): the rule only reads its answer, or the bound it hit.

The DeviceClass a claim names is not watched by the webhook: the driver's own `mig.nvidia.com` and
migops's per-profile `mig-<profile>.nvidia.com` are known by name (migops.mig.dra.own_classes, the
definitions `migops local up --dra` installs), so a request whose selectors ask for another profile
than its class's is warned `dra-selects-nothing`; a claim naming another class gets no verdict (its
selectors are unknown here).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from migops.mig import dra
from migops.mig.spec import MigPartedConfig
from migops.sandbox.evaluator import Bound
from migops.webhook.admission import ALLOW, Request, Verdict, allow, merge_warnings
from migops.webhook.checks import digest
from migops.webhook.state import Snapshot

GROUP = "resource.k8s.io"
KINDS = ("ResourceClaim", "ResourceClaimTemplate", "DeviceClass")

# What the evaluator answers for a DRA object: what its selectors select, or the bound it hit.
Judged = tuple[dra.Selection, ...] | Bound
Judge = Callable[[str, str, Any], Judged]


def cache_key(req: Request) -> tuple[Any, ...]:
    obj = req.object or {}
    # What the rule reads: the kind and the spec (bounded by a digest: a spec may hold megabytes).
    return (req.operation, req.kind, digest(repr(obj.get("spec"))))


def prefetch(req: Request, snap: Snapshot, judge: Judge) -> Judged | None:
    """The selectors' verdict, from the evaluator (outside the lock); None when the rule needs none."""
    if req.operation not in ("CREATE", "UPDATE") or req.kind not in KINDS:
        return None
    return judge(req.kind, req.name, req.object or {})


def reads(req: Request, snap: Snapshot, judged: Judged | None = None) -> tuple[Any, ...]:
    """The GPU models present and the config in force; a busy evaluator's answer is never cached (the
    review's uid), one past the time or memory bound is (the same object would pass it again)."""
    busy = req.uid if isinstance(judged, Bound) and judged.which == "busy" else ""
    return snap.mig.key, snap.summary.models_version, busy


def _config(snap: Snapshot) -> MigPartedConfig | None:
    config = snap.mig.active_config
    return config if isinstance(config, MigPartedConfig) else None


def validate(req: Request, snap: Snapshot, judged: Judged | None = None) -> Verdict:
    if judged is None:
        return ALLOW
    if isinstance(judged, Bound):
        where = "spec.selectors" if req.kind == "DeviceClass" else "spec"
        return allow(merge_warnings([("dra-selector-error", where, judged.text)]))
    found = dra.findings(judged, sorted(snap.models_present, key=lambda m: m.device_id), _config(snap))
    if not found:
        return ALLOW
    return allow(merge_warnings((f.rule, f.where, f.text) for f in found))

"""The MigSync custom resource: its CRD, its spec (what to sync) and the status a person reads.

Conditions follow kstatus as Flux uses it: `Ready` (True when the revision is applied and every node
is in sync; Unknown while rolling out; False on a failure, with the reason), `Reconciling` (True while
a rollout is under way), `Stalled` (True when nothing will move without a person: an invalid or
unverified commit, a halted rollout, a refused write). Each has reason, message, observedGeneration
and a lastTransitionTime that changes only when the status does.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import resources
from typing import Any

from kubernetes import client as k8s

# The API names, defined in migops.api.migsync (the webhook reads them there); re-exported for the reconciler.
from migops.api.migsync import API_VERSION, KIND
from migops.api.migsync import CRD_NAME as CRD_NAME
from migops.api.migsync import GROUP as GROUP
from migops.api.migsync import PLURAL as PLURAL
from migops.api.migsync import VERSION as VERSION
from migops.gitops.verify import TrustPolicy
from migops.kube import crds
from migops.mig.yamlsafe import load_yaml
from migops.reconciler.plan import DRIFTED, FAILED, IN_SYNC, PROGRESSING, SKIPPED, WAITING, Plan

DEFAULT_NAME, DEFAULT_NAMESPACE = "migops", "migops-system"
MAX_STATUS_NODES = 1000  # keeps the object far below etcd's request limit at 10,000 nodes
DEFAULT_INTERVAL = 60.0
DEFAULT_SUGGEST_INTERVAL = 300.0  # spec.suggest.interval: a proposal costs a list of every pod, and seconds of solving
_DURATION = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def crd() -> dict[str, Any]:
    text = resources.files("migops.reconciler").joinpath("data/migsync-crd.yaml").read_text()
    return load_yaml(text)  # type: ignore[return-value]


def install_crd(api: k8s.ApiClient, *, field_manager: str, timeout: float = 30.0) -> None:
    """Apply the CRD and wait until it is Established."""
    crds.install(api, [crd()], field_manager=field_manager, timeout=timeout)


def parse_duration(text: str | float | int | None, default: float = DEFAULT_INTERVAL) -> float:
    """Go-style durations as Flux writes them: 60s, 5m, 1h30m, 500ms."""
    if text is None or text == "":
        return default
    if isinstance(text, (int, float)):
        return float(text)
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"interval {text!r} is not a duration such as 60s, 5m or 1h")
    return sum(float(n) * _UNITS[u] for n, u in parts)


@dataclass(frozen=True)
class SyncSpec:
    """What to sync: a MigSync's spec, or the command line's flags."""

    url: str
    ref: str | None = None
    path: str = ""
    interval: float = DEFAULT_INTERVAL
    suspend: bool = False
    trust: TrustPolicy = field(default_factory=TrustPolicy)
    suggest: bool = False  # spec.suggest.enabled: publish `migops suggest`'s proposal (never applied)
    suggest_interval: float = DEFAULT_SUGGEST_INTERVAL

    def to_spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = {"url": self.url, "interval": f"{self.interval:g}s"}
        if self.ref:
            spec["ref"] = self.ref
        if self.path:
            spec["path"] = self.path
        if self.suspend:
            spec["suspend"] = True
        if self.suggest:
            spec["suggest"] = {"enabled": True, "interval": f"{self.suggest_interval:g}s"}
        if self.trust.enabled:
            spec["verify"] = {"mode": self.trust.mode}
            if self.trust.allowed_signers:
                spec["verify"]["allowedSigners"] = self.trust.allowed_signers
            if self.trust.openpgp_keys:
                spec["verify"]["openpgpKeys"] = list(self.trust.openpgp_keys)
        return spec


def spec_from_object(obj: Mapping[str, Any]) -> SyncSpec:
    """A MigSync object's spec; raises ValueError naming the field."""
    spec = obj.get("spec") or {}
    verify = spec.get("verify") or {}
    try:
        trust = TrustPolicy(
            verify.get("mode") or "none", verify.get("allowedSigners") or "", tuple(verify.get("openpgpKeys") or ())
        )
    except ValueError as exc:
        raise ValueError(f"spec.verify: {exc}") from None
    try:
        interval = parse_duration(spec.get("interval"))
    except ValueError as exc:
        raise ValueError(f"spec.interval: {exc}") from None
    if not spec.get("url"):
        raise ValueError("spec.url: a repository URL is required")
    suggest = spec.get("suggest") or {}
    try:
        every = parse_duration(suggest.get("interval")) if suggest.get("interval") else DEFAULT_SUGGEST_INTERVAL
    except ValueError as exc:
        raise ValueError(f"spec.suggest.interval: {exc}") from None
    return SyncSpec(
        spec["url"],
        spec.get("ref") or None,
        spec.get("path") or "",
        interval,
        bool(spec.get("suspend")),
        trust,
        bool(suggest.get("enabled")),
        every,
    )


def migsync_object(name: str, namespace: str, spec: SyncSpec) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec.to_spec(),
    }


# ------------------------------------------------------------------------------------------ conditions


@dataclass(frozen=True)
class Condition:
    type: str
    status: str  # True, False, Unknown
    reason: str
    message: str = ""


def merge_conditions(
    old: Sequence[Mapping[str, Any]], new: Sequence[Condition], generation: int | None
) -> list[dict[str, Any]]:
    """New conditions, keeping lastTransitionTime where the status did not change."""
    before = {c.get("type"): c for c in old}
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    out = []
    for c in new:
        prev = before.get(c.type)
        when = prev.get("lastTransitionTime") if prev and prev.get("status") == c.status else now
        item: dict[str, Any] = {
            "type": c.type,
            "status": c.status,
            "reason": c.reason,
            "message": c.message[:32768],
            "lastTransitionTime": when or now,
        }
        if generation is not None:
            item["observedGeneration"] = generation
        out.append(item)
    return out


def summary(plan: Plan | None) -> dict[str, Any]:
    if plan is None:
        return {}
    total = len(plan.nodes)
    return {
        "inSync": f"{plan.counts.get(IN_SYNC, 0)}/{total}",
        "total": total,
        "progressing": plan.counts.get(PROGRESSING, 0),
        "waiting": plan.counts.get(WAITING, 0),
        "failed": plan.counts.get(FAILED, 0),
        "drifted": plan.counts.get(DRIFTED, 0),
        "skipped": plan.counts.get(SKIPPED, 0),
        "maxUnavailable": plan.max_unavailable,
    }


_ORDER = {FAILED: 0, DRIFTED: 1, PROGRESSING: 2, WAITING: 3, IN_SYNC: 4, SKIPPED: 5}


def node_entries(plan: Plan | None) -> list[dict[str, Any]]:
    """Per node, those needing attention first, capped at MAX_STATUS_NODES."""
    if plan is None:
        return []
    ranked = sorted(plan.nodes, key=lambda s: (_ORDER[s.phase], s.name))[:MAX_STATUS_NODES]
    out = []
    for s in ranked:
        entry: dict[str, Any] = {"name": s.name, "config": s.config, "phase": s.phase, "state": s.state}
        if s.revision:
            entry["revision"] = s.revision
        if s.message:
            entry["message"] = s.message[:1024]
        out.append(entry)
    return out

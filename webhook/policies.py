"""Rules for the GPU Operator's ClusterPolicy (nvidia.com/v1).

- spec.mig.strategy is none, single or mixed;
- a strategy change is denied while a node runs a config that is invalid under the new strategy
  (switching to `single` with a node on a multi-profile config such as all-balanced), naming the nodes;
- migManager.enabled: true needs repository, image and version (the mig-manager image is the user's
  mirror, and its tag must match what was mirrored exactly: no default is guessed).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from migops.kube.clusterpolicy import DEFAULT_STRATEGY
from migops.mig.problems import MigError
from migops.mig.validate import STRATEGIES
from migops.webhook import checks
from migops.webhook.admission import ALLOW, Request, Verdict, allow, deny
from migops.webhook.findings import Finding, node_names
from migops.webhook.state import NodeSample, NodeView, Snapshot

_IMAGE_FIELDS = ("repository", "image", "version")


def _spec(obj: Mapping[str, Any] | None) -> dict[str, Any]:
    spec = (obj or {}).get("spec")
    return spec if isinstance(spec, dict) else {}


def _part(spec: Mapping[str, Any], name: str) -> dict[str, Any]:
    part = spec.get(name)
    return part if isinstance(part, dict) else {}


def strategy_of(obj: Mapping[str, Any] | None) -> object:
    return _part(_spec(obj), "mig").get("strategy", DEFAULT_STRATEGY)


def cache_key(req: Request) -> tuple:
    new, old = _spec(req.object), _spec(req.old_object)
    # Digests: bounded keys whatever the spec holds, and no two specs that differ share one.
    return (req.name, req.operation, checks.digest(repr(_part(new, "mig"))), checks.digest(repr(_part(new, "migManager"))),
            checks.digest(repr(_part(old, "mig"))))


def validate(req: Request, snap: Snapshot) -> Verdict:
    if req.operation not in ("CREATE", "UPDATE"):
        return ALLOW
    spec = _spec(req.object)
    subject = f"ClusterPolicy {req.name}"
    findings: list[Finding] = []
    strategy = strategy_of(req.object)
    if strategy not in STRATEGIES:
        findings.append(("invalid-strategy", f"spec.mig.strategy: {strategy!r} is not one of none, single, mixed"))
    manager = _part(spec, "migManager")
    if manager.get("enabled") is True:
        missing = [f for f in _IMAGE_FIELDS if not (isinstance(manager.get(f), str) and manager.get(f).strip())]
        if missing:
            findings.append(("mig-manager-image", f"spec.migManager: enabled, but {', '.join(missing)} "
                             f"{'is' if len(missing) == 1 else 'are'} not set; give the mig-manager image you "
                             "mirrored (repository, image and the exact version tag)"))
    before = strategy_of(req.old_object) if req.operation == "UPDATE" else None
    if strategy in STRATEGIES and strategy != before:
        findings += _switch(str(strategy), snap)
    return deny(subject, findings) if findings else allow()


def _switch(strategy: str, snap: Snapshot) -> list[Finding]:
    """Nodes whose current config becomes invalid under `strategy` (strategy-mismatch findings)."""
    config = snap.active_config
    if config is None or isinstance(config, MigError):
        return []
    broken: dict[str, list[tuple[NodeView, ...]]] = {}
    reasons: dict[str, tuple[str, str]] = {}  # config -> (first broken node's name, its reason)
    names = set(config.names())
    for name in snap.users:
        if name not in names:
            continue
        for ids, exact, members in snap.groups(name):  # the nodes judged alike, checked once
            if not exact or not ids:
                continue
            report = checks.on_node(config, name, members[0].gpus, strategy)  # type: ignore[arg-type]
            mismatch = [p for p in report.problems if p.rule == "strategy-mismatch" and p.severity == "error"]
            if mismatch:
                broken.setdefault(name, []).append(members)
                if name not in reasons or members[0].name < reasons[name][0]:
                    reasons[name] = (members[0].name, mismatch[0].message)
    return [("strategy-mismatch", f"spec.mig.strategy: {strategy} would break {node_names(NodeSample(groups))} "
             f"(nvidia.com/mig.config={name}: {reasons[name][1]}); relabel them first")
            for name, groups in sorted(broken.items())]

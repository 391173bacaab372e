"""Rules for the GPU Operator's ClusterPolicy (nvidia.com/v1).

- spec.mig.strategy is none, single or mixed;
- a strategy change is denied while a node runs a config that is invalid under the new strategy
  (switching to `single` with a node on a multi-profile config such as all-balanced), naming the nodes;
- a switch to another MIG ConfigMap (spec.migManager.config.name, in the operator's namespace) is
  judged like a change of the ConfigMap in force: it must exist, hold data."config.yaml", parse, and
  serve every node's nvidia.com/mig.config under the (new) strategy (webhook/configmaps.judge);
- migManager.enabled: true needs repository, image and version (the mig-manager image is the user's
  mirror, and its tag must match what was mirrored exactly: no default is guessed).

The switch target is not in the informers' Snapshot (only the ConfigMap in force is watched), so it is
read with one GET when a review asks for a switch (rare: a person changes the ClusterPolicy), and such
a review's verdict is never cached (its key holds the review's uid): the ConfigMap may change in between.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from migops.kube.clusterpolicy import DEFAULT_STRATEGY, settings_from_policies
from migops.kube.names import MIG_CONFIG_LABEL
from migops.mig.gfd import NodeGpus
from migops.mig.problems import MigError
from migops.mig.validate import STRATEGIES
from migops.webhook import checks, configmaps
from migops.webhook.admission import ALLOW, Request, Verdict, allow, deny, merge_warnings
from migops.webhook.findings import Finding, Warning_, node_names, split
from migops.webhook.state import NodeSample, NodeView, Snapshot

log = logging.getLogger(__name__)

# (namespace, name) -> the ConfigMap object, None when it does not exist; raises when it cannot tell.
ReadConfigMap = Callable[[str, str], Mapping[str, Any] | None]

_IMAGE_FIELDS = ("repository", "image", "version")


def _spec(obj: Mapping[str, Any] | None) -> dict[str, Any]:
    spec = (obj or {}).get("spec")
    return spec if isinstance(spec, dict) else {}


def _part(spec: Mapping[str, Any], name: str) -> dict[str, Any]:
    part = spec.get(name)
    return part if isinstance(part, dict) else {}


def _given(value: object) -> bool:
    """A field set to a non-blank string."""
    return isinstance(value, str) and bool(value.strip())


def strategy_of(obj: Mapping[str, Any] | None) -> object:
    return _part(_spec(obj), "mig").get("strategy", DEFAULT_STRATEGY)


def target_of(obj: Mapping[str, Any] | None) -> tuple[str, str]:
    """(namespace, name) of the MIG ConfigMap this ClusterPolicy names (defaults as the operator's)."""
    return settings_from_policies([obj] if isinstance(obj, Mapping) else []).configmap


def cache_key(req: Request) -> tuple:
    new, old = _spec(req.object), _spec(req.old_object)
    # A review that may switch the ConfigMap is judged on a ConfigMap read now: never from the cache.
    switch = req.uid if req.operation == "CREATE" or target_of(req.object) != target_of(req.old_object) else ""
    # Digests: bounded keys whatever the spec holds, and no two specs that differ share one.
    return (
        req.name,
        req.operation,
        checks.digest(repr(_part(new, "mig"))),
        checks.digest(repr(_part(new, "migManager"))),
        checks.digest(repr(_part(old, "mig"))),
        switch,
    )


def validate(req: Request, snap: Snapshot, read: ReadConfigMap | None = None) -> Verdict:
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
        missing = [f for f in _IMAGE_FIELDS if not _given(manager.get(f))]
        if missing:
            findings.append(
                (
                    "mig-manager-image",
                    f"spec.migManager: enabled, but {', '.join(missing)} "
                    f"{'is' if len(missing) == 1 else 'are'} not set; give the mig-manager image you "
                    "mirrored (repository, image and the exact version tag)",
                )
            )
    warnings: list[Warning_] = []
    target = target_of(req.object)
    before = strategy_of(req.old_object) if req.operation == "UPDATE" else None
    if target != snap.settings.configmap:
        errors, warnings = _switch_configmap(target, str(strategy), snap, read)
        findings += errors
    elif strategy in STRATEGIES and strategy != before:
        findings += _switch(str(strategy), snap)
    if findings:
        return deny(subject, findings, warnings=merge_warnings(warnings))
    return allow(merge_warnings(warnings))


def _switch_configmap(
    target: tuple[str, str], strategy: str, snap: Snapshot, read: ReadConfigMap | None
) -> tuple[list[Finding], list[Warning_]]:
    """The ConfigMap the policy switches to, judged as the ConfigMap in force would be."""
    namespace, name = target
    where = f"spec.migManager.config.name: ConfigMap {namespace}/{name}"
    if read is None:
        return [
            ("configmap-unreadable", f"{where}: this webhook cannot read ConfigMaps, so the switch cannot be checked")
        ], []
    try:
        obj = read(namespace, name)
    except Exception as exc:  # noqa: BLE001 - any failure to read is a denial that says why, not a 500
        log.warning("reading ConfigMap %s/%s for a ClusterPolicy switch: %s", namespace, name, exc)
        reason = getattr(exc, "reason", None) or type(exc).__name__
        return [("configmap-unreadable", f"{where}: cannot be read to check the switch ({reason})")], []
    if obj is None:
        return [
            (
                "configmap-missing",
                f"{where}: does not exist; mig-manager would have no config to apply (create it first, then switch)",
            )
        ], []
    text, problems = configmaps.payload(obj)
    if text is None or problems:
        return [(rule, f"{where}: {line}") for rule, line in problems], []
    try:
        config = checks.parse(text)
    except MigError as exc:
        return [(rule, f"{where}: {line}") for rule, line in split(exc.problems)[0]], []
    names = set(config.names())
    findings = [
        (
            "config-not-found",
            f"{where}: has no config {config_name!r}, which {node_names(nodes)} "
            f"select ({MIG_CONFIG_LABEL}); add it or relabel them first",
        )
        for config_name, nodes in sorted(snap.users.items())
        if config_name not in names
    ]
    errors, warnings = configmaps.judge(config, snap.users, snap, strategy)
    return findings + [(rule, f"{where}: {line}") for rule, line in errors], warnings


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
            verdict = checks.fit(config, name, NodeGpus(members[0].gpus, True), strategy)  # type: ignore[arg-type]
            mismatch = [p for p in verdict.errors if p.rule == "strategy-mismatch"]
            if mismatch:
                broken.setdefault(name, []).append(members)
                if name not in reasons or members[0].name < reasons[name][0]:
                    reasons[name] = (members[0].name, mismatch[0].message)
    return [
        (
            "strategy-mismatch",
            f"spec.mig.strategy: {strategy} would break {node_names(NodeSample(groups))} "
            f"(nvidia.com/mig.config={name}: {reasons[name][1]}); relabel them first",
        )
        for name, groups in sorted(broken.items())
    ]

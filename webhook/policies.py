"""Rules for the GPU Operator's ClusterPolicy (nvidia.com/v1): every write that can change the MIG
strategy or the MIG ConfigMap in force is reviewed, whichever way it comes.

- spec.mig.strategy is none, single or mixed;
- a strategy change is denied while a node runs a config that is invalid under the new strategy
  (switching to `single` with a node on a multi-profile config such as all-balanced), naming the nodes;
- a switch to another MIG ConfigMap is judged like a change of the ConfigMap in force: it must exist,
  hold data."config.yaml", parse, and serve every node's nvidia.com/mig.config under the (new)
  strategy (webhook/configmaps.judge). A switch comes three ways: spec.migManager.config.name,
  status.namespace (the operator's namespace, where the ConfigMap is read: the `status` subresource,
  registered for writes that change it), and deleting the ClusterPolicy in force (the next oldest, or
  the GPU Operator's defaults: strategy single, gpu-operator/default-mig-parted-config, take over);
- while a MigSync exists, the ConfigMap in force holds git's config.yaml (the reconciler writes it): a
  switch to a ConfigMap with other content would re-partition the managed nodes to a geometry that is
  not in git, and is denied [git-owned] (content-identical switches are admitted);
- migManager.enabled: true needs repository, image and version (the mig-manager image is the user's
  mirror, and its tag must match what was mirrored exactly: no default is guessed).

The switch target is not in the informers' Snapshot (only the ConfigMap in force is watched), so it is
read with one GET when a review asks for a switch (rare: a person changes the ClusterPolicy), and such
a review's verdict is never cached (its key holds the review's uid): the ConfigMap may change in between.
A DELETE is never cached either: what takes over depends on the other ClusterPolicies.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from migops.api import objects
from migops.api.migsync import NODES_FILE
from migops.api.names import MIG_CONFIG_LABEL
from migops.api.objects import DEFAULT_STRATEGY, MigSettings, NodeFacts, settings_from_policies
from migops.mig.gfd import NodeGpus
from migops.mig.problems import MigError
from migops.mig.strategy import STRATEGIES, Strategy
from migops.webhook import checks, configmaps
from migops.webhook.admission import ALLOW, Request, Verdict, allow, deny, merge_warnings
from migops.webhook.findings import Finding, Warning_, node_names, split
from migops.webhook.state import NodeSample, Snapshot

log = logging.getLogger(__name__)

# (namespace, name) -> the ConfigMap object, None when it does not exist; raises when it cannot tell.
ReadConfigMap = Callable[[str, str], Mapping[str, Any] | None]
# What prefetch read: (the switch target, the ConfigMap, None when absent, or why it could not be read).
Fetched = tuple[tuple[str, str], Mapping[str, Any] | None | Exception]

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


def _shape(obj: Mapping[str, Any]) -> dict[str, Any]:
    """What settings_from_policies reads, with every part of the wrong type read as absent (a review
    may hold anything there; the API server's schema stops most of it first)."""
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    spec = _spec(obj)
    manager = _part(spec, "migManager")
    status = obj.get("status")
    status = status if isinstance(status, dict) else {}
    strings = {k: v for k, v in _part(manager, "config").items() if isinstance(v, str)}
    namespace = status.get("namespace")
    return {
        "metadata": {k: meta.get(k) for k in ("name", "creationTimestamp") if isinstance(meta.get(k), str)},
        "spec": {"mig": _part(spec, "mig"), "migManager": {"config": strings}},
        "status": {"namespace": namespace} if isinstance(namespace, str) else {},
    }


def target_of(obj: Mapping[str, Any] | None) -> tuple[str, str]:
    """(namespace, name) of the MIG ConfigMap this ClusterPolicy names (defaults as the operator's)."""
    return settings_from_policies([_shape(obj)] if isinstance(obj, Mapping) else []).configmap


def after(req: Request, snap: Snapshot) -> MigSettings:
    """The settings in force once this write lands: the oldest ClusterPolicy's, with this one written
    (CREATE, UPDATE of spec or status) or gone (DELETE). Without the other policies (a Snapshot built
    without them) the one written is taken to be the one in force."""
    others = [_shape(p) for p in snap.policies if (objects.meta(p).get("name")) != req.name]
    if req.operation == "DELETE":
        return settings_from_policies(others)
    return settings_from_policies([*others, _shape(req.object or {})])


def cache_key(req: Request) -> tuple:
    new, old = _spec(req.object), _spec(req.old_object)
    # A review that may switch the ConfigMap is judged on a ConfigMap read now: never from the cache;
    # nor a DELETE (what takes over depends on the other ClusterPolicies).
    switch = (
        req.uid if req.operation in ("CREATE", "DELETE") or target_of(req.object) != target_of(req.old_object) else ""
    )
    # Digests: bounded keys whatever the spec holds, and no two specs that differ share one.
    return (
        req.name,
        req.operation,
        req.sub_resource,
        checks.digest(repr(_part(new, "mig"))),
        checks.digest(repr(_part(new, "migManager"))),
        checks.digest(repr(_part(old, "mig"))),
        switch,
    )


def _fields(req: Request) -> tuple[str, str]:
    """How the denial names the change: (of the ConfigMap, of the strategy)."""
    if req.operation == "DELETE":
        gone = f"deleting ClusterPolicy {req.name} (what takes over: the next oldest ClusterPolicy, else the GPU Operator's defaults)"
        return gone, gone
    if req.sub_resource == "status":
        return "status.namespace", "status"
    return "spec.migManager.config.name", "spec.mig.strategy"


def prefetch(req: Request, snap: Snapshot, read: ReadConfigMap | None) -> Fetched | None:
    """A switch to another MIG ConfigMap than the one in force: read it now (before the rule, unlocked).
    None when there is no switch, or no way to read ConfigMaps (the rule then denies the switch)."""
    if read is None or req.operation not in ("CREATE", "UPDATE", "DELETE"):
        return None
    target = after(req, snap).configmap
    if target == snap.settings.configmap:
        return None
    try:
        return target, read(*target)
    except Exception as exc:  # noqa: BLE001 - the rule turns it into a denial that says why
        return target, exc


def validate(req: Request, snap: Snapshot, fetched: Fetched | None = None) -> Verdict:
    """`fetched`: the switch target as prefetch read it (None: this webhook cannot read ConfigMaps)."""
    if req.operation not in ("CREATE", "UPDATE", "DELETE"):
        return ALLOW
    if req.operation == "DELETE" and snap.settings.policy not in (None, req.name):
        return ALLOW  # the operator ignores all but the oldest ClusterPolicy: nothing changes
    subject = f"ClusterPolicy {req.name}"
    findings: list[Finding] = []
    if req.operation != "DELETE" and req.sub_resource != "status":  # a status write keeps the spec
        strategy = strategy_of(req.object)
        if strategy not in STRATEGIES:
            findings.append(("invalid-strategy", f"spec.mig.strategy: {strategy!r} is not one of none, single, mixed"))
        manager = _part(_spec(req.object), "migManager")
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
    owned: list[Finding] = []
    new = after(req, snap)
    configmap_field, strategy_field = _fields(req)
    if new.configmap != snap.settings.configmap:
        errors, warnings, text = _switch_configmap(new.configmap, new.strategy, snap, fetched, configmap_field)
        findings += errors
        owned = _git_owned(req, snap, new.configmap, text, configmap_field)
    elif new.strategy is not None and new.strategy != snap.strategy:
        findings += _switch(new.strategy, snap, strategy_field)
    if owned:  # with what else is wrong, so one answer says everything
        return deny(subject, owned + findings, code=403, reason="Forbidden", warnings=merge_warnings(warnings))
    if findings:
        return deny(subject, findings, warnings=merge_warnings(warnings))
    return allow(merge_warnings(warnings))


def _git_owned(req: Request, snap: Snapshot, target: tuple[str, str], text: str | None, field: str) -> list[Finding]:
    """While a MigSync exists, the ConfigMap in force holds git's config.yaml (the reconciler writes
    it): a switch to other content would give the nodes it manages a geometry that is not in git."""
    if not snap.migsyncs or req.username in snap.reconciler_users:
        return []
    if text is not None and text == snap.active_text:
        return []  # the same content: nothing any node runs changes
    key = sorted(snap.migsyncs)[0]
    sync = snap.migsyncs[key]
    where = f"{sync.path}/{NODES_FILE}" if sync.path else NODES_FILE
    more = f" (and {len(snap.migsyncs) - 1} more)" if len(snap.migsyncs) > 1 else ""
    namespace, name = target
    return [
        (
            "git-owned",
            f"{field}: the MIG ConfigMap in force, {snap.configmap_name}, holds the config.yaml MigSync "
            f"{key}{more} applies from git ({sync.url}); ConfigMap {namespace}/{name} holds another, so "
            f"this switch would re-partition the nodes it manages to a geometry that is not in git (not by "
            f"{req.username or 'this user'}); to move the config, set configMap in {where} so the reconciler "
            "writes git's config.yaml there, then switch; or delete the MigSync first",
        )
    ]


def _switch_configmap(
    target: tuple[str, str], strategy: Strategy | None, snap: Snapshot, fetched: Fetched | None, field: str
) -> tuple[list[Finding], list[Warning_], str | None]:
    """The ConfigMap the policy switches to, judged as the ConfigMap in force would be; and its
    config.yaml (None when it has none)."""
    namespace, name = target
    where = f"{field}: ConfigMap {namespace}/{name}"
    if fetched is None:
        return (
            [
                (
                    "configmap-unreadable",
                    f"{where}: this webhook cannot read ConfigMaps, so the switch cannot be checked",
                )
            ],
            [],
            None,
        )
    obj = fetched[1] if fetched[0] == target else RuntimeError("the switch target was not read before the review")
    if isinstance(obj, Exception):  # any failure to read is a denial that says why, not a 500
        log.warning("reading ConfigMap %s/%s for a ClusterPolicy switch: %s", namespace, name, obj)
        reason = getattr(obj, "reason", None) or type(obj).__name__
        return [("configmap-unreadable", f"{where}: cannot be read to check the switch ({reason})")], [], None
    if obj is None:
        return (
            [
                (
                    "configmap-missing",
                    f"{where}: does not exist; mig-manager would have no config to apply (create it first, then switch)",
                )
            ],
            [],
            None,
        )
    text, problems = configmaps.payload(obj)
    if text is None or problems:
        return [(rule, f"{where}: {line}") for rule, line in problems], [], text
    try:
        config = checks.parse(text)
    except MigError as exc:
        return [(rule, f"{where}: {line}") for rule, line in split(exc.problems)[0]], [], text
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
    return findings + [(rule, f"{where}: {line}") for rule, line in errors], warnings, text


def _switch(strategy: Strategy, snap: Snapshot, field: str = "spec.mig.strategy") -> list[Finding]:
    """Nodes whose current config becomes invalid under `strategy` (strategy-mismatch findings)."""
    config = snap.active_config
    if config is None or isinstance(config, MigError):
        return []
    broken: dict[str, list[tuple[NodeFacts, ...]]] = {}
    reasons: dict[str, tuple[str, str]] = {}  # config -> (first broken node's name, its reason)
    names = set(config.names())
    for name in snap.users:
        if name not in names:
            continue
        for ids, exact, members in snap.groups(name):  # the nodes judged alike, checked once
            if not exact or not ids:
                continue
            verdict = checks.fit(config, name, NodeGpus(members[0].gpus, True), strategy)
            mismatch = [p for p in verdict.errors if p.rule == "strategy-mismatch"]
            if mismatch:
                broken.setdefault(name, []).append(members)
                if name not in reasons or members[0].name < reasons[name][0]:
                    reasons[name] = (members[0].name, mismatch[0].message)
    return [
        (
            "strategy-mismatch",
            f"{field}: {strategy} would break {node_names(NodeSample(groups))} "
            f"(nvidia.com/mig.config={name}: {reasons[name][1]}); relabel them first",
        )
        for name, groups in sorted(broken.items())
    ]

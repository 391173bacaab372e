"""Rules for MIG config ConfigMaps: the one the ClusterPolicy names, and any labelled migops.io/mig-config=true.

- The content must parse (mig-parted's rules, with paths) and each named config must be placeable:
  on the GPUs of the nodes whose nvidia.com/mig.config names it, under the cluster's MIG strategy
  (node mode, with the errors of the text itself: `migops.mig.fit`); a config no node uses must fit
  at least one known GPU model (catalogue mode).
- A config that fits only some models is admitted with a warning naming the nodes it cannot serve.
- In the ConfigMap in force, removing a config that a node's label names is denied, naming the nodes;
  so is deleting that ConfigMap while any node selects a config from it.
- While a MigSync (not suspended) exists, the ConfigMap in force holds git's config.yaml (the reconciler
  writes it): a change of its content, of the label that makes it a MIG config, or its deletion, by
  anyone but the reconciler's identities is denied [git-owned], naming the MigSync and the file to
  change; unless the ConfigMap is labelled migops.io/unmanaged=true (after the write; before it, for a
  deletion), which the reconciler honours too: it never writes such a ConfigMap. Without a MigSync
  (the webhook alone, the ConfigMap synced by Flux or Argo CD) nothing of this applies.
A labelled ConfigMap that is not in force (one prepared for a later switch) is checked against the
catalogue only: no node uses it yet.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from migops.api.migsync import CONFIG_FILE
from migops.api.names import CONFIGMAP_KEY, MIG_CONFIG_LABEL, MIG_CONFIGMAP_LABEL, UNMANAGED_LABEL
from migops.api.objects import NodeFacts, is_unmanaged, labels
from migops.mig.gfd import NodeGpus
from migops.mig.problems import MigError, key_path
from migops.mig.spec import MigPartedConfig
from migops.mig.strategy import Strategy
from migops.mig.text import listed
from migops.webhook import checks
from migops.webhook.admission import ALLOW, Request, Verdict, allow, deny, merge_warnings
from migops.webhook.findings import Finding, Warning_, node_names, split
from migops.webhook.state import MigSyncRef, Snapshot


def in_scope(req: Request, snap: Snapshot) -> tuple[bool, bool]:
    """(in force, labelled): is this the ConfigMap the ClusterPolicy names, does it carry our label."""
    obj = req.old_object if req.operation == "DELETE" else req.object
    active = (req.namespace, req.name) == snap.settings.configmap
    return active, labels(obj).get(MIG_CONFIGMAP_LABEL) == "true"


def payload(obj: Mapping[str, Any] | None) -> tuple[str | None, list[Finding]]:
    """The config text under data."config.yaml", or the findings that say why there is none."""
    obj = obj or {}
    findings: list[Finding] = []
    binary = obj.get("binaryData")
    if isinstance(binary, dict) and CONFIGMAP_KEY in binary:
        findings.append(
            (
                "configmap-binary-data",
                f"binaryData.{CONFIGMAP_KEY}: mig-manager reads the config as "
                f"text; put it under data.\"{CONFIGMAP_KEY}\"",
            )
        )
    data = obj.get("data")
    if not isinstance(data, dict) or CONFIGMAP_KEY not in data:
        keys = listed(sorted(map(str, data)), 10) if isinstance(data, dict) and data else "none"
        findings.append(
            (
                "configmap-key",
                f"data.\"{CONFIGMAP_KEY}\": missing (keys: {keys}); the GPU Operator's "
                "mig-manager reads the config from that key",
            )
        )
        return None, findings
    text = data[CONFIGMAP_KEY]
    if not isinstance(text, str):
        findings.append(("configmap-key", f"data.\"{CONFIGMAP_KEY}\": must be a string holding the YAML config"))
        return None, findings
    return text, findings


def _text_key(obj: Mapping[str, Any] | None) -> str:
    data = (obj or {}).get("data")
    text = data.get(CONFIGMAP_KEY) if isinstance(data, dict) else None
    if isinstance(text, str):
        return checks.digest(text)
    return "none:" + (
        checks.digest(",".join(sorted(map(str, data)))) if isinstance(data, dict) else type(data).__name__
    )


def cache_key(req: Request) -> tuple:
    """What a verdict depends on besides the cluster state (the uid and dryRun never matter)."""
    obj = req.old_object if req.operation == "DELETE" else req.object
    binary = (obj or {}).get("binaryData")
    new = _text_key(obj)
    old = ""
    if req.operation == "UPDATE":  # a re-apply sends the same text twice: hash it once
        old = "same" if _text(obj) is not None and _text(obj) == _text(req.old_object) else _text_key(req.old_object)
    return (
        req.namespace,
        req.name,
        req.operation,
        labels(obj).get(MIG_CONFIGMAP_LABEL),
        labels(req.old_object).get(MIG_CONFIGMAP_LABEL),
        new,
        old,
        isinstance(binary, dict) and CONFIGMAP_KEY in binary,
        req.username,
        labels(obj).get(UNMANAGED_LABEL),
    )


def reads(req: Request, snap: Snapshot) -> tuple:
    """The settings, the config in force, the nodes' configs and GPUs; the MigSyncs and who the
    reconciler is (git's ownership of the ConfigMap in force)."""
    return snap.mig.key, snap.nodes.version, tuple(sorted(snap.migsyncs.items())), snap.reconciler_users


def _owners(snap: Snapshot) -> list[tuple[str, MigSyncRef]]:
    return sorted((k, m) for k, m in snap.migsyncs.items() if not m.suspend)


def git_owned(req: Request, snap: Snapshot) -> list[Finding]:
    """A write that changes what the nodes a MigSync manages would run (the content of the ConfigMap in
    force, the label that makes it a MIG config, its deletion), by anyone but the reconciler."""
    owners = _owners(snap)
    obj = req.old_object if req.operation == "DELETE" else req.object
    if not owners or req.username in snap.reconciler_users or is_unmanaged(obj):
        return []
    if req.operation == "UPDATE":
        same_text = _text(req.object) == _text(req.old_object) and _text_key(req.object) == _text_key(req.old_object)
        same_label = labels(req.object).get(MIG_CONFIGMAP_LABEL) == labels(req.old_object).get(MIG_CONFIGMAP_LABEL)
        binary = (req.object or {}).get("binaryData")
        if same_text and same_label and not (isinstance(binary, dict) and CONFIGMAP_KEY in binary):
            return []
    key, sync = owners[0]
    where = f"{sync.path}/{CONFIG_FILE}" if sync.path else CONFIG_FILE
    ref = f" (ref {sync.ref})" if sync.ref else ""
    more = f" (and {len(owners) - 1} more)" if len(owners) > 1 else ""
    field = "metadata" if req.operation == "DELETE" else f"data.\"{CONFIGMAP_KEY}\""
    return [
        (
            "git-owned",
            f"{field}: the MIG ConfigMap in force holds the config.yaml MigSync {key}{more} applies from git; "
            f"change {where} in {sync.url}{ref} and let the reconciler apply it (not {req.username or 'this user'}); "
            f"to edit it by hand, suspend the MigSync or label the ConfigMap {UNMANAGED_LABEL}=true in this write",
        )
    ]


def _text(obj: Mapping[str, Any] | None) -> str | None:
    data = (obj or {}).get("data")
    text = data.get(CONFIGMAP_KEY) if isinstance(data, dict) else None
    return text if isinstance(text, str) else None


def _names(obj: Mapping[str, Any] | None) -> set[str]:
    """Config names in an object's content; empty when it has none or does not parse."""
    text, _ = payload(obj)
    if text is None:
        return set()
    try:
        return set(checks.parse(text).names())
    except MigError:
        return set()


def validate(req: Request, snap: Snapshot) -> Verdict:
    active, labelled = in_scope(req, snap)
    if not (active or labelled):
        return ALLOW
    subject = f"ConfigMap {req.namespace}/{req.name}"
    owned = git_owned(req, snap) if active else []
    if req.operation == "DELETE":
        if owned:
            return deny(subject, owned, code=403, reason="Forbidden")
        return _delete(subject, snap) if active else ALLOW
    if req.operation not in ("CREATE", "UPDATE"):
        return ALLOW
    findings, warnings = _content(req, snap, active)
    if owned:
        # The content's own problems come with the refusal: the same edit made in git is refused for them too.
        return deny(subject, owned + findings, code=403, reason="Forbidden", warnings=merge_warnings(warnings))
    if findings:
        return deny(subject, findings, warnings=merge_warnings(warnings))
    return allow(merge_warnings(warnings))


def _content(req: Request, snap: Snapshot, active: bool) -> tuple[list[Finding], list[Warning_]]:
    """The written content's findings and warnings: readable, parsed, every config judged, and the
    configs the nodes select still defined."""
    text, findings = payload(req.object)
    if text is None or findings:
        return findings, []
    digest = checks.digest(text)
    try:
        config = checks.parse(text, digest)
    except MigError as exc:
        return split(exc.problems)[0], []
    warnings: list[Warning_] = []
    names = config.names()
    users = snap.users if active else {}
    missing = [(name, nodes) for name, nodes in users.items() if name not in names]
    if missing:
        # Only now is the old content read: was a selected config removed, or never there?
        before = _names(req.old_object) if req.operation == "UPDATE" else set()
        for name, nodes in missing:
            where = key_path("mig-configs", name)
            if name in before:
                findings.append(
                    (
                        "config-in-use",
                        f"{where}: removed, but {node_names(nodes)} select it ({MIG_CONFIG_LABEL}); relabel them first",
                    )
                )
            else:
                warnings.append(("config-not-found", where, f"not defined, but {node_names(nodes)} select it"))
    errors, warns = judge(config, users, snap, snap.strategy)
    return findings + errors, warnings + warns


def judge(
    config: MigPartedConfig, users: Mapping[str, Sequence[NodeFacts]], snap: Snapshot, strategy: Strategy | None
) -> tuple[list[Finding], list[Warning_]]:
    """Every config of a MIG ConfigMap's content: one that nodes select on each distinct set of their
    GPUs under `strategy` (`migops.mig.fit`, node or model question), one no node selects against the
    catalogue; plus the `fits-some-gpus` warning. Also what a ClusterPolicy switching to this content
    is judged by (webhook/policies.py)."""
    findings: list[Finding] = []
    warnings: list[Warning_] = []
    names = config.names()
    catalogue = checks.on_catalogue(config, names)
    for name in names:
        used_by = users.get(name, ())
        if used_by:
            _on_nodes(config, name, snap.groups(name), strategy, findings, warnings)
        else:
            errors, warns = split(checks.fit(config, name, None, None).problems)
            findings += errors
            warnings += warns
        report = catalogue[name]
        if report.valid and report.fits:
            fit = frozenset(g.device_id for g in report.fits)
            cannot = snap.not_served(fit, name)
            if cannot:
                fits = listed(dict.fromkeys(g.name for g in report.fits), 2)
                warnings.append(
                    (
                        "fits-some-gpus",
                        key_path("mig-configs", name),
                        f"cannot serve {node_names(cannot, 3)} (fits only {fits})",
                    )
                )
    return findings, warnings


def _on_nodes(
    config: MigPartedConfig,
    name: str,
    groups: Sequence[tuple[tuple[str, ...], bool, Sequence[NodeFacts]]],
    strategy: Strategy | None,
    findings: list[Finding],
    warnings: list[Warning_],
) -> None:
    """The config on each distinct set of GPUs among the nodes that select it (node question, or the
    model question when GFD tells the model only); the state keeps them grouped (nodeindex.NodeIndex), so
    a review never walks the nodes."""
    for ids, exact, members in groups:
        first = members[0]
        context = f"on {node_names(members)}: {first.describe()}"
        if not ids:
            why = first.gpu_problem or "no GPU labels"
            warnings.append(("gpus-unknown", node_names(members), f"config {name} not checked on them: {why}"))
            verdict = checks.fit(config, name, None, strategy)
            context = ""
        else:
            verdict = checks.fit(config, name, NodeGpus(first.gpus, exact), strategy)
        errors, warns = split(verdict.problems, context)
        findings.extend(errors)
        warnings.extend(warns)


def _delete(subject: str, snap: Snapshot) -> Verdict:
    users = snap.configured()
    if not users:
        return ALLOW
    configs = ", ".join(sorted(snap.users)[:5])
    return deny(
        subject,
        [
            (
                "config-in-use",
                f"{node_names(users)} select configs from it ({MIG_CONFIG_LABEL}: {configs}); "
                "mig-manager would have nothing to apply: relabel them first",
            )
        ],
        code=403,
        reason="Forbidden",
    )

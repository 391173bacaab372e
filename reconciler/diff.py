"""What applying a desired state would change: the ConfigMap's config.yaml and each node's label.

Unlike a sync, the diff shows every change the revision makes, not just the next wave. With a client
that may write, each change is also sent as a server-side dry run, so an admission webhook's denial
shows up here, before anything is applied (as Flux and Argo CD's server-side diff do).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from migops.api import objects
from migops.api.names import MIG_CONFIG_LABEL, UNMANAGED_LABEL
from migops.gitops.desired import DesiredState
from migops.mig.text import listed
from migops.reconciler import matching, steps
from migops.reconciler.apply import NullWriter, WriteError, Writer
from migops.reconciler.plan import owns_config_label
from migops.reconciler.ports import Ports
from migops.reconciler.reasons import SyncOutcome, SyncResult
from migops.reconciler.state import Run, Seen, SyncState
from migops.reconciler.summary import said


@dataclass(frozen=True)
class LabelChange:
    node: str
    current: str | None
    desired: str | None  # None: removed (prune)


@dataclass
class Diff:
    revision: str
    configmap: str  # namespace/name
    configmap_diff: list[str]  # unified diff lines; empty when unchanged
    labels: list[LabelChange]
    unchanged: int  # managed nodes already right
    denied: list[str] = field(default_factory=list)  # server-side dry-run refusals
    defaulted: tuple[str, ...] = ()  # nodes moved to `default` because no assignment matches them any more
    configmap_unmanaged: bool = False  # labelled migops.io/unmanaged=true: shown, never written

    @property
    def changed(self) -> bool:
        return bool(self.configmap_diff or self.labels)

    def lines(self) -> list[str]:
        out = [f"revision {self.revision}"]
        if self.configmap_diff and self.configmap_unmanaged:
            out.append(
                f"ConfigMap {self.configmap} is labelled {UNMANAGED_LABEL}=true: migops does not write it, and "
                "no node gets a new label until it holds this data.config.yaml:"
            )
            out += ["  " + line.rstrip("\n") for line in self.configmap_diff]
        elif self.configmap_diff:
            out.append(f"ConfigMap {self.configmap} data.config.yaml:")
            out += ["  " + line.rstrip("\n") for line in self.configmap_diff]
        else:
            out.append(f"ConfigMap {self.configmap}: unchanged")
        if self.labels:
            out.append(f"nvidia.com/mig.config on {len(self.labels)} node(s) ({self.unchanged} unchanged):")
            width = max(len(c.node) for c in self.labels)
            for c in self.labels:
                why = "  (default: no assignment matches it any more)" if c.node in self.defaulted else ""
                out.append(f"  {c.node.ljust(width)}  {c.current or '(none)'} -> {c.desired or '(removed)'}{why}")
        else:
            out.append(f"node labels: unchanged ({self.unchanged} nodes)")
        if self.defaulted:
            out.append(
                f"warning: {len(self.defaulted)} node(s) move to default because no assignment matches them "
                f"any more: {listed(self.defaulted, 20)}"
            )
        for d in self.denied:
            out.append(f"denied by the API server (dry run): {d}")
        return out

    def as_dict(self) -> dict[str, Any]:
        return {
            "revision": self.revision,
            "configMap": self.configmap,
            "configMapDiff": self.configmap_diff,
            "configMapUnmanaged": self.configmap_unmanaged,
            "labels": [{"node": c.node, "current": c.current, "desired": c.desired} for c in self.labels],
            "unchanged": self.unchanged,
            "denied": self.denied,
            "changed": self.changed,
            "defaulted": list(self.defaulted),
        }


def compute(desired: DesiredState, nodes: Mapping[str, Mapping[str, Any]], configmap_text: str | None) -> Diff:
    cm_diff: list[str] = []
    if configmap_text != desired.spec.config_text:
        cm_diff = list(
            difflib.unified_diff(
                (configmap_text or "").splitlines(keepends=True),
                desired.spec.config_text.splitlines(keepends=True),
                "cluster",
                f"revision {desired.revision[:12]}",
            )
        )
    changes = []
    unchanged = 0
    for name in sorted(desired.targets):
        obj = nodes.get(name)
        if obj is None:
            continue
        current = objects.labels(obj).get(MIG_CONFIG_LABEL)
        if current == desired.targets[name].config:
            unchanged += 1
        else:
            changes.append(LabelChange(name, current, desired.targets[name].config))
    if desired.spec.nodes.prune:
        for name in sorted(nodes):
            obj = nodes[name]
            current = objects.labels(obj).get(MIG_CONFIG_LABEL)
            if name not in desired.targets and owns_config_label(obj) and current is not None:
                changes.append(LabelChange(name, current, None))
    return Diff(desired.revision, f"{desired.namespace}/{desired.configmap}", cm_diff, changes, unchanged)


def server_dry_run(diff: Diff, desired: DesiredState, writer: Writer) -> None:
    """Send each change as a dry-run apply; collect refusals (a webhook's message, RBAC, ...)."""
    assert writer.dry_run
    if diff.configmap_diff and not diff.configmap_unmanaged:
        try:
            writer.configmap(desired.namespace, desired.configmap, desired.spec.config_text)
        except WriteError as err:
            diff.denied.append(str(err))
    _, errors = writer.labels((c.node, c.desired) for c in diff.labels)
    diff.denied += [str(e) for e in errors]


def preview(
    state: SyncState, seen: Seen, ports: Ports, dry_writer: Callable[[], Writer] | None
) -> tuple[Diff | None, SyncResult]:
    """The diff of the repo's current revision: the sync's own steps (`steps.SYNC`) on the state in
    force (the state they return is dropped), with a writer that writes nothing and no summary, so
    nothing is changed -- and, as with `--once`, a refused newest revision is the answer, not the last good one.
    With `dry_writer`, each change is then sent as a server-side dry run. None with a failed result
    when the revision is unreachable or invalid."""
    ports = replace(
        ports,
        options=replace(ports.options, dry_run=True, write_status=False, enforce_last_good=False),
        writer=NullWriter(),
    )
    run = Run(True, seen)
    after, stopped = steps.run_steps(state, run, ports, steps.SYNC)
    if stopped is not None:
        f = said(stopped, after, run)
        revision = after.last_attempted if run.got.fetched is not None else None
        return None, SyncResult(f.outcome, revision, message=f.message, problems=f.problems)
    desired = after.desired
    assert desired is not None  # (`resolve` stops the steps when nothing is in force)
    found = compute(desired, run.wave.nodes, run.wave.configmap_text)
    found.configmap_unmanaged = run.wave.configmap_unmanaged
    found.defaulted = matching.moved_to_default(desired, state.desired, after.record.record)
    if dry_writer is not None and found.changed:
        server_dry_run(found, desired, dry_writer())
    return found, SyncResult(
        SyncOutcome.IN_SYNC if not found.changed else SyncOutcome.PROGRESSING,
        desired.revision,
        problems=tuple(str(w) for w in desired.warnings),
    )

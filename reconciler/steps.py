"""One sync as a list of steps, after Flux's source-controller: load spec → resume → fetch → verify →
load → fall back → resolve → plan → apply the ConfigMap → apply a wave.

Every step has one signature, `step(reconciler, run) -> Failure | None`: it reads what earlier steps
left in `run`, adds its own result there, and returns a Failure only when the sync must stop (nothing
to apply). A failure that leaves the last good state in force (an unreachable remote, a refused
commit) is kept in `run.failure` and the steps go on with the last good desired state. Events go to
`run.notes`; only the summary (`Reconciler._summarize`) records them and writes status and metrics.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from migops.gitops.desired import resolve as resolve_desired
from migops.gitops.reasons import UNREADABLE, SourceReason
from migops.gitops.repo import RepoError, RepoSpec
from migops.gitops.source import Fetched, GitSource, SourceError, normalise_path
from migops.gitops.verify import VerificationError
from migops.kube.clusterpolicy import MigSettings
from migops.kube.names import CONFIGMAP_KEY, RESUME_ANNOTATION
from migops.reconciler import status as st
from migops.reconciler.apply import WriteError
from migops.reconciler.plan import IN_SYNC, Plan, config_state, plan as plan_wave
from migops.reconciler.reasons import Failure, Note, Outcome, Reason

if TYPE_CHECKING:
    from migops.reconciler.controller import Reconciler

log = logging.getLogger(__name__)


@dataclass
class Run:
    """One sync's working state, filled in step by step."""

    fetch: bool  # fetch the remote (else follow the cluster with what was fetched last)
    spec: st.SyncSpec | None = None
    path: str = ""
    source: GitSource | None = None
    settings: MigSettings | None = None
    fetched: Fetched | None = None  # this sync's fetch, when it fetched and the fetch worked
    fetch_seconds: float | None = None
    verified: bool = False
    candidate: RepoSpec | None = None  # the newest revision that verified and parsed
    failure: Failure | None = None  # why the newest revision is not (all) in force; the steps go on
    plan: Plan | None = None
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)  # the nodes planned on (overlay applied)
    configmap_text: str | None = None
    skip: frozenset[str] = frozenset()
    writes: int = 0
    errors: list[WriteError] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)

    def keep(self, failure: Failure) -> None:
        """The first failure is the one status shows."""
        if self.failure is None:
            self.failure = failure

    def note(self, reason: Any, message: str, type: str = "Normal", key: tuple[Any, ...] | None = None,
             involved: Any = None) -> None:
        self.notes.append(Note(reason, message, type, key, involved))


Step = Callable[["Reconciler", Run], Failure | None]


def load_spec(r: Reconciler, run: Run) -> Failure | None:
    try:
        spec = r.current_spec()
        run.path = normalise_path(spec.path)
    except ValueError as exc:
        return Failure(Reason.INVALID_SPEC, str(exc), True, Outcome.INVALID)
    if spec.suspend:
        return Failure(Reason.SUSPENDED, "spec.suspend is true: nothing is fetched or written", False, Outcome.SUSPENDED)
    run.spec = spec
    run.source = r.revisions.source(spec.url, spec.ref)
    run.settings = r.settings()
    return None


def resume(r: Reconciler, run: Run) -> Failure | None:
    """A new value of the resume annotation acknowledges the failures seen so far."""
    obj = r.migsync_object()
    token = ((obj or {}).get("metadata") or {}).get("annotations", {}).get(RESUME_ANNOTATION)
    if token and token != r.handled_resume:
        r.acknowledge(f"resume {token!r}")
        r.handled_resume = token
        run.note(Reason.RESUMED, f"resumed ({RESUME_ANNOTATION}={token})", key=("resume", token))
    return None


def fetch(r: Reconciler, run: Run) -> Failure | None:
    if not run.fetch and r.desired is not None:
        # Following the cluster: the last fetch's verdicts stand (a refused newest revision stays
        # refused) and the newest good revision is tried again (a node that did not fit may have gone).
        if r.fetch_failure is not None:
            run.keep(r.fetch_failure)
        run.candidate = r.latest or r.desired.spec
        return None
    assert run.source is not None
    r.memory.refused.clear()  # a refused write is tried again once per fetch, never in a hot loop
    began = time.monotonic()
    try:
        run.fetched = run.source.fetch()
    except SourceError as exc:
        run.keep(Failure(exc.reason, f"{exc}; {r.kept()}", False, Outcome.UNREACHABLE))
        r.fetch_failure, r.latest = run.failure, None
        return None
    run.fetch_seconds = time.monotonic() - began
    r.last_attempted = run.fetched.revision
    return None


def _source_failure(r: Reconciler, run: Run, exc: SourceError) -> None:
    assert run.fetched is not None
    run.keep(Failure(exc.reason, f"{exc}; {r.kept()}", False, Outcome.UNREACHABLE, run.fetched.revision))


def verify(r: Reconciler, run: Run) -> Failure | None:
    if run.fetched is None or run.spec is None or run.source is None:
        return None
    revision = run.fetched.revision
    known = r.revisions.refused.get(revision)
    if known is not None and known.reason == SourceReason.VERIFICATION_FAILED:
        run.keep(known)
        return None
    try:
        r.revisions.verify(run.source, revision, run.path, run.spec.trust)
    except VerificationError as exc:
        bad = Failure(exc.reason, f"{exc}; {r.kept()}", True, Outcome.UNVERIFIED, revision)
        r.revisions.refused[revision] = bad
        run.keep(bad)
        run.note(exc.reason, bad.message, "Warning", key=("unverified", revision))
    except SourceError as exc:
        _source_failure(r, run, exc)
    else:
        run.verified = True
    return None


def load(r: Reconciler, run: Run) -> Failure | None:
    if run.fetched is None or run.source is None:
        return None
    if run.verified:
        try:
            run.candidate = r.revisions.load(run.source, run.fetched.revision, run.path)
        except RepoError as exc:
            bad = Failure(exc.reason, f"revision {run.fetched.short} is invalid: {exc}; {r.kept()}", True,
                          Outcome.INVALID, run.fetched.revision, tuple(str(p) for p in exc.problems))
            r.revisions.refused[run.fetched.revision] = bad
            run.keep(bad)
            run.note(exc.reason, bad.message, "Warning", key=("invalid", run.fetched.revision))
        except SourceError as exc:
            _source_failure(r, run, exc)
    # Both last until the next fetch (see `fetch`).
    r.fetch_failure, r.latest = run.failure, run.candidate
    return None


def fall_back(r: Reconciler, run: Run) -> Failure | None:
    """Restarted on a bad or unreachable HEAD: keep enforcing what was applied before."""
    if r.desired is not None or run.candidate is not None or not r.last_applied or not r.enforce_last_good:
        return None
    assert run.source is not None and run.spec is not None
    try:
        run.candidate = r.revisions.verified_load(run.source, r.last_applied, run.path, run.spec.trust)
    except (SourceError, VerificationError, RepoError) as exc:
        log.warning("cannot reload the last applied revision %s: %s", r.last_applied, exc)
    return None


def resolve(r: Reconciler, run: Run) -> Failure | None:
    """The candidate on today's nodes; if it cannot be applied, the desired state in force stays."""
    assert run.settings is not None
    tries = [c for c in (run.candidate, r.desired.spec if r.desired else None) if c is not None]
    for i, attempt in enumerate(tries):
        if i and attempt.revision == tries[0].revision:
            break
        try:
            desired = resolve_desired(attempt, r.nodes.items(), run.settings, r.fit_cache)
        except RepoError as exc:
            bad = Failure(exc.reason, f"revision {attempt.revision[:12]} cannot be applied: {exc}; {r.kept()}",
                          True, Outcome.INVALID, attempt.revision, tuple(str(p) for p in exc.problems))
            r.revisions.refused[attempt.revision] = bad
            run.keep(bad)
            run.note(exc.reason, bad.message, "Warning", key=("invalid", attempt.revision, str(exc)))
        else:
            r.adopt(desired)
            break
    if run.failure is not None and run.failure.reason in UNREADABLE:
        run.note(run.failure.reason, run.failure.message, "Warning", key=("unreachable", run.failure.message))
    if r.desired is None:
        return run.failure or Failure(SourceReason.VALIDATION_FAILED, "nothing to apply", True, Outcome.INVALID)
    if run.failure is not None and not r.enforce_last_good:
        return run.failure  # --once: a refused commit means no writes at all
    return None


def plan(r: Reconciler, run: Run) -> Failure | None:
    desired = r.desired
    assert desired is not None
    run.nodes = r.overlay.nodes(r.nodes.items())
    run.configmap_text = r.overlay.configmap_text(r.configmap_seen(desired.namespace, desired.configmap))
    mem = r.memory
    run.skip = frozenset(n for (n, c) in mem.refused if desired.targets.get(n) and desired.targets[n].config == c)
    run.plan = plan_wave(desired, run.nodes, run.configmap_text, acknowledged=frozenset(mem.acknowledged),
                         awaiting=frozenset(mem.awaiting), reached=mem.reached, skip=run.skip)
    return None


def apply_configmap(r: Reconciler, run: Run) -> Failure | None:
    """The MIG ConfigMap first: a label must never name a config the ConfigMap lacks."""
    desired, p, seen = r.desired, run.plan, run.configmap_text
    assert desired is not None and p is not None
    if not p.configmap_changed:
        if seen is not None:
            r.memory.applied_cm_text = seen
        return None
    text = desired.spec.config_text
    try:
        r.writer.configmap(desired.namespace, desired.configmap, text)
    except WriteError as err:
        run.errors.append(err)
        return None
    run.writes += 1
    if not r.dry_run:
        r.overlay.wrote_configmap(text)
    where = f"ConfigMap {desired.namespace}/{desired.configmap}"
    if seen is not None and r.memory.applied_cm_text == text:
        run.note(Reason.DRIFT_REVERTED, f"data.{CONFIGMAP_KEY} of {where} was changed by hand; put back to "
                 f"revision {desired.revision[:12]}", "Warning", involved={
                     "apiVersion": "v1", "kind": "ConfigMap",
                     "metadata": {"name": desired.configmap, "namespace": desired.namespace}})
    else:
        run.note(Reason.CONFIGMAP_APPLIED, f"{where} data.{CONFIGMAP_KEY} applied from revision {desired.revision[:12]}")
    r.memory.applied_cm_text = text
    return None


def apply_wave(r: Reconciler, run: Run) -> Failure | None:
    """This wave's labels (and prunes), in parallel; nothing while an earlier write failed."""
    p, desired, mem = run.plan, r.desired, r.memory
    assert p is not None and desired is not None
    if not run.errors:
        items: list[tuple[str, str | None]] = [*p.writes, *((n, None) for n in p.prunes)]
        # Marked before the write: mig-manager may answer (pending) before the write call returns.
        fresh = {n for n, c in items if c is not None and not r.dry_run and not config_state(run.nodes[n]).agent
                 and n not in mem.awaiting}
        mem.awaiting |= fresh
        done, errors = r.writer.labels(items)
        mem.awaiting -= fresh - set(done)
        run.errors += errors
        run.writes += len(done)
        wrote = dict(items)
        for name in done if not r.dry_run else ():
            r.overlay.wrote_label(name, wrote[name])
            if wrote[name] is not None:
                mem.revisions[name] = desired.revision
            else:
                mem.revisions.pop(name, None)
        for err in errors:
            node = err.target.split("/", 1)[1]
            if err.kind == "terminal":
                mem.refused[(node, wrote.get(node))] = str(err)
        _notes_for_writes(run, p, done, wrote, desired.revision)
    for s in p.nodes:
        if s.phase == IN_SYNC:
            mem.reached[s.name] = s.config
    return None


def _notes_for_writes(run: Run, p: Plan, done: list[str], wrote: dict[str, str | None], revision: str) -> None:
    for name in (n for n in done if n in p.drift):
        run.note(Reason.DRIFT_REVERTED, f"nvidia.com/mig.config was changed by hand; put back to "
                 f"{wrote[name]!r} (revision {revision[:12]})", "Warning",
                 involved={"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
    assigned = [n for n in done if wrote[n] is not None and n not in p.drift]
    pruned = [n for n in done if wrote[n] is None]
    if assigned:
        shown = ", ".join(f"{n}={wrote[n]}" for n in assigned[:10]) + (f" and {len(assigned) - 10} more" if len(assigned) > 10 else "")
        run.note(Reason.ASSIGNED, f"revision {revision[:12]}: new config for {len(assigned)} "
                 f"node{'s' if len(assigned) > 1 else ''} ({shown}); maxUnavailable {p.max_unavailable}")
    if pruned:
        run.note(Reason.PRUNED, f"removed nvidia.com/mig.config from {len(pruned)} node(s) that "
                 f"left every assignment: {', '.join(pruned[:10])}")


SYNC: tuple[Step, ...] = (load_spec, resume, fetch, verify, load, fall_back, resolve, plan, apply_configmap, apply_wave)

"""The reconciler: a config repo's desired state kept true in the cluster, one sync at a time.

A sync (`sync(fetch=True)`) fetches the repo, verifies and validates the new revision (if it is new),
resolves it against the Nodes the informer holds, then writes: the MIG ConfigMap first (a label must
never name a config the ConfigMap lacks), then the next wave of node labels. Syncs without a fetch
(`fetch=False`) follow the cluster: a node reporting `success` frees a slot for the next one, a hand
edit is put back. Nothing is written when nothing differs.

Safety: a revision that cannot be fetched, verified or validated is never applied; the last good
desired state stays in force (drift is still reverted, a rollout already under way still completes) and
the conditions say why the new one was refused. After a restart the last good state is the MigSync's
lastAppliedRevision, read back from the mirror.

What the informer shows lags our own writes by a watch event: `_written` remembers each label we set
until the informer shows it, so a sync that runs in between never writes the same label twice.
"""
from __future__ import annotations

import copy
import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from migops.gitops.desired import DesiredState, FitCache, resolve
from migops.gitops.repo import CONFIG_FILE, NODES_FILE, RepoError, RepoSpec, load_repo
from migops.gitops.source import Fetched, GitAuth, GitSource, SourceError, default_cache_dir, normalise_path
from migops.gitops.verify import VerificationError, verify_commit
from migops.kube import events
from migops.kube.clusterpolicy import read_settings
from migops.kube.informer import Informer
from migops.kube.names import (CONFIGMAP_KEY, MIG_CONFIG_LABEL, MIG_CONFIG_STATE_LABEL, RECONCILER_CONTROLLER,
                               RESUME_ANNOTATION,
                               STATE_FAILED, STATE_SUCCESS)
from migops.reconciler import status as st
from migops.reconciler.apply import WriteError, Writer
from migops.reconciler.metrics import Metrics
from migops.reconciler.plan import IN_SYNC, OWNED_KEY, Plan, node_view, plan, trim_node

log = logging.getLogger(__name__)

# Outcomes of one sync. The first three are fine; the rest say what went wrong.
APPLIED, IN_SYNC_OUTCOME, PROGRESSING = "Applied", "InSync", "Progressing"
INVALID, UNVERIFIED, UNREACHABLE, APPLY_FAILED, HALTED, SUSPENDED = (
    "Invalid", "Unverified", "Unreachable", "ApplyFailed", "Halted", "Suspended")
GOOD = frozenset({APPLIED, IN_SYNC_OUTCOME, PROGRESSING})
_WRITTEN_TTL = 60.0  # forget an unconfirmed write after this long (the watch would have shown it)
_STATUS_MIN_INTERVAL = 1.0  # at most one status write per second while a rollout moves


@dataclass(frozen=True)
class SyncResult:
    outcome: str
    revision: str | None = None
    writes: int = 0
    message: str = ""
    problems: tuple[str, ...] = ()
    plan: Plan | None = None

    @property
    def ok(self) -> bool:
        return self.outcome in GOOD


@dataclass
class _Failure:
    reason: str  # condition reason
    message: str
    stalled: bool  # nothing will change without a person (new commit, resume)
    outcome: str
    revision: str | None = None
    problems: tuple[str, ...] = ()


@dataclass
class _Memory:
    """What the reconciler remembers between syncs (rebuilt from the cluster after a restart)."""

    written: dict[str, tuple[str | None, float]] = field(default_factory=dict)  # node -> (label we set, when)
    written_cm: tuple[str, float] | None = None
    awaiting: set[str] = field(default_factory=set)  # mig-manager nodes we relabelled; not yet left success
    acknowledged: set[str] = field(default_factory=set)  # failed nodes a resume/new commit acknowledged
    reached: dict[str, str] = field(default_factory=dict)  # node -> config it was last seen in sync with
    revisions: dict[str, str] = field(default_factory=dict)  # node -> revision that gave it its config
    refused: dict[tuple[str, str | None], str] = field(default_factory=dict)  # (node, config) -> error, until next fetch
    applied_cm_text: str | None = None  # what we last wrote or saw in sync: a different text later is drift


def _pooled(api: k8s.ApiClient, workers: int) -> k8s.ApiClient:
    """A client of the same identity with a connection per write worker (the informers' long watches
    hold connections of the caller's pool)."""
    config = copy.copy(api.configuration)
    config.connection_pool_maxsize = workers + 2
    return k8s.ApiClient(config)


class Reconciler:
    def __init__(self, api: k8s.ApiClient, *, name: str = st.DEFAULT_NAME, namespace: str = st.DEFAULT_NAMESPACE,
                 spec: st.SyncSpec | None = None, cache_dir: Path | None = None, auth: GitAuth | None = None,
                 dry_run: bool = False, write_status: bool = True, workers: int = 8,
                 metrics: Metrics | None = None, git_timeout: float = 60.0, enforce_last_good: bool = True) -> None:
        self.api = api
        self.name, self.namespace = name, namespace
        self._fixed_spec = spec  # None: read it from the MigSync object
        self.cache_dir = Path(cache_dir) if cache_dir else default_cache_dir()
        self.auth = auth or GitAuth()
        self.dry_run = dry_run
        self.write_status = write_status and not dry_run
        self.metrics = metrics or Metrics()
        self.git_timeout = git_timeout
        self.enforce_last_good = enforce_last_good  # False (--once): a bad commit means no writes at all
        self.stop_event = threading.Event()
        self.wake = threading.Event()
        self.writer = Writer(_pooled(api, workers), workers=workers, dry_run=dry_run, stop=self.stop_event, count=self.metrics.count_write)
        self._lock = threading.RLock()  # one sync at a time
        self._mem = _Memory()
        self._source: GitSource | None = None
        self._source_key: tuple | None = None
        self._fit_cache = FitCache()
        self._specs: dict[str, RepoSpec] = {}  # revision -> parsed (the last few)
        self._bad: dict[str, _Failure] = {}  # revision -> why it was refused
        self.desired: DesiredState | None = None  # the last good desired state, in force
        self.last_applied: str | None = None
        self.last_attempted: str | None = None
        self._acked_revision: str | None = None
        self._handled_resume: str | None = None
        self._failure: _Failure | None = None
        self._fetch_failure: _Failure | None = None  # why the last fetch's revision was not taken
        self._latest: RepoSpec | None = None  # the last fetched revision that parsed and verified
        self._last_plan: Plan | None = None
        self._status_sent: dict[str, Any] | None = None
        self._status_at = 0.0
        self._status_pending = False
        self._event_keys: set[tuple] = set()
        self._migsync: dict[str, Any] | None = None
        self._started_revision_at: dict[str, float] = {}
        self.nodes = Informer(k8s.CoreV1Api(api).list_node, name="nodes", transform=trim_node,
                              handler=self._on_node)
        self._cm_informers: dict[tuple[str, str], Informer] = {}
        self._migsync_informer: Informer | None = None

    # ------------------------------------------------------------------------------ lifecycle
    def start(self, timeout: float = 60.0) -> Reconciler:
        self.nodes.start()
        if self._crd_installed():
            self._migsync_informer = Informer(
                k8s.CustomObjectsApi(self.api).list_namespaced_custom_object, st.GROUP, st.VERSION,
                self.namespace, st.PLURAL, name="migsync", field_selector=f"metadata.name={self.name}",
                handler=lambda kind, obj: self.wake.set()).start()
            self._migsync_informer.wait_synced(timeout)
        if not self.nodes.wait_synced(timeout):
            raise TimeoutError(f"could not list nodes: {self.nodes.last_error}")
        self._restore()
        return self

    def stop(self) -> None:
        self.stop_event.set()
        self.wake.set()
        self.writer.api.close()
        for inf in [self.nodes, *self._cm_informers.values(), *([self._migsync_informer] if self._migsync_informer else [])]:
            inf.stop()

    @property
    def synced(self) -> bool:
        return self.nodes.synced and all(i.synced for i in self._cm_informers.values())

    def _crd_installed(self) -> bool:
        try:
            k8s.CustomObjectsApi(self.api).list_namespaced_custom_object(st.GROUP, st.VERSION, self.namespace,
                                                                        st.PLURAL, limit=1, _request_timeout=30)
            return True
        except ApiException as exc:
            if exc.status == 404:
                log.warning("the MigSync CRD is not installed: no status is written (install manifests/base/reconciler)")
                return False
            raise

    def _restore(self) -> None:
        """After a restart: per-node revisions, reached configs and the last applied revision from status."""
        obj = self._migsync_object()
        status = (obj or {}).get("status") or {}
        self.last_applied = status.get("lastAppliedRevision") or None
        self.last_attempted = status.get("lastAttemptedRevision") or None
        self._handled_resume = status.get("lastHandledResume")
        self._status_sent = None
        for entry in status.get("nodes") or ():
            if entry.get("revision"):
                self._mem.revisions[entry["name"]] = entry["revision"]
            if entry.get("phase") == IN_SYNC and entry.get("config"):
                self._mem.reached[entry["name"]] = entry["config"]

    def _migsync_object(self) -> dict[str, Any] | None:
        if self._migsync_informer is None:
            return None
        return self._migsync_informer.get(f"{self.namespace}/{self.name}")

    # ------------------------------------------------------------------------------ informer events
    def _on_node(self, kind: str, obj: dict[str, Any]) -> None:
        name = (obj.get("metadata") or {}).get("name")
        labels = (obj.get("metadata") or {}).get("labels") or {}
        state = labels.get(MIG_CONFIG_STATE_LABEL)
        if name in self._mem.awaiting and state is not None and state != STATE_SUCCESS:
            self._mem.awaiting.discard(name)  # mig-manager has picked the new label up
        if name in self._mem.acknowledged and state != STATE_FAILED:
            self._mem.acknowledged.discard(name)
        written = self._mem.written.get(name)
        if written is not None and labels.get(MIG_CONFIG_LABEL) == written[0]:
            self._mem.written.pop(name, None)
        if kind == "DELETED":
            self._mem.written.pop(name, None)
        self.wake.set()

    # ------------------------------------------------------------------------------ spec and source
    def current_spec(self) -> st.SyncSpec:
        if self._fixed_spec is not None:
            return self._fixed_spec
        obj = self._migsync_object()
        if obj is None:
            raise ValueError(f"MigSync {self.namespace}/{self.name} not found")
        return st.spec_from_object(obj)

    def _source_for(self, spec: st.SyncSpec) -> GitSource:
        key = (spec.url, spec.ref)
        if self._source is None or self._source_key != key:
            self._source = GitSource(spec.url, spec.ref, cache_dir=self.cache_dir, auth=self.auth, timeout=self.git_timeout)
            self._source_key = key
        return self._source

    def _load(self, source: GitSource, revision: str, path: str, spec: st.SyncSpec) -> RepoSpec:
        """Verify and parse one revision (cached); raises VerificationError or RepoError."""
        key = f"{revision}:{path}"
        if key in self._specs:
            return self._specs[key]
        verify_commit(source.commit_object(revision), revision, spec.trust)
        files = source.read_files(revision, [f"{path}/{n}" if path else n for n in (CONFIG_FILE, NODES_FILE)])
        loaded = load_repo(files, path, revision)
        self._specs[key] = loaded
        while len(self._specs) > 4:
            self._specs.pop(next(iter(self._specs)))
        return loaded

    # ------------------------------------------------------------------------------ one sync
    def sync(self, fetch: bool = True) -> SyncResult:
        with self._lock:
            began = time.monotonic()
            result = self._sync(fetch)
            self.metrics.reconciles.labels(result.outcome).inc()
            self.metrics.duration.observe(time.monotonic() - began)
            return result

    def _sync(self, fetch: bool) -> SyncResult:
        try:
            spec = self.current_spec()
            path = normalise_path(spec.path)
        except ValueError as exc:
            self._failure = _Failure("InvalidSpec", str(exc), True, INVALID)
            self._publish(None)
            return SyncResult(INVALID, message=str(exc))
        if spec.suspend:
            self._failure = _Failure("Suspended", "spec.suspend is true: nothing is fetched or written", False, SUSPENDED)
            self._publish(None)
            return SyncResult(SUSPENDED, message=self._failure.message)
        self._check_resume()
        settings = read_settings(self.api)
        failure: _Failure | None = None
        candidate: RepoSpec | None = None
        source = self._source_for(spec)
        if fetch or self.desired is None:
            self._mem.refused.clear()  # a refused write is tried again once per fetch, never in a hot loop
            try:
                began = time.monotonic()
                fetched = source.fetch()
                self.metrics.fetch_duration.observe(time.monotonic() - began)
            except SourceError as exc:
                failure = _Failure(exc.reason, f"{exc}; {self._kept()}", False, UNREACHABLE)
            else:
                candidate, failure = self._candidate(source, fetched, path, spec)
            # Both last until the next fetch: a sync that only follows the cluster must not forget that
            # the newest revision was refused, and retries the newest good one (a node that did not fit
            # may have gone).
            self._fetch_failure, self._latest = failure, candidate
        else:
            failure, candidate = self._fetch_failure, self._latest or self.desired.spec
        if self.desired is None and candidate is None and self.last_applied and self.enforce_last_good:
            # Restarted on a bad or unreachable HEAD: keep enforcing what was applied before.
            try:
                candidate = self._load(source, self.last_applied, path, spec)
            except (SourceError, VerificationError, RepoError) as exc:
                log.warning("cannot reload the last applied revision %s: %s", self.last_applied, exc)
        tries = [c for c in (candidate, self.desired.spec if self.desired else None) if c is not None]
        for i, attempt in enumerate(tries):
            if i and attempt.revision == tries[0].revision:
                break
            try:
                desired = resolve(attempt, self.nodes.items(), settings, self._fit_cache)
            except RepoError as exc:
                bad = _Failure(exc.reason, f"revision {attempt.revision[:12]} cannot be applied: {exc}; {self._kept()}",
                               True, INVALID, attempt.revision, tuple(str(p) for p in exc.problems))
                self._bad[attempt.revision] = bad
                failure = failure or bad
                self._event(("invalid", attempt.revision, str(exc)), exc.reason, bad.message, "Warning")
            else:
                self._adopt(desired)
                break
        self._failure = failure
        if failure is not None and failure.reason in ("GitUnreachable", "RefNotFound", "GitFailed", "FileTooLarge"):
            self._event(("unreachable", failure.message), failure.reason, failure.message, "Warning")
        if self.desired is None or (failure is not None and not self.enforce_last_good):
            self._publish(None)
            return SyncResult(failure.outcome if failure else INVALID, self.last_attempted, 0,
                              failure.message if failure else "nothing to apply", failure.problems if failure else ())
        return self._apply(self.desired, failure)

    def diff(self, server_side: bool = True) -> tuple[Any, SyncResult]:
        """What the repo's current revision would change (every node, not one wave); writes nothing.
        (Diff | None, result): None with a failed result when the revision is unreachable or invalid."""
        from migops.reconciler.diff import compute, server_dry_run

        with self._lock:
            spec = self.current_spec()
            source = self._source_for(spec)
            try:
                fetched = source.fetch()
            except SourceError as exc:
                return None, SyncResult(UNREACHABLE, message=str(exc))
            candidate, failure = self._candidate(source, fetched, normalise_path(spec.path), spec)
            if candidate is None:
                assert failure is not None
                return None, SyncResult(failure.outcome, fetched.revision, message=failure.message, problems=failure.problems)
            try:
                desired = resolve(candidate, self.nodes.items(), read_settings(self.api), self._fit_cache)
            except RepoError as exc:
                return None, SyncResult(INVALID, fetched.revision, message=f"revision {fetched.short} cannot be applied: {exc}",
                                        problems=tuple(str(p) for p in exc.problems))
            found = compute(desired, self._cluster_nodes(), self._configmap_text(desired.namespace, desired.configmap))
            if server_side and found.changed:
                server_dry_run(found, desired, Writer(self.api, dry_run=True, stop=self.stop_event))
            return found, SyncResult(IN_SYNC_OUTCOME if not found.changed else PROGRESSING, fetched.revision,
                                     problems=tuple(str(w) for w in desired.warnings))

    def _kept(self) -> str:
        return (f"the cluster keeps revision {self.desired.revision[:12]}" if self.desired is not None
                else "nothing has been applied")

    def _candidate(self, source: GitSource, fetched: Fetched, path: str,
                   spec: st.SyncSpec) -> tuple[RepoSpec | None, _Failure | None]:
        self.last_attempted = fetched.revision
        known = self._bad.get(fetched.revision)
        if known is not None and known.reason in ("VerificationFailed",):
            return None, known
        try:
            return self._load(source, fetched.revision, path, spec), None
        except VerificationError as exc:
            bad = _Failure("VerificationFailed", f"{exc}; {self._kept()}", True, UNVERIFIED, fetched.revision)
            self._bad[fetched.revision] = bad
            self._event(("unverified", fetched.revision), "VerificationFailed", bad.message, "Warning")
            return None, bad
        except RepoError as exc:
            bad = _Failure(exc.reason, f"revision {fetched.short} is invalid: {exc}; {self._kept()}", True, INVALID,
                           fetched.revision, tuple(str(p) for p in exc.problems))
            self._bad[fetched.revision] = bad
            self._event(("invalid", fetched.revision), exc.reason, bad.message, "Warning")
            return None, bad
        except SourceError as exc:
            return None, _Failure(exc.reason, f"{exc}; {self._kept()}", False, UNREACHABLE, fetched.revision)

    def _adopt(self, desired: DesiredState) -> None:
        if self.desired is None or desired.revision != self.desired.revision:
            if self._acked_revision is not None and self._acked_revision != desired.revision:
                self._acknowledge("a new revision")
            self._acked_revision = desired.revision
            self._started_revision_at.setdefault(desired.revision, time.monotonic())
        self.desired = desired

    def _acknowledge(self, why: str) -> None:
        failed = {n for n, obj in self.nodes.items().items()
                  if ((obj.get("metadata") or {}).get("labels") or {}).get(MIG_CONFIG_STATE_LABEL) == STATE_FAILED}
        if failed:
            log.info("%s acknowledges the failure of %s", why, ", ".join(sorted(failed)))
        self._mem.acknowledged |= failed

    def _check_resume(self) -> None:
        obj = self._migsync_object()
        token = ((obj or {}).get("metadata") or {}).get("annotations", {}).get(RESUME_ANNOTATION)
        if token and token != self._handled_resume:
            self._acknowledge(f"resume {token!r}")
            self._handled_resume = token
            self._event(("resume", token), "RolloutResumed", f"resumed ({RESUME_ANNOTATION}={token})")

    # ------------------------------------------------------------------------------ apply
    def _cluster_nodes(self) -> dict[str, dict[str, Any]]:
        """The informer's nodes with our unconfirmed writes laid over them."""
        nodes = self.nodes.items()
        now = time.monotonic()
        for name, (label, when) in list(self._mem.written.items()):
            obj = nodes.get(name)
            if obj is None or now - when > _WRITTEN_TTL:
                self._mem.written.pop(name, None)
                continue
            labels = dict((obj.get("metadata") or {}).get("labels") or {})
            if label is None:
                labels.pop(MIG_CONFIG_LABEL, None)
            else:
                labels[MIG_CONFIG_LABEL] = label
            nodes[name] = {**obj, "metadata": {**obj["metadata"], "labels": labels}, OWNED_KEY: label is not None}
        return nodes

    def _configmap_text(self, namespace: str, name: str) -> str | None:
        key = (namespace, name)
        inf = self._cm_informers.get(key)
        if inf is None:
            inf = Informer(k8s.CoreV1Api(self.api).list_namespaced_config_map, namespace, name=f"configmap-{name}",
                           field_selector=f"metadata.name={name}", handler=lambda kind, obj: self.wake.set())
            self._cm_informers[key] = inf.start()
            inf.wait_synced(30)
        if self._mem.written_cm is not None and time.monotonic() - self._mem.written_cm[1] < _WRITTEN_TTL:
            obj = inf.get(f"{namespace}/{name}")
            seen = ((obj or {}).get("data") or {}).get(CONFIGMAP_KEY)
            if seen == self._mem.written_cm[0]:
                self._mem.written_cm = None
            return self._mem.written_cm[0] if self._mem.written_cm else seen
        obj = inf.get(f"{namespace}/{name}")
        return ((obj or {}).get("data") or {}).get(CONFIGMAP_KEY) if obj else None

    def _apply(self, desired: DesiredState, failure: _Failure | None) -> SyncResult:
        revision = desired.revision
        nodes = self._cluster_nodes()
        cm_text = self._configmap_text(desired.namespace, desired.configmap)
        skip = frozenset(n for (n, c) in self._mem.refused if desired.targets.get(n) and desired.targets[n].config == c)
        p = plan(desired, nodes, cm_text, acknowledged=frozenset(self._mem.acknowledged),
                 awaiting=frozenset(self._mem.awaiting), reached=self._mem.reached, skip=skip)
        writes = 0
        errors: list[WriteError] = []
        cm_ref = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": desired.configmap, "namespace": desired.namespace}}
        if p.configmap_changed:
            try:
                self.writer.configmap(desired.namespace, desired.configmap, desired.spec.config_text)
                writes += 1
                if not self.dry_run:
                    self._mem.written_cm = (desired.spec.config_text, time.monotonic())
                drift = cm_text is not None and self._mem.applied_cm_text == desired.spec.config_text
                if drift:
                    self._event(None, "DriftReverted", f"data.{CONFIGMAP_KEY} of ConfigMap {desired.namespace}/"
                                f"{desired.configmap} was changed by hand; put back to revision {revision[:12]}",
                                "Warning", involved=cm_ref)
                else:
                    self._event(None, "ConfigMapApplied", f"ConfigMap {desired.namespace}/{desired.configmap} "
                                f"data.{CONFIGMAP_KEY} applied from revision {revision[:12]}")
                self._mem.applied_cm_text = desired.spec.config_text
            except WriteError as err:
                errors.append(err)
        elif cm_text is not None:
            self._mem.applied_cm_text = cm_text
        if not errors:
            items: list[tuple[str, str | None]] = [*p.writes, *((n, None) for n in p.prunes)]
            # Marked before the write: mig-manager may answer (pending) before the write call returns.
            fresh = {n for n, c in items if c is not None and not self.dry_run and not node_view(nodes[n]).agent
                     and n not in self._mem.awaiting}
            self._mem.awaiting |= fresh
            done, label_errors = self.writer.labels(items)
            self._mem.awaiting -= fresh - set(done)
            errors += label_errors
            writes += len(done)
            now = time.monotonic()
            wrote = dict(items)
            for name in done:
                if self.dry_run:
                    continue
                self._mem.written[name] = (wrote[name], now)
                if wrote[name] is not None:
                    self._mem.revisions[name] = revision
                else:
                    self._mem.revisions.pop(name, None)
            for err in label_errors:
                node = err.target.split("/", 1)[1]
                if err.kind == "terminal":
                    self._mem.refused[(node, wrote.get(node))] = str(err)
            self._events_for_writes(p, done, wrote, revision)
        for s in p.nodes:
            if s.phase == IN_SYNC:
                self._mem.reached[s.name] = s.config
        self._last_plan = p
        if not errors and skip:
            # Writes refused earlier and not retried until the next fetch: still the state of things.
            refused = [msg for (n, c), msg in self._mem.refused.items() if n in skip]
            msg = f"{len(refused)} write{'s' if len(refused) > 1 else ''} refused (tried again at the next fetch): " + "; ".join(refused[:3])
            failure = failure or _Failure("ApplyFailed", msg, True, APPLY_FAILED)
        if errors:
            terminal = [e for e in errors if e.kind == "terminal"]
            msg = f"{len(errors)} write{'s' if len(errors) > 1 else ''} failed: " + "; ".join(str(e) for e in errors[:3])
            if len(errors) > 3:
                msg += f" (and {len(errors) - 3} more)"
            failure = failure or _Failure("ApplyFailed", msg, bool(terminal) and len(terminal) == len(errors), APPLY_FAILED)
            self._event(("apply-failed", msg), "ApplyFailed", msg, "Warning")
        outcome = self._outcome(p, writes, failure)
        if outcome == IN_SYNC_OUTCOME or (outcome == APPLIED and p.converged):
            self._converged(revision)
        self._failure = failure
        self._publish(p)
        message = failure.message if failure else self._progress(p, revision)
        return SyncResult(outcome if failure is None else failure.outcome, revision, writes, message,
                          failure.problems if failure else (), p)

    def _outcome(self, p: Plan, writes: int, failure: _Failure | None) -> str:
        if failure is not None:
            return failure.outcome
        if p.halted:
            return HALTED
        if writes:
            return APPLIED
        return IN_SYNC_OUTCOME if p.converged else PROGRESSING

    def _converged(self, revision: str) -> None:
        if self.last_applied != revision:
            began = self._started_revision_at.pop(revision, None)
            took = f" in {time.monotonic() - began:.1f}s" if began else ""
            self._event(("converged", revision), "ReconciliationSucceeded",
                        f"revision {revision[:12]} applied: every node in sync{took}")
        self.last_applied = revision
        self.metrics.set_revision(revision)

    def _events_for_writes(self, p: Plan, done: list[str], wrote: Mapping[str, str | None], revision: str) -> None:
        if not done:
            return
        drift = [n for n in done if n in p.drift]
        for name in drift:
            self._event(None, "DriftReverted", f"nvidia.com/mig.config was changed by hand; put back to "
                        f"{wrote[name]!r} (revision {revision[:12]})", "Warning",
                        involved={"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
        assigned = [n for n in done if wrote[n] is not None and n not in p.drift]
        pruned = [n for n in done if wrote[n] is None]
        if assigned:
            shown = ", ".join(f"{n}={wrote[n]}" for n in assigned[:10]) + (f" and {len(assigned) - 10} more" if len(assigned) > 10 else "")
            self._event(None, "MigConfigAssigned", f"revision {revision[:12]}: new config for {len(assigned)} "
                        f"node{'s' if len(assigned) > 1 else ''} ({shown}); maxUnavailable {p.max_unavailable}")
        if pruned:
            self._event(None, "MigConfigPruned", f"removed nvidia.com/mig.config from {len(pruned)} node(s) that "
                        f"left every assignment: {', '.join(pruned[:10])}")

    # ------------------------------------------------------------------------------ status
    def _progress(self, p: Plan, revision: str) -> str:
        inside = p.counts.get(IN_SYNC, 0)
        if p.halted:
            h = p.halted[0]
            more = f" (and {len(p.halted) - 1} more)" if len(p.halted) > 1 else ""
            return (f"rollout of {revision[:12]} halted: node {h.name} failed to apply {h.config!r}: {h.message}{more}; "
                    f"push a new commit or resume (kubectl annotate migsync {self.name} {RESUME_ANNOTATION}=<new value> --overwrite)")
        if p.converged:
            return f"revision {revision[:12]} applied: {inside}/{len(p.nodes)} nodes in sync"
        return (f"rolling out {revision[:12]}: {inside}/{len(p.nodes)} nodes in sync, {p.unavailable} reconfiguring "
                f"(maxUnavailable {p.max_unavailable})")

    def _conditions(self, p: Plan | None) -> list[st.Condition]:
        f = self._failure
        revision = self.desired.revision if self.desired else None
        if f is not None:
            progressing = p is not None and not p.converged and not p.halted
            return [st.Condition("Ready", "False", f.reason, f.message),
                    st.Condition("Reconciling", "True" if progressing else "False",
                                 "Progressing" if progressing else f.reason,
                                 self._progress(p, revision) if progressing and revision else f.message),
                    st.Condition("Stalled", "True" if f.stalled else "False", f.reason if f.stalled else "Retrying",
                                 f.message if f.stalled else "")]
        if p is None or revision is None:
            return [st.Condition("Ready", "Unknown", "Progressing", "starting"),
                    st.Condition("Reconciling", "True", "Progressing", "starting"),
                    st.Condition("Stalled", "False", "Progressing", "")]
        msg = self._progress(p, revision)
        if p.halted:
            return [st.Condition("Ready", "False", "RolloutHalted", msg), st.Condition("Reconciling", "False", "RolloutHalted", msg),
                    st.Condition("Stalled", "True", "RolloutHalted", msg)]
        if p.converged:
            return [st.Condition("Ready", "True", "ReconciliationSucceeded", msg),
                    st.Condition("Reconciling", "False", "ReconciliationSucceeded", msg),
                    st.Condition("Stalled", "False", "ReconciliationSucceeded", "")]
        return [st.Condition("Ready", "Unknown", "Progressing", msg), st.Condition("Reconciling", "True", "Progressing", msg),
                st.Condition("Stalled", "False", "Progressing", "")]

    def status_body(self, p: Plan | None) -> dict[str, Any]:
        obj = self._migsync_object() or {}
        generation = (obj.get("metadata") or {}).get("generation")
        old = (obj.get("status") or {}).get("conditions") or []
        body: dict[str, Any] = {"conditions": st.merge_conditions(old, self._conditions(p), generation)}
        if generation is not None:
            body["observedGeneration"] = generation
        for key, value in (("lastAppliedRevision", self.last_applied), ("lastAttemptedRevision", self.last_attempted),
                           ("lastHandledResume", self._handled_resume)):
            if value:
                body[key] = value
        if self.desired is not None:
            body["configMap"] = f"{self.desired.namespace}/{self.desired.configmap}"
        if p is not None:
            body["summary"] = st.summary(p)
            body["nodes"] = st.node_entries(p, self._mem.revisions)
        problems = self._failure.problems if self._failure else ()
        if problems:
            body["problems"] = list(problems[:50])
        return body

    def _publish(self, p: Plan | None, force: bool = False) -> None:
        for phase, count in (p.counts if p else {}).items():
            self.metrics.nodes.labels(phase).set(count)
        if not self.write_status or self._migsync_informer is None or self._migsync_object() is None:
            return
        body = self.status_body(p)
        comparable = {**body, "conditions": [{k: v for k, v in c.items() if k != "lastTransitionTime"} for c in body["conditions"]]}
        if comparable == self._status_sent:
            self._status_pending = False
            return
        if not force and time.monotonic() - self._status_at < _STATUS_MIN_INTERVAL:
            self._status_pending = True  # the loop writes it once the interval has passed
            return
        try:
            self.writer.status({"apiVersion": st.API_VERSION, "kind": st.KIND,
                                "metadata": {"name": self.name, "namespace": self.namespace}, "status": body})
            self._status_sent = comparable
            self._status_at = time.monotonic()
            self._status_pending = False
        except WriteError as err:
            log.warning("status not written: %s", err)

    def flush_status(self) -> None:
        with self._lock:
            if self._status_pending:
                self._publish(self._last_plan, force=True)

    @property
    def status_pending(self) -> bool:
        return self._status_pending

    # ------------------------------------------------------------------------------ events
    def _event(self, key: tuple | None, reason: str, message: str, type: str = "Normal",
               involved: Mapping[str, Any] | None = None) -> None:
        """Record an Event (on the MigSync, else the MIG ConfigMap); `key` de-duplicates repeats."""
        if self.dry_run:
            return
        if key is not None:
            if key in self._event_keys:
                return
            self._event_keys.add(key)
            if len(self._event_keys) > 1000:
                self._event_keys.clear()
        target: Mapping[str, Any] | None = involved
        if target is None:
            ms = self._migsync_object()
            if ms is not None:
                meta = ms.get("metadata") or {}
                target = {"apiVersion": st.API_VERSION, "kind": st.KIND,
                          "metadata": {"name": meta.get("name"), "namespace": meta.get("namespace"), "uid": meta.get("uid")}}
            elif self.desired is not None:
                target = {"apiVersion": "v1", "kind": "ConfigMap",
                          "metadata": {"name": self.desired.configmap, "namespace": self.desired.namespace}}
        if target is None:
            return
        self.metrics.events.labels(reason).inc()
        events.record(self.api, target, reason, message, type=type, controller=RECONCILER_CONTROLLER)  # type: ignore[arg-type]

    # ------------------------------------------------------------------------------ the loop
    def run(self, stop: threading.Event | None = None, hook: threading.Event | None = None) -> None:
        """Sync until `stop`: fetch every interval (or when `hook` is set), follow the cluster in between.
        Errors back off exponentially (1 s doubling to the interval); a refused commit waits for the next."""
        stop = stop or self.stop_event
        hook = hook or threading.Event()
        next_fetch = 0.0
        backoff = 1.0
        generation = None
        while not stop.is_set() and not self.stop_event.is_set():
            try:
                interval = self.current_spec().interval
            except ValueError:
                interval = st.DEFAULT_INTERVAL
            now = time.monotonic()
            seen = ((self._migsync_object() or {}).get("metadata") or {}).get("generation")
            fetch = now >= next_fetch or hook.is_set() or seen != generation  # a new spec: fetch at once
            generation = seen
            hook.clear()
            self.wake.clear()
            try:
                result = self.sync(fetch=fetch)
            except Exception as exc:  # noqa: BLE001 - the loop must survive anything
                log.exception("sync failed: %s", exc)
                result = SyncResult(APPLY_FAILED, message=str(exc))
            if fetch:
                if result.outcome in (UNREACHABLE, APPLY_FAILED) and not (self._failure and self._failure.stalled):
                    next_fetch = time.monotonic() + min(backoff, interval)
                    backoff = min(backoff * 2, interval)
                else:
                    next_fetch = time.monotonic() + interval
                    backoff = 1.0
            wait = max(0.0, next_fetch - time.monotonic())
            if self._status_pending:
                wait = min(wait, _STATUS_MIN_INTERVAL)
            self._wait(stop, hook, wait)
            if self._status_pending and not self.wake.is_set():
                self.flush_status()

    def _wait(self, stop: threading.Event, hook: threading.Event, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not stop.is_set() and not hook.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            if self.wake.wait(min(remaining, 0.5)):
                # Coalesce a burst of watch events (a wave lands as hundreds) into one sync.
                stop.wait(0.05)
                return

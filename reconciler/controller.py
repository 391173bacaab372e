"""The reconciler: a config repo's desired state kept true in the cluster, one sync at a time.

A sync (`sync(fetch=True)`) runs the steps of `reconciler.steps`: it fetches the repo, verifies and
validates the new revision (if it is new), resolves it against the Nodes the informer holds, then
writes: the MIG ConfigMap first (a label must never name a config the ConfigMap lacks), then the next
wave of node labels. Syncs without a fetch (`fetch=False`) follow the cluster: a node reporting
`success` frees a slot for the next one, a hand edit is put back. Nothing is written when nothing
differs. The summary at the end (`_summarize`) alone writes conditions, status, Events and metrics.

Safety: a revision that cannot be fetched, verified or validated is never applied; the last good
desired state stays in force (drift is still reverted, a rollout already under way still completes) and
the conditions say why the new one was refused. After a restart the last good state is the MigSync's
lastAppliedRevision, read back from the mirror.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, cast

from kubernetes import client as k8s

from migops import logs
from migops.api.names import (
    CONFIGMAP_KEY,
    MANAGED_BY_ANNOTATION,
    MIG_CONFIG_STATE_LABEL,
    MIGSYNC_FINALIZER,
    STATE_FAILED,
    STATE_SUCCESS,
)
from migops.gitops.desired import DesiredState, FitCache
from migops.gitops.repo import RepoSpec
from migops.gitops.source import GitAuth, default_cache_dir
from migops.gitops.verify import TrustPolicy
from migops.kube import clusterpolicy
from migops.kube.informer import Informer
from migops.mig.text import listed
from migops.reconciler import matching, steps
from migops.reconciler import record as applied_record
from migops.reconciler import status as st
from migops.reconciler.apply import WriteError, Writer
from migops.reconciler.memo import ResolveMemo
from migops.reconciler.metrics import Metrics
from migops.reconciler.overlay import WriteOverlay
from migops.reconciler.plan import IN_SYNC, Plan, trim_for_reconciler
from migops.reconciler.reasons import Failure, Outcome, Reason, SyncResult
from migops.reconciler.record import AppliedRecord
from migops.reconciler.recorder import EventRecorder
from migops.reconciler.revisions import Revisions
from migops.reconciler.summary import StatusWriter, conditions, finish, status_body

log = logging.getLogger(__name__)


@dataclass
class Memory:
    """What the reconciler remembers of nodes between syncs (rebuilt from the cluster after a restart)."""

    awaiting: set[str] = field(default_factory=set)  # mig-manager nodes we relabelled; not yet left success
    acknowledged: set[str] = field(default_factory=set)  # failed nodes a resume/new commit acknowledged
    reached: dict[str, str] = field(default_factory=dict)  # node -> config it was last seen in sync with
    refused: dict[tuple[str, str | None], str] = field(
        default_factory=dict
    )  # (node, config) -> error, until next fetch
    applied_cm_text: str | None = None  # what we last wrote or saw in sync: a different text later is drift
    since: dict[str, float] = field(default_factory=dict)  # node -> when it began reconfiguring (unix seconds)


def _pooled(api: k8s.ApiClient, workers: int) -> k8s.ApiClient:
    """A client of the same identity with a connection per write worker (the informers' long watches
    hold connections of the caller's pool)."""
    config = copy.copy(api.configuration)
    config.connection_pool_maxsize = workers + 2
    client = k8s.ApiClient(config)
    client.default_headers.update(api.default_headers)  # Impersonate-User (`migops reconcile --as`) too
    return client


class Reconciler:
    def __init__(
        self,
        api: k8s.ApiClient,
        *,
        name: str = st.DEFAULT_NAME,
        namespace: str = st.DEFAULT_NAMESPACE,
        spec: st.SyncSpec | None = None,
        cache_dir: Path | None = None,
        auth: GitAuth | None = None,
        dry_run: bool = False,
        write_status: bool = True,
        workers: int = 8,
        metrics: Metrics | None = None,
        git_timeout: float = 60.0,
        enforce_last_good: bool = True,
        trust: TrustPolicy | None = None,
        finalizer: bool = True,
    ) -> None:
        self.api = api
        self.name, self.namespace = name, namespace
        self.owner = f"{namespace}/{name}"  # the managed-by annotation on every node we give a config
        self._fixed_spec = spec  # None: read it from the MigSync object
        # Keys the Deployment mounts (--allowed-signers/--trusted-key beside a MigSync): added to the
        # MigSync's own, and verification on whatever its spec says -- who may edit the MigSync cannot
        # turn off what whoever deploys the reconciler requires.
        self._trust_floor = trust
        self.dry_run = dry_run
        self.write_status = write_status and not dry_run
        self.metrics = metrics or Metrics()
        self.enforce_last_good = enforce_last_good  # False (--once): a bad commit means no writes at all
        # Put the finalizer on the MigSync (a running reconciler honours it); --once only honours one
        # already there, as nothing would be left running to release the nodes on a later deletion.
        self.finalizer = finalizer
        self.stop_event = threading.Event()
        self.wake = threading.Event()
        self.writer = Writer(
            _pooled(api, workers),
            workers=workers,
            dry_run=dry_run,
            stop=self.stop_event,
            count=self.metrics.count_write,
            owner=self.owner,
        )
        self.revisions = Revisions(
            Path(cache_dir) if cache_dir else default_cache_dir(), auth or GitAuth(), git_timeout
        )
        self.overlay = WriteOverlay(self.owner)
        self.events = EventRecorder(api, self.metrics, dry_run=dry_run, default_target=self._event_target)
        self.status_writer = StatusWriter(self.writer, name, namespace)
        self.memory = Memory()
        self.fit_cache = FitCache()
        self._lock = threading.RLock()  # one sync at a time
        # Revisions: in force, last applied everywhere, last fetched; the newest fetch's verdict.
        self.desired: DesiredState | None = None
        self.last_applied: str | None = None
        self.last_attempted: str | None = None
        self.fetch_failure: Failure | None = None
        self.latest: RepoSpec | None = None  # the last fetched revision that parsed and verified
        self.handled_resume: str | None = None
        self.failure: Failure | None = None  # what the last sync's summary reported
        self._last_plan: Plan | None = None
        self.started_revision_at: dict[str, float] = {}  # revision -> when adopted (unix seconds)
        self.record: AppliedRecord | None = None  # what the cluster keeps of the revision in force
        self.recorded: str | None = None  # the revision whose record we wrote or found
        self.record_trust: TrustPolicy | None = None  # the policy `record` was verified under (steps.check_record)
        self.record_refused: str | None = None  # why the record found at start was refused
        self.record_unreadable: str | None = None  # why the ConfigMap found at start holds no record
        self.revision_condition: tuple[str, str, str] | None = None  # AppliedRevisionAvailable
        self.moved: tuple[str, ...] = ()  # nodes the revision in force moved to `default`
        self.resolve_memo = ResolveMemo()
        self.released = ""  # set once our MigSync was deleted and its nodes released (finalize)
        self.nodes = Informer(
            k8s.CoreV1Api(api).list_node, name="nodes", transform=trim_for_reconciler, handler=self._on_node
        )
        wake = lambda kind, obj: self.wake.set()  # noqa: E731
        custom = k8s.CustomObjectsApi(api)
        # Optional CRDs: watched even while not installed (an install later is seen within seconds).
        self.migsync = Informer(
            custom.list_namespaced_custom_object,
            st.GROUP,
            st.VERSION,
            namespace,
            st.PLURAL,
            name="migsync",
            field_selector=f"metadata.name={name}",
            handler=wake,
            missing_ok=True,
            backoff=(0.2, 5.0),
        )
        self.policies = Informer(
            custom.list_cluster_custom_object,
            clusterpolicy.GROUP,
            clusterpolicy.VERSION,
            clusterpolicy.PLURAL,
            name="clusterpolicies",
            handler=wake,
            missing_ok=True,
            backoff=(0.2, 5.0),
        )
        self._cm_informers: dict[tuple[str, str], Informer] = {}

    # ------------------------------------------------------------------------------ lifecycle
    def start(self, timeout: float = 60.0) -> Reconciler:
        for inf in (self.nodes, self.migsync, self.policies):
            inf.start()
        for inf in (self.migsync, self.policies, self.nodes):
            if not inf.wait_synced(timeout):
                raise TimeoutError(f"could not list {inf.name}: {inf.last_error}")
        if self.migsync.missing:
            log.warning(
                "the MigSync CRD is not installed: no status is written until it is (manifests/base/reconciler)"
            )
        self._restore()
        return self

    def stop(self) -> None:
        self.stop_event.set()
        self.wake.set()
        self.writer.api.close()
        for inf in [self.nodes, self.migsync, self.policies, *self._cm_informers.values()]:
            inf.stop()

    @property
    def synced(self) -> bool:
        return self.nodes.synced and all(i.synced for i in self._cm_informers.values())

    def _restore(self) -> None:
        """After a restart: per-node revisions, reached configs and the last applied revision from status."""
        status = (self.migsync_object() or {}).get("status") or {}
        self.last_applied = status.get("lastAppliedRevision") or None
        self.last_attempted = status.get("lastAttemptedRevision") or None
        self.handled_resume = status.get("lastHandledResume")
        self.status_writer.forget()
        try:
            self.record = applied_record.load(self.api, self.namespace, self.name)
        except ValueError as exc:  # said in status and an Event by the first sync (steps.check_record)
            self.record, self.record_unreadable = None, str(exc)
        if self.record is not None and self.record.adopted_at:
            self.started_revision_at[self.record.revision] = self.record.adopted_at
        for entry in status.get("nodes") or ():  # per-node revisions are on the nodes themselves
            if entry.get("phase") == IN_SYNC and entry.get("config"):
                self.memory.reached[entry["name"]] = entry["config"]

    # ------------------------------------------------------------------------------ what the cluster shows
    def migsync_object(self) -> dict[str, Any] | None:
        return self.migsync.get(f"{self.namespace}/{self.name}")

    def current_spec(self) -> st.SyncSpec:
        if self._fixed_spec is not None:
            return self._fixed_spec
        obj = self.migsync_object()
        if obj is None:
            raise ValueError(f"MigSync {self.namespace}/{self.name} not found")
        spec = st.spec_from_object(obj)
        return spec if self._trust_floor is None else with_trust_floor(spec, self._trust_floor)

    def settings(self) -> clusterpolicy.MigSettings:
        return clusterpolicy.settings_from_policies(self.policies.items().values())

    def configmap_seen(self, namespace: str, name: str) -> str | None:
        """data["config.yaml"] of the MIG ConfigMap as the (lazily started) informer shows it."""
        key = (namespace, name)
        inf = self._cm_informers.get(key)
        if inf is None:
            inf = Informer(
                k8s.CoreV1Api(self.api).list_namespaced_config_map,
                namespace,
                name=f"configmap-{name}",
                field_selector=f"metadata.name={name}",
                handler=lambda kind, obj: self.wake.set(),
            )
            self._cm_informers[key] = inf.start()
            inf.wait_synced(30)
        obj = inf.get(f"{namespace}/{name}")
        return ((obj or {}).get("data") or {}).get(CONFIGMAP_KEY) if obj else None

    def _on_node(self, kind: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        # A Node the informer reports always has its name.
        name, labels = cast(str, meta.get("name")), meta.get("labels") or {}
        state = labels.get(MIG_CONFIG_STATE_LABEL)
        if name in self.memory.awaiting and state is not None and state != STATE_SUCCESS:
            self.memory.awaiting.discard(name)  # mig-manager has picked the new label up
        if name in self.memory.acknowledged and state != STATE_FAILED:
            self.memory.acknowledged.discard(name)
        self.overlay.node_event(kind, name, labels, meta.get("annotations") or {})
        self.resolve_memo.node_event(kind, name, labels, meta.get("annotations") or {})
        self.wake.set()

    def _event_target(self) -> dict[str, Any] | None:
        """Events go on the MigSync; without one (no CRD), on the MIG ConfigMap."""
        ms = self.migsync_object()
        if ms is not None:
            meta = ms.get("metadata") or {}
            return {
                "apiVersion": st.API_VERSION,
                "kind": st.KIND,
                "metadata": {"name": meta.get("name"), "namespace": meta.get("namespace"), "uid": meta.get("uid")},
            }
        if self.desired is not None:
            return {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": self.desired.configmap, "namespace": self.desired.namespace},
            }
        return None

    # ------------------------------------------------------------------------------ used by the steps
    def kept(self) -> str:
        return (
            f"the cluster keeps revision {self.desired.revision[:12]}"
            if self.desired is not None
            else steps.NOTHING_KEPT
        )

    def adopt(self, desired: DesiredState, run: steps.Run) -> None:
        if self.desired is None or desired.revision != self.desired.revision:
            self.moved = self.moved_to_default(desired)
            if self.moved:
                run.note(
                    Reason.MOVED_TO_DEFAULT,
                    matching.moved_text(desired, self.moved),
                    "Warning",
                    key=("defaulted", desired.revision),
                )
            if self.desired is not None:
                self.acknowledge("a new revision")
            self.started_revision_at.setdefault(desired.revision, time.time())
        self.desired = desired

    def moved_to_default(self, desired: DesiredState) -> tuple[str, ...]:
        return matching.moved_to_default(desired, self.desired, self.record)

    def acknowledge(self, why: str) -> None:
        failed = {
            n
            for n, obj in self.nodes.items().items()
            if ((obj.get("metadata") or {}).get("labels") or {}).get(MIG_CONFIG_STATE_LABEL) == STATE_FAILED
        }
        if failed:
            log.info("%s acknowledges the failure of %s", why, ", ".join(sorted(failed)))
        self.memory.acknowledged |= failed

    # ------------------------------------------------------------------------------ the finalizer
    def finalize(self) -> SyncResult | None:
        """The MigSync's finalizer (migops.io/release-nodes). One not being deleted gets it (once, unless
        `finalizer` is off: --once); one
        being deleted first releases every node it manages (managed-by and revision annotations removed;
        the labels stay as they are, anyone's now), then drops the finalizer so the deletion completes.
        Then, and while the MigSync stays gone, a sync writes nothing: the result says so. None: sync on.
        A reconciler that writes no status (a dry run, a diff) does not own the object and leaves it."""
        if not self.write_status:
            return None
        obj = self.migsync_object()
        if obj is None:
            return SyncResult(Outcome.RELEASED, message=self.released) if self.released else None
        self.released = ""
        meta = obj.get("metadata") or {}
        held = MIGSYNC_FINALIZER in (meta.get("finalizers") or ())
        if not meta.get("deletionTimestamp"):
            if not held and self.finalizer:
                try:
                    self.writer.finalizer(self.namespace, self.name, True)
                except WriteError as err:  # no permission yet: the nodes keep their annotations on deletion
                    log.warning("cannot add the finalizer %s: %s", MIGSYNC_FINALIZER, err)
            return None
        managed = sorted(
            n
            for n, o in self.nodes.items().items()
            if ((o.get("metadata") or {}).get("annotations") or {}).get(MANAGED_BY_ANNOTATION) == self.owner
        )
        done, errors = self.writer.releases(managed)
        for name in done:
            self.overlay.released(name)
        if errors:
            return SyncResult(
                Outcome.APPLY_FAILED,
                message=f"MigSync {self.owner} is being deleted; releasing its nodes failed: {errors[0]}",
                problems=tuple(str(e) for e in errors),
            )
        if held:
            try:
                self.writer.finalizer(self.namespace, self.name, False)
            except WriteError as err:
                return SyncResult(Outcome.APPLY_FAILED, message=f"cannot remove the finalizer: {err}")
        self.desired = None
        self.released = (
            f"MigSync {self.owner} deleted: {len(done)} node(s) released ({listed(done, 10) if done else 'none'}); "
            "their nvidia.com/mig.config is no longer enforced"
        )
        log.info("%s", self.released)
        return SyncResult(Outcome.RELEASED, writes=len(done) + int(held), message=self.released)

    # ------------------------------------------------------------------------------ one sync
    def sync(self, fetch: bool = True) -> SyncResult:
        with self._lock:
            finalized = self.finalize()
            if finalized is not None:
                return finalized
            began = time.monotonic()
            run = steps.Run(fetch)
            stopped = None
            for step in steps.SYNC:
                with logs.bound(**_about(run.revision(self))):
                    stopped = step(self, run)
                if stopped is not None:
                    break
            with logs.bound(**_about(run.revision(self))):
                return finish(self, run, stopped, began)

    # ------------------------------------------------------------------------------ status
    def status_body(self, p: Plan | None) -> dict[str, Any]:
        revision = self.desired.revision if self.desired else None
        fields = {
            "lastAppliedRevision": self.last_applied,
            "lastAttemptedRevision": self.last_attempted,
            "lastHandledResume": self.handled_resume,
            "configMap": f"{self.desired.namespace}/{self.desired.configmap}" if self.desired else None,
        }
        extra = matching.condition(self.desired, self.moved)
        if self.revision_condition is not None:
            extra.append(st.Condition("AppliedRevisionAvailable", *self.revision_condition))
        body = status_body(
            self.migsync_object(), conditions(self.failure, p, revision, self.name) + extra, fields, p, self.failure
        )
        if self.desired is not None and self.desired.warnings:
            body["warnings"] = [str(w) for w in self.desired.warnings][:50]
        return body

    def publish(self, p: Plan | None, force: bool = False) -> None:
        """Status (when it differs) and the phase gauges; the plan becomes what flush_status re-sends."""
        if p is not None:
            self._last_plan = p
        for phase, count in (p.counts if p else {}).items():
            self.metrics.nodes.labels(phase).set(count)
        if self.write_status and self.migsync_object() is not None:
            self.status_writer.publish(self.status_body(p), force)

    def flush_status(self) -> None:
        with self._lock:
            if self.status_writer.pending:
                self.publish(self._last_plan, force=True)

    @property
    def status_pending(self) -> bool:
        return self.status_writer.pending

    # ------------------------------------------------------------------------------ diff
    def diff(self, server_side: bool = True) -> tuple[Any, SyncResult]:
        """What the repo's current revision would change (every node, not one wave); writes nothing.
        (Diff | None, result): None with a failed result when the revision is unreachable or invalid."""
        from migops.reconciler.diff import preview

        with self._lock:
            return preview(self, server_side)

    # ------------------------------------------------------------------------------ the loop
    def run(self, stop: threading.Event | None = None, hook: threading.Event | None = None) -> None:
        """Sync until `stop`: fetch every interval (or when `hook` is set), follow the cluster in between."""
        from migops.reconciler.loop import run

        run(self, stop or self.stop_event, hook or threading.Event())


def _about(revision: str | None) -> dict[str, str]:
    return {"revision": revision} if revision else {}


def with_trust_floor(spec: st.SyncSpec, floor: TrustPolicy) -> st.SyncSpec:
    """The spec with the floor's keys added to its own and verification required (mode head)."""
    own = spec.trust
    signers = "\n".join(t for t in (own.allowed_signers.strip(), floor.allowed_signers.strip()) if t)
    keys = tuple(dict.fromkeys((*own.openpgp_keys, *floor.openpgp_keys)))
    return replace(spec, trust=TrustPolicy("head", signers, keys))

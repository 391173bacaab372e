"""The reconciler: a config repo's desired state kept true in the cluster, one sync at a time.

A sync (`sync(fetch=True)`) runs the steps of `reconciler.steps`: it fetches the repo, verifies and
validates the new revision (if it is new), resolves it against the Nodes the informer holds, then
writes: the MIG ConfigMap first (a label must never name a config the ConfigMap lacks), then the next
wave of node labels. Syncs without a fetch (`fetch=False`) follow the cluster: a node reporting
`success` frees a slot for the next one, a hand edit is put back. Nothing is written when nothing
differs. The summary at the end (`summary.finish`) alone writes conditions, status, Events and metrics.

The controller holds the ports (`ports.Ports`: informers, writer, repository, Events, metrics) and the
state in force (`state.SyncState`, a value); each sync computes a new state and the controller swaps it in.

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
from pathlib import Path
from typing import Any, cast

from kubernetes import client as k8s

from migops import logs
from migops.api.migsync import SyncSpec, TrustPolicy
from migops.api.objects import MigSettings
from migops.gitops.desired import DesiredState, FitCache
from migops.gitops.source import GitAuth, default_cache_dir
from migops.kube.cache import Cache
from migops.kube.informer import Informer
from migops.reconciler import loop, steps, summary
from migops.reconciler import status as st
from migops.reconciler.apply import Writer
from migops.reconciler.diff import Diff, preview
from migops.reconciler.finalizer import finalize
from migops.reconciler.metrics import Metrics
from migops.reconciler.ports import ClusterView, Options, Ports, with_trust_floor
from migops.reconciler.reasons import SyncFailure, SyncResult
from migops.reconciler.record import load_record
from migops.reconciler.recorder import EventRecorder, event_target
from migops.reconciler.revisions import Revisions
from migops.reconciler.state import Run, Seen, SyncState, restore
from migops.reconciler.status_writer import StatusWriter
from migops.reconciler.suggestion import Suggester

__all__ = ["Reconciler", "with_trust_floor"]  # with_trust_floor: where it was before reconciler.ports

log = logging.getLogger(__name__)


def _pooled(api: k8s.ApiClient, workers: int) -> k8s.ApiClient:
    """A client of the same identity with a connection per write worker (the informers' long watches
    hold connections of the caller's pool)."""
    config = copy.copy(api.configuration)
    config.connection_pool_maxsize = workers + 2
    client = k8s.ApiClient(config)
    client.default_headers.update(api.default_headers)  # Impersonate-User (`migops reconcile --as`) too
    return client


class Reconciler:
    """The ports and the state in force; `sync` runs the steps and swaps the state they leave."""

    def __init__(
        self,
        api: k8s.ApiClient,
        *,
        name: str = st.DEFAULT_NAME,
        namespace: str = st.DEFAULT_NAMESPACE,
        spec: SyncSpec | None = None,
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
        cache: Cache | None = None,
    ) -> None:
        self.api = api
        self.stop_event = threading.Event()
        self.wake = threading.Event()
        self._lock = threading.RLock()  # one sync at a time
        options = Options(name, namespace, dry_run, write_status and not dry_run, enforce_last_good, finalizer)
        metrics = metrics or Metrics()
        writer = Writer(
            _pooled(api, workers),
            workers=workers,
            dry_run=dry_run,
            stop=self.stop_event,
            count=metrics.count_write,
            owner=options.owner,
        )
        self.ports = Ports(
            options=options,
            cluster=ClusterView(api, options, spec=spec, trust=trust, wake=self.wake.set, cache=cache),
            writer=writer,
            revisions=Revisions(Path(cache_dir) if cache_dir else default_cache_dir(), auth or GitAuth(), git_timeout),
            fit_cache=FitCache(),
            events=EventRecorder(api, metrics, dry_run=dry_run, default_target=self._event_target),
            metrics=metrics,
            status=StatusWriter(writer, name, namespace),
        )
        self.state = SyncState()

    # ------------------------------------------------------------------------------ what others read
    @property
    def name(self) -> str:
        return self.ports.options.name

    @property
    def namespace(self) -> str:
        return self.ports.options.namespace

    @property
    def owner(self) -> str:
        return self.ports.options.owner

    @property
    def metrics(self) -> Metrics:
        return self.ports.metrics

    @property
    def writer(self) -> Writer:
        return cast(Writer, self.ports.writer)

    @property
    def nodes(self) -> Informer:
        return self.ports.cluster.nodes

    @property
    def migsync(self) -> Informer:
        return self.ports.cluster.migsync

    @property
    def desired(self) -> DesiredState | None:
        return self.state.desired

    @property
    def failure(self) -> SyncFailure | None:
        """What the last sync's summary reported."""
        return self.state.reported.failure

    @property
    def synced(self) -> bool:
        return self.ports.cluster.synced

    @property
    def status_pending(self) -> bool:
        return self.ports.status.pending

    def migsync_object(self) -> dict[str, Any] | None:
        return self.ports.cluster.migsync_object()

    def current_spec(self) -> SyncSpec:
        return self.ports.cluster.current_spec()

    def settings(self) -> MigSettings:
        return self.ports.cluster.settings()

    # ------------------------------------------------------------------------------ lifecycle
    def start(self, timeout: float = 60.0) -> Reconciler:
        self.ports.cluster.start(timeout)
        if self.ports.cluster.migsync.missing:
            log.warning(
                "the MigSync CRD is not installed: no status is written until it is (manifests/base/reconciler)"
            )
        self._restore()
        return self

    def stop(self) -> None:
        self.stop_event.set()
        self.wake.set()
        self.writer.api.close()
        self.ports.cluster.stop()
        self.ports.events.stop()  # what is queued is posted first (for a few seconds at most)

    def flush_events(self, timeout: float = 30.0) -> bool:
        """Wait until the Events recorded so far are posted (a thread of their own posts them)."""
        return self.ports.events.flush(timeout)

    def _restore(self) -> None:
        """After a restart: the revisions from status, the applied record, the configs nodes reached."""
        status = (self.migsync_object() or {}).get("status") or {}
        self.ports.status.forget()
        options = self.ports.options
        try:
            record, unreadable = load_record(self.api, options.namespace, options.name), None
        except ValueError as exc:  # said in status and an Event by the first sync (steps.check_record)
            record, unreadable = None, str(exc)
        self.state = restore(status, record, unreadable)

    def _caught_up(self) -> Seen:
        """The node events recorded since the last sync folded into the state in force (kept at once: they
        are taken from the journal), and one snapshot of the nodes for this sync. Under the sync lock."""
        cluster = self.ports.cluster
        count, changes = cluster.node_changes.take()
        self.state = self.state.observed(changes, self.owner)
        return Seen(cluster.nodes.items(), count)  # taken after the journal: it shows at least what was folded

    def _event_target(self) -> dict[str, Any] | None:
        return event_target(self.migsync_object(), self.state.desired)

    # ------------------------------------------------------------------------------ one sync
    def sync(self, fetch: bool = True) -> SyncResult:
        """The finalizer, then the steps, then the summary; the state they leave is the one in force."""
        with self._lock:
            seen = self._caught_up()
            state, finalized = finalize(self.state, seen, self.ports)
            if finalized is not None:
                self.state = state
                return finalized
            began = time.monotonic()
            run = Run(fetch, seen)
            state, stopped = steps.run_steps(state, run, self.ports, steps.SYNC)
            with logs.bound(**steps.about(run, state)):
                self.state, result = summary.finish(state, run, stopped, self.ports, began)
            return result

    def flush_status(self) -> None:
        with self._lock:
            if self.ports.status.pending:
                self.state = summary.publish(self.state, self.ports, self.state.reported.plan, force=True)

    # ------------------------------------------------------------------------------ diff
    def diff(self, server_side: bool = True) -> tuple[Diff | None, SyncResult]:
        """What the repo's current revision would change (every node, not one wave); writes nothing.
        (Diff | None, result): None with a failed result when the revision is unreachable or invalid."""
        dry = self._dry_writer if server_side else None
        with self._lock:
            return preview(self.state, self._caught_up(), self.ports, dry)

    def _dry_writer(self) -> Writer:
        return Writer(self.api, dry_run=True, stop=self.stop_event, owner=self.owner)

    # ------------------------------------------------------------------------------ the loop
    def suggester(self) -> Suggester:
        """spec.suggest's publisher, for the revision in force."""
        return Suggester(self.api, self.ports, lambda: self.state.desired, self.stop_event)

    def run(self, stop: threading.Event | None = None, hook: threading.Event | None = None) -> None:
        """Sync until `stop`: fetch every interval (or when `hook` is set), follow the cluster in between."""
        stop = stop or self.stop_event
        self.suggester().start(stop)  # spec.suggest: idle until enabled
        loop.run(self, stop, hook or threading.Event())

"""MigSync `spec.suggest` (opt-in): `migops suggest`'s proposal for the pending MIG pods, published --
never applied. Git applies it: a person turns the proposal (its patch) into a reviewed commit.

Every `spec.suggest.interval` (5 min by default), while a revision is in force: the nodes and the pods
listed in pages, each trimmed to what suggest reads and the pending ones bounded (migops.suggest.live;
`status.suggestion.capped` says so when the bound is hit), `migops.suggest.run.suggest` on the revision
in force, then `status.suggestion` (its own field manager, beside the reconciler's status), the
`migops_pending_mig_requests{profile}` gauge, and a `MigSuggestionChanged` Event when the proposal
differs from the last one. It runs on its own thread, so a slow solve never delays a sync.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from kubernetes import client as k8s

from migops.api.migsync import API_VERSION, KIND
from migops.gitops.desired import DesiredState
from migops.gitops.repo import RepoError
from migops.kube import ssa
from migops.reconciler.ports import Ports
from migops.reconciler.reasons import Reason, SyncNote

log = logging.getLogger(__name__)
MANAGER = "migops-reconciler-suggest"  # owns status.suggestion only
_PATCH_LIMIT = 16 * 1024  # the status carries the patch up to this size (an object holds at most ~1.5 MiB)


def suggestion(api: k8s.ApiClient, ports: Ports, desired: DesiredState | None) -> dict[str, Any] | None:
    """The proposal for the revision in force, as status.suggestion; None when none is in force."""
    # The solver loads only once spec.suggest is on (a cost at start-up, not an import cycle).
    from migops.suggest import report
    from migops.suggest.live import read_cluster
    from migops.suggest.run import suggest
    from migops.suggest.solve import SolverMissing, require_solver

    if desired is None:
        return None
    try:
        require_solver()  # the optional extra migops[suggest]: said in the status, not only in a log
    except SolverMissing as exc:
        return {"revision": desired.revision, "outcome": "unavailable", "summary": str(exc)}
    cluster = read_cluster(api, ports.cluster.settings())
    try:
        out = suggest(desired.spec, cluster, cache=ports.fit_cache)
    except RepoError as exc:
        return {"revision": desired.revision, "outcome": "invalid", "summary": str(exc)}
    doc = report.as_dict(out)
    pending: Counter[str] = Counter()
    for d in out.demands:
        pending[",".join(sorted(d.profiles))] += d.count
    ports.metrics.pending_mig.clear()
    for profile, n in sorted(pending.items()):
        ports.metrics.pending_mig.labels(profile).set(n)
    patch = doc["patch"]
    capped = {"capped": doc["capped"]} if doc.get("capped") else {}
    return {
        "revision": desired.revision,
        "outcome": doc["outcome"],
        "summary": doc["summary"],
        "pendingPods": len(out.demands),
        "servedPods": len(doc["served"]),
        "changes": [{k: c[k] for k in ("node", "from", "to", "gpus")} for c in doc["changes"]],
        "unserved": doc["unserved"][:20],
        "patch": patch if len(patch) <= _PATCH_LIMIT else "",
        "optimal": bool((doc.get("solver") or {}).get("optimal", True)),
        **capped,
    }


class Suggester:
    """The thread that publishes the suggestion while spec.suggest.enabled."""

    def __init__(
        self, api: k8s.ApiClient, ports: Ports, desired: Callable[[], DesiredState | None], stop: threading.Event
    ) -> None:
        self._api, self._ports, self._desired, self._stop = api, ports, desired, stop
        self._last: dict[str, Any] | None = None
        self._thread: threading.Thread | None = None

    def start(self, stop: threading.Event) -> Suggester:
        self._thread = threading.Thread(target=self._run, args=(stop,), name="suggest", daemon=True)
        self._thread.start()
        return self

    def _run(self, stop: threading.Event) -> None:
        due = 0.0
        while not stop.is_set() and not self._stop.is_set():
            try:
                spec = self._ports.cluster.current_spec()
            except ValueError:
                spec = None
            if spec is not None and spec.suggest.enabled and time.monotonic() >= due and self._desired() is not None:
                due = time.monotonic() + spec.suggest.interval
                try:
                    self.publish()
                except Exception as exc:  # noqa: BLE001 -- the thread must survive anything; the next tick retries
                    log.warning("suggestion not published: %s", exc)
            stop.wait(1.0)

    def publish(self) -> dict[str, Any] | None:
        options = self._ports.options
        found = suggestion(self._api, self._ports, self._desired())
        if found is None or options.dry_run:
            return found
        body = {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": {"name": options.name, "namespace": options.namespace},
            "status": {"suggestion": {**found, "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}},
        }
        ssa.apply(self._api, body, field_manager=MANAGER, force=True, subresource="status")
        if found != self._last:
            self._ports.events.record(SyncNote(Reason.SUGGESTION_CHANGED, f"migops suggest: {found['summary']}"))
        self._last = found
        return found

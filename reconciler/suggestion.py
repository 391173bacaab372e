"""MigSync `spec.suggest` (opt-in): `migops suggest`'s proposal for the pending MIG pods, published --
never applied. Git applies it: a person turns the proposal (its patch) into a reviewed commit.

Every `spec.suggest.interval` (5 min by default), while a revision is in force: one list of the nodes
and of the pods, `migops.suggest.run.suggest` on the revision in force, then `status.suggestion`
(its own field manager, beside the reconciler's status), the `migops_pending_mig_requests{profile}`
gauge, and a `MigSuggestionChanged` Event when the proposal differs from the last one. It runs on its
own thread, so a slow solve never delays a sync.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from typing import TYPE_CHECKING, Any

from migops.kube import ssa
from migops.reconciler import status as st
from migops.reconciler.reasons import Note, Reason

if TYPE_CHECKING:
    from migops.reconciler.controller import Reconciler

log = logging.getLogger(__name__)
MANAGER = "migops-reconciler-suggest"  # owns status.suggestion only
_PATCH_LIMIT = 16 * 1024  # the status carries the patch up to this size (an object holds at most ~1.5 MiB)


def suggestion(r: Reconciler) -> dict[str, Any] | None:
    """The proposal for the revision in force, as status.suggestion; None when none is in force."""
    from migops.gitops.repo import RepoError
    from migops.suggest import report
    from migops.suggest.live import read_cluster
    from migops.suggest.run import suggest
    from migops.suggest.solve import SolverMissing, require_solver

    desired = r.desired
    if desired is None:
        return None
    try:
        require_solver()  # the optional extra migops[suggest]: said in the status, not only in a log
    except SolverMissing as exc:
        return {"revision": desired.revision, "outcome": "unavailable", "summary": str(exc)}
    cluster = read_cluster(r.api, r.settings())
    try:
        out = suggest(desired.spec, cluster, cache=r.fit_cache)
    except RepoError as exc:
        return {"revision": desired.revision, "outcome": "invalid", "summary": str(exc)}
    doc = report.as_dict(out)
    pending: Counter[str] = Counter()
    for d in out.demands:
        pending[",".join(sorted(d.profiles))] += d.count
    r.metrics.pending_mig.clear()
    for profile, n in sorted(pending.items()):
        r.metrics.pending_mig.labels(profile).set(n)
    patch = doc["patch"]
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
    }


class Suggester:
    """The thread that publishes the suggestion while spec.suggest.enabled."""

    def __init__(self, r: Reconciler) -> None:
        self.r = r
        self._last: dict[str, Any] | None = None
        self._thread: threading.Thread | None = None

    def start(self, stop: threading.Event) -> Suggester:
        self._thread = threading.Thread(target=self._run, args=(stop,), name="suggest", daemon=True)
        self._thread.start()
        return self

    def _run(self, stop: threading.Event) -> None:
        due = 0.0
        while not stop.is_set() and not self.r.stop_event.is_set():
            try:
                spec = self.r.current_spec()
            except ValueError:
                spec = None
            if spec is not None and spec.suggest and time.monotonic() >= due and self.r.desired is not None:
                due = time.monotonic() + spec.suggest_interval
                try:
                    self.publish()
                except Exception as exc:  # noqa: BLE001 -- the thread must survive anything; the next tick retries
                    log.warning("suggestion not published: %s", exc)
            stop.wait(1.0)

    def publish(self) -> dict[str, Any] | None:
        found = suggestion(self.r)
        if found is None or self.r.dry_run:
            return found
        body = {
            "apiVersion": st.API_VERSION,
            "kind": st.KIND,
            "metadata": {"name": self.r.name, "namespace": self.r.namespace},
            "status": {"suggestion": {**found, "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}},
        }
        ssa.apply(self.r.api, body, field_manager=MANAGER, force=True, subresource="status")
        if found != self._last:
            self.r.events.record(Note(Reason.SUGGESTION_CHANGED, f"migops suggest: {found['summary']}"))
        self._last = found
        return found

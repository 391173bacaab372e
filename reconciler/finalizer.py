"""The MigSync's finalizer (migops.io/release-nodes), checked before every sync (`finalize`)."""

from __future__ import annotations

import logging
import time
from dataclasses import replace

from migops.api import objects
from migops.api.names import MANAGED_BY_ANNOTATION, MIGSYNC_FINALIZER
from migops.mig.text import listed
from migops.reconciler.apply import WriteError
from migops.reconciler.ports import Ports
from migops.reconciler.reasons import SyncOutcome, SyncResult
from migops.reconciler.state import Seen, SyncState

log = logging.getLogger(__name__)


def finalize(state: SyncState, seen: Seen, ports: Ports) -> tuple[SyncState, SyncResult | None]:
    """A MigSync not being deleted gets the finalizer (once, unless `finalizer` is off: --once); one
    being deleted first releases every node it manages (managed-by and revision annotations removed;
    the labels stay as they are, anyone's now), then drops the finalizer so the deletion completes.
    Then, and while the MigSync stays gone, a sync writes nothing: the result says so. None: sync on.
    A reconciler that writes no status (a dry run, a diff) does not own the object and leaves it."""
    options, writer = ports.options, ports.writer
    if not options.write_status:
        return state, None
    obj = ports.cluster.migsync_object()
    if obj is None:
        released = state.reported.released
        return state, SyncResult(SyncOutcome.RELEASED, message=released) if released else None
    state = replace(state, reported=replace(state.reported, released=""))
    meta = objects.meta(obj)
    held = MIGSYNC_FINALIZER in (meta.get("finalizers") or ())
    if not meta.get("deletionTimestamp"):
        if not held and options.finalizer:
            try:
                writer.finalizer(options.namespace, options.name, True)
            except WriteError as err:  # no permission yet: the nodes keep their annotations on deletion
                log.warning("cannot add the finalizer %s: %s", MIGSYNC_FINALIZER, err)
        return state, None
    managed = sorted(
        n for n, o in seen.nodes.items() if objects.annotations_of(o).get(MANAGED_BY_ANNOTATION) == options.owner
    )
    began = ports.cluster.node_changes.count()
    done, errors = writer.releases(managed)
    written = state.cache.written.released(done, time.monotonic(), began)
    state = replace(state, cache=replace(state.cache, written=written))
    if errors:
        message = f"MigSync {options.owner} is being deleted; releasing its nodes failed: {errors[0]}"
        return state, SyncResult(SyncOutcome.APPLY_FAILED, message=message, problems=tuple(str(e) for e in errors))
    if held:
        try:
            writer.finalizer(options.namespace, options.name, False)
        except WriteError as err:
            return state, SyncResult(SyncOutcome.APPLY_FAILED, message=f"cannot remove the finalizer: {err}")
    released = (
        f"MigSync {options.owner} deleted: {len(done)} node(s) released ({listed(done, 10) if done else 'none'}); "
        "their nvidia.com/mig.config is no longer enforced"
    )
    log.info("%s", released)
    result = SyncResult(SyncOutcome.RELEASED, writes=len(done) + int(held), message=released)
    return replace(state, desired=None, reported=replace(state.reported, released=released)), result

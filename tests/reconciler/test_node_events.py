"""Node events reach the reconciler's state only through a sync: the informer's thread records them in a
journal, and the sync folds them in under its lock. Driven concurrently -- events on one thread, syncs
on another, thousands of interleavings -- the state ends as a serial run leaves it (each event applied
the moment it arrives, the sync's marks placed among them where they happened), and no sync fails."""

from __future__ import annotations

import random
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from gitrepo import CONFIG_YAML
from kubernetes import client as k8s
from reconciler_harness import agent_reports, eventually

from migops.api.names import (
    GPUS_ANNOTATION,
    MANAGED_BY_ANNOTATION,
    MIG_CONFIG_LABEL,
    MIG_CONFIG_STATE_LABEL,
    STATE_FAILED,
    STATE_SUCCESS,
)
from migops.kube.cache import Changes
from migops.reconciler import steps
from migops.reconciler.changes import node_change, topology
from migops.reconciler.plan import config_state
from migops.reconciler.state import Run, Seen, SyncState

OURS = "migops-system/t"
NAMES = [f"n{i}" for i in range(6)]
STATES = (None, "pending", STATE_SUCCESS, STATE_FAILED)
CONFIGS = (None, "a", "b")


def _event(rng: random.Random) -> tuple[str, dict[str, Any]]:
    name = rng.choice(NAMES)
    labels = {"zone": rng.choice("xy")}
    if (state := rng.choice(STATES)) is not None:
        labels[MIG_CONFIG_STATE_LABEL] = state
    if (config := rng.choice(CONFIGS)) is not None:
        labels[MIG_CONFIG_LABEL] = config
    annotations = {}
    if rng.random() < 0.5:
        annotations[MANAGED_BY_ANNOTATION] = OURS
    if name in NAMES[:2]:  # the migops agent runs on these (its annotations): never awaited
        annotations[GPUS_ANNOTATION] = rng.choice(("1", "2"))
    kind = "DELETED" if rng.random() < 0.05 else "MODIFIED"
    return kind, {"metadata": {"name": name, "labels": labels, "annotations": annotations}}


@dataclass
class SerialRun:
    """The events applied one at a time as they arrive, on one thread, as an informer's callback that
    changes the reconciler's memory directly would apply them; the sync's marks where they happened."""

    awaiting: set[str] = field(default_factory=set)
    acknowledged: set[str] = field(default_factory=set)
    written: dict[str, tuple[str | None, bool]] = field(default_factory=dict)  # node -> (label, a release)
    topology: int = 0
    fingerprints: dict[str, int] = field(default_factory=dict)

    def event(self, kind: str, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        name, labels, annotations = meta["name"], meta["labels"], meta["annotations"]
        state = labels.get(MIG_CONFIG_STATE_LABEL)
        if name in self.awaiting and state is not None and state != STATE_SUCCESS:
            self.awaiting.discard(name)
        if name in self.acknowledged and state != STATE_FAILED:
            self.acknowledged.discard(name)
        if name in self.written:
            label, release = self.written[name]
            owner = annotations.get(MANAGED_BY_ANNOTATION)
            config = labels.get(MIG_CONFIG_LABEL)
            shown = owner is None if release else config == label and (label is None or owner == OURS)
            if kind == "DELETED" or shown:
                del self.written[name]
        fingerprint = None if kind == "DELETED" else topology(labels, annotations)
        if self.fingerprints.get(name) != fingerprint:
            self.topology += 1
            if fingerprint is None:
                self.fingerprints.pop(name, None)
            else:
                self.fingerprints[name] = fingerprint

    def mark(self, op: tuple[Any, ...]) -> None:
        if op[0] == "acknowledge":
            self.acknowledged |= op[1]
            return
        _, done, relabelled, released, agent = op
        self.written.update({n: (label, False) for n, label in done})
        self.written.update({n: (None, True) for n in released})
        self.awaiting |= {n for n in relabelled if n not in agent}


class ConcurrentRun:
    """The reconciler's way: the journal on the event thread, the fold and the marks on the sync's."""

    def __init__(self) -> None:
        self.latest: dict[str, dict[str, Any]] = {}  # the informer's cache: stored before the event is told
        self.lock = threading.Lock()
        self.changes: Changes[Any] = Changes(node_change, lambda: None)
        self.state = SyncState()
        self.ops: list[tuple[int, tuple[Any, ...]]] = []  # (after which event, the mark)
        self.interleaved = 0  # syncs that folded events while more were coming

    def informer(self, events: list[tuple[str, dict[str, Any]]], done: threading.Event) -> None:
        for kind, obj in events:
            with self.lock:
                if kind == "DELETED":
                    self.latest.pop(obj["metadata"]["name"], None)
                else:
                    self.latest[obj["metadata"]["name"]] = obj
            self.changes.record(kind, obj)
            time.sleep(0)  # gives the sync thread its turn, as a watch's network reads do
        done.set()

    def sync(self, rng: random.Random, busy: bool) -> None:
        count, taken = self.changes.take()
        self.state = self.state.observed(taken, OURS)
        self.interleaved += bool(taken) and busy
        with self.lock:
            seen = Seen(dict(self.latest), count)
        if rng.random() < 0.3:
            run = Run(False, seen)
            before = self.state.nodes.acknowledged
            self.state = steps.acknowledge(self.state, run, "a test")
            marked = {n for n, c in self.state.nodes.acknowledged.items() if before.get(n) != c}
            self.ops.append((count, ("acknowledge", marked)))
        names = [n for n in rng.sample(NAMES, rng.randint(0, 3)) if n in seen.nodes]
        if names:
            began = self.changes.count()  # as `_write_wave` reads it, before its writes
            done = [(n, rng.choice(CONFIGS)) for n in names[:2]]
            relabelled = [n for n, label in done if label is not None]
            released = names[2:]
            agent = {n for n in relabelled if config_state(seen.nodes[n]).agent}
            self.state = steps.remember_writes(self.state, seen.nodes, done, relabelled, released, "r", began)
            self.ops.append((began, ("write", done, relabelled, released, agent)))


@pytest.fixture
def switching() -> Iterator[None]:
    """Threads switch every few microseconds (not every 5 ms): far more interleavings per event."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(before)


def test_node_events_and_syncs_interleaved_end_as_a_serial_run_leaves_them(switching: None) -> None:
    interleaved = 0
    for seed in range(40):
        rng = random.Random(seed)
        events = [_event(rng) for _ in range(400)]
        run, done = ConcurrentRun(), threading.Event()
        thread = threading.Thread(target=run.informer, args=(events, done))
        thread.start()
        while not done.is_set():
            run.sync(rng, busy=True)
        thread.join()
        count, taken = run.changes.take()  # the last events
        run.state = run.state.observed(taken, OURS)
        assert count == len(events)
        interleaved += run.interleaved

        serial = SerialRun()
        marks = sorted(enumerate(run.ops), key=lambda o: (o[1][0], o[0]))
        for position in range(len(events) + 1):
            while marks and marks[0][1][0] == position:
                serial.mark(marks.pop(0)[1][1])
            if position < len(events):
                serial.event(*events[position])
        state = run.state
        assert set(state.nodes.awaiting) == serial.awaiting, seed
        assert set(state.nodes.acknowledged) == serial.acknowledged, seed
        assert {n: (w.label, w.release) for n, w in state.cache.written.labels.items()} == serial.written, seed
        assert (state.cache.resolved.topology, dict(state.cache.resolved.fingerprints)) == (
            serial.topology,
            serial.fingerprints,
        ), seed
    assert interleaved >= 1000, f"only {interleaved} syncs folded events while more were coming"


def test_a_reconciler_syncing_while_its_nodes_change_fails_no_sync_and_ends_where_a_fresh_one_starts(
    rapi, repo, gpu_nodes, make_reconciler
) -> None:
    """A real informer and real syncs: 300 node writes (state labels through pending and back, a label
    resolving reads) while syncs run back to back; no sync raises, and once the writes stop the
    reconciler plans what a reconciler started afterwards plans on its first sync."""
    names = gpu_nodes(8, pool="ev")
    nodes = (
        "version: v1\nrollout: {maxUnavailable: '100%'}\ndefault: all-disabled\nassignments:\n"
        "  - nodeSelector: {matchLabels: {pool: ev}}\n    config: all-1g.10gb\n"
    )
    repo.commit({"config.yaml": CONFIG_YAML, "nodes.yaml": nodes})
    rec = make_reconciler(repo.url)
    assert rec.sync().outcome == "Applied"
    agent_reports(rapi, CONFIG_YAML, names)
    eventually(lambda: rec.sync(fetch=False).outcome == "InSync")

    core, rng, stop, failures, syncs = k8s.CoreV1Api(rapi), random.Random(7), threading.Event(), [], [0]

    def sync_loop() -> None:
        while not stop.is_set():
            try:
                rec.sync(fetch=False)
                syncs[0] += 1
            except Exception as exc:  # noqa: BLE001 -- what the test looks for
                failures.append(repr(exc))

    thread = threading.Thread(target=sync_loop)
    thread.start()
    try:
        for i in range(300):
            name = rng.choice(names)
            if i % 3:
                agent_reports(rapi, CONFIG_YAML, [name], state=rng.choice(("pending", None)))
            else:
                core.patch_node(name, {"metadata": {"labels": {"rack": rng.choice(("r1", "r2", "r3"))}}})
        agent_reports(rapi, CONFIG_YAML, names)  # every node back at success
    finally:
        stop.set()
        thread.join(60)
    assert failures == [] and syncs[0] > 10, (failures[:3], syncs[0])

    # Once the informer has told every write, the plan is a fresh reconciler's.
    final = {n: core.read_node(n).metadata.resource_version for n in names}
    eventually(lambda: all(rec.nodes.get(n)["metadata"]["resourceVersion"] == final[n] for n in names))
    settled = rec.sync(fetch=False)
    fresh = make_reconciler(repo.url, name=rec.name).sync()  # the same MigSync, started now
    assert settled.outcome == fresh.outcome == "InSync" and settled.writes == fresh.writes == 0
    assert settled.plan is not None and fresh.plan is not None
    assert settled.plan.nodes == fresh.plan.nodes
    assert rec.state.nodes.awaiting == {} and rec.state.cache.written.labels == {}
    by_name = {n: rec.nodes.get(n) for n in names}
    assert {n: rec.state.cache.resolved.fingerprints[n] for n in names} == {
        n: topology(o["metadata"]["labels"], o["metadata"]["annotations"]) for n, o in by_name.items()
    }

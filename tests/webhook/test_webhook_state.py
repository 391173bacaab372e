"""The webhook's cluster state is maintained per event: after any sequence of watch events
(nodes added, relabelled, their GPUs or products changed, deleted; ClusterPolicies moving the MIG
ConfigMap or changing the strategy; ConfigMap edits; MigSyncs; re-lists after a 410, which the informer
reports as the differences), what the incremental state answers equals what a scan of the final
objects finds, index by index, and the rules give the same verdicts on both. And a Node verdict is
not invalidated by another node's change."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kubernetes import client as k8s
from webhook_helpers import A100, DEFAULT_CONFIG, H100, configmap, review

from migops.api.objects import NodeFacts
from migops.kube.informer import Informer, object_key
from migops.webhook import annotate, configmaps, policies
from migops.webhook.admission import parse_review
from migops.webhook.app import create_app
from migops.webhook.nodeindex import NodeIndex, NodeIndexer
from migops.webhook.state import (
    ClusterState,
    MigView,
    Snapshot,
    trim_configmap,
    trim_migsync,
    trim_node,
    trim_policy,
)

UNKNOWN = "0xDEAD10DE"
NAMES = [f"gpu-node-{i}" for i in range(8)]
CONFIGS = ["all-disabled", "all-balanced", "all-1g.10gb", "all-3g.40gb", "no-such-config"]
SMALL = "version: v1\nmig-configs:\n  all-disabled:\n    - devices: all\n      mig-enabled: false\n"
TEXTS = [DEFAULT_CONFIG, SMALL, "garbage: [", DEFAULT_CONFIG.replace("  all-balanced:\n", "  renamed:\n", 1)]
CM_TARGETS = [("gpu-operator", "default-mig-parted-config"), ("gpu-operator", "other-config")]


class Offline(ClusterState):
    """The real ClusterState and its event handlers, with informers that are never started: the test
    delivers their events itself."""

    def _start_informer(self, informer: Informer) -> None:
        pass


# ------------------------------------------------------------------------------------------ objects
_labels = st.fixed_dictionaries(
    {},
    optional={
        "nvidia.com/mig.config": st.sampled_from(CONFIGS),
        "migops.io/gpu.device-id": st.sampled_from([H100, A100, UNKNOWN]),
        "nvidia.com/gpu.product": st.sampled_from(
            ["NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-40GB", "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb"]
        ),
        "nvidia.com/gpu.count": st.sampled_from(["1", "2", "8", "x", "0"]),
        "nvidia.com/mig-1g.10gb.count": st.sampled_from(["0", "3"]),
        "nvidia.com/mig-3g.20gb.count": st.sampled_from(["0", "1"]),
        "kubernetes.io/hostname": st.just("h"),
    },
)
_node = st.builds(
    lambda name, labels, gpus, capacity: {
        "metadata": {"name": name, "labels": labels, "annotations": {"migops.io/gpus": gpus} if gpus else {}},
        "status": {"capacity": capacity},
    },
    st.sampled_from(NAMES),
    _labels,
    st.sampled_from([None, f"{H100},{H100}", f"{A100}," * 3 + A100, UNKNOWN]),
    st.fixed_dictionaries({}, optional={"nvidia.com/mig-2g.20gb": st.sampled_from(["0", "2"]), "cpu": st.just("8")}),
)
_policy = st.builds(
    lambda name, strategy, target, created: {
        "metadata": {"name": name, "creationTimestamp": created},
        "spec": {"mig": {"strategy": strategy}, "migManager": {"config": {"name": target[1]}}},
        "status": {"namespace": target[0]},
    },
    st.sampled_from(["cluster-policy", "second"]),
    st.sampled_from(["single", "mixed", "none", "bogus"]),
    st.sampled_from(CM_TARGETS),
    st.sampled_from(["2026-01-01T00:00:00Z", "2026-02-01T00:00:00Z"]),
)
_configmap = st.builds(
    lambda target, text: configmap(text, name=target[1], namespace=target[0]),
    st.sampled_from(CM_TARGETS),
    st.sampled_from(TEXTS),
)
_migsync = st.builds(
    lambda name, url, path: {
        "metadata": {"name": name, "namespace": "migops-system"},
        "spec": {"url": url, "path": path},
    },
    st.sampled_from(["a", "b"]),
    st.sampled_from(["https://git/x", "/srv/repo"]),
    st.sampled_from(["", "clusters/prod"]),
)

_event = st.one_of(
    st.tuples(st.just("node"), st.sampled_from(["ADDED", "MODIFIED"]), _node),
    st.tuples(st.just("node"), st.just("DELETED"), st.sampled_from(NAMES)),
    st.tuples(st.just("node-relist"), st.just("410"), st.lists(_node, max_size=8)),
    st.tuples(st.just("policy"), st.sampled_from(["ADDED", "MODIFIED"]), _policy),
    st.tuples(st.just("policy"), st.just("DELETED"), st.sampled_from(["cluster-policy", "second"])),
    st.tuples(st.just("configmap"), st.sampled_from(["ADDED", "MODIFIED"]), _configmap),
    st.tuples(st.just("configmap"), st.just("DELETED"), st.sampled_from(CM_TARGETS)),
    st.tuples(st.just("migsync"), st.sampled_from(["ADDED", "MODIFIED"]), _migsync),
    st.tuples(st.just("migsync"), st.just("DELETED"), st.sampled_from(["a", "b"])),
)


class World:
    """The objects as the API server holds them, and the state under test receiving their events."""

    def __init__(self) -> None:
        self.state = Offline(k8s.ApiClient())
        self.nodes: dict[str, dict] = {}
        self.policies: dict[str, dict] = {}
        self.configmaps: dict[tuple[str, str], dict] = {}
        self.migsyncs: dict[str, dict] = {}
        self.rv = 0
        self.state._retarget()  # the ClusterPolicy informer has listed (nothing): watch the default ConfigMap
        self._list_configmap()

    def _stamp(self, obj: dict) -> dict:
        self.rv += 1
        obj = json.loads(json.dumps(obj))
        obj["metadata"]["resourceVersion"] = str(self.rv)
        return obj

    def _list_configmap(self) -> None:
        """A new ConfigMap informer lists its target (what the real one does when started)."""
        found = self.configmaps.get(self.state._configmap_target)
        if found is not None:
            self.state.configmap._handler("ADDED", trim_configmap(found))

    def apply(self, event: tuple) -> None:
        source, kind, what = event
        s = self.state
        if source == "node":
            if kind == "DELETED":
                if what in self.nodes:
                    s._node_event("DELETED", trim_node(self.nodes.pop(what)))
            else:
                obj = self._stamp(what)
                kind = "MODIFIED" if obj["metadata"]["name"] in self.nodes else "ADDED"
                self.nodes[obj["metadata"]["name"]] = obj
                s._node_event(kind, trim_node(obj))
        elif source == "node-relist":  # a 410, then a list: the informer reports the differences
            fresh = {}
            for obj in what:
                fresh[obj["metadata"]["name"]] = self._stamp(obj)
            for name, obj in fresh.items():
                s._node_event("MODIFIED" if name in self.nodes else "ADDED", trim_node(obj))
            for name, obj in self.nodes.items():
                if name not in fresh:
                    s._node_event("DELETED", trim_node(obj))
            self.nodes = fresh
        elif source == "policy":
            if kind == "DELETED":
                if what in self.policies:
                    s._policy_event("DELETED", trim_policy(self.policies.pop(what)))
            else:
                obj = self._stamp(what)
                self.policies[obj["metadata"]["name"]] = obj
                s._policy_event(kind, trim_policy(obj))
            before = s.configmap
            s._retarget()  # as _policy_event does once the policies have listed
            if s.configmap is not before:
                # The old informer may still deliver an event before it stops: it must change nothing.
                old_target = next(t for t in CM_TARGETS if t != s._configmap_target)
                before._handler(
                    "ADDED", trim_configmap(configmap("garbage: [", name=old_target[1], namespace=old_target[0]))
                )
                self._list_configmap()
        elif source == "configmap":
            target = what if kind == "DELETED" else (what["metadata"]["namespace"], what["metadata"]["name"])
            if kind == "DELETED":
                obj = self.configmaps.pop(target, None)
            else:
                obj = self.configmaps[target] = self._stamp(what)
            if obj is not None and target == s._configmap_target:  # the informer watches its target only
                s.configmap._handler(kind, trim_configmap(obj))
        elif source == "migsync":
            key = f"migops-system/{what}" if kind == "DELETED" else object_key(what)
            if kind == "DELETED":
                obj = self.migsyncs.pop(key, None)
                if obj is not None:
                    s._migsync_event("DELETED", trim_migsync(obj))
            else:
                obj = self.migsyncs[key] = self._stamp(what)
                s._migsync_event(kind, trim_migsync(obj))

    def rebuilt(self) -> Snapshot:
        return Snapshot.build(
            0,
            [trim_node(n) for n in self.nodes.values()],
            [trim_policy(p) for p in self.policies.values()],
            [trim_configmap(c) for c in self.configmaps.values()],
            [trim_migsync(m) for m in self.migsyncs.values()],
        )


def scanned(views: list[NodeFacts]) -> dict[str, Any]:
    """What the indexes must answer, computed the plain way: one scan of
    every node in name order."""
    nodes = sorted(views, key=lambda n: n.name)
    users: dict[str, list[str]] = {}
    groups: dict[str, dict[tuple, list[str]]] = {}
    for n in nodes:
        if n.config:
            users.setdefault(n.config, []).append(n.name)
            groups.setdefault(n.config, {}).setdefault((n.device_ids, n.exact), []).append(n.name)
    gpu_sets: dict[frozenset, list[str]] = {}
    for n in nodes:
        if n.gpus:
            gpu_sets.setdefault(n.model_ids, []).append(n.name)
    return {
        "nodes": {n.name: n for n in nodes},
        "users": users,
        "users order": list(users),
        "groups": {c: [(ids, exact, names) for (ids, exact), names in g.items()] for c, g in groups.items()},
        "configured": [n.name for n in nodes if n.config],
        "gpu sets": gpu_sets,
        "models": frozenset(m for n in nodes if n.gpus for m in n.models),
        "offered": frozenset(r for n in nodes for r in n.offers),
        "config models": frozenset(g.device_id for n in nodes if n.config for g in n.gpus),
    }


def _not_served(index: NodeIndex, fit: frozenset[str], config: str) -> list[str]:
    return [n.name for n in index.not_served(fit, config)]


def _verdicts(snap: Snapshot) -> list:
    """The rules that read the nodes, on the same requests: the ConfigMap in force edited (a config
    removed) and deleted, the annotations it gets, a strategy switch."""
    ns, name = snap.settings.configmap
    edited = configmap(TEXTS[3], name=name, namespace=ns)
    reqs = [
        parse_review(review(edited, operation="UPDATE", old=configmap(DEFAULT_CONFIG, name=name, namespace=ns))),
        parse_review(review(None, operation="DELETE", old=edited)),
    ]
    out = [configmaps.validate(r, snap) for r in reqs] + [annotate.mutate(reqs[0], snap)]
    for strategy in ("single", "mixed"):
        policy = {"metadata": {"name": "cluster-policy"}, "spec": {"mig": {"strategy": strategy}}}
        out.append(
            policies.validate(
                parse_review(
                    review(
                        policy, operation="UPDATE", kind="ClusterPolicy", group="nvidia.com", old={**policy, "spec": {}}
                    )
                ),
                snap,
            )
        )
    return out


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_event, max_size=40))
def test_incremental_state_equals_a_full_rebuild(events: list) -> None:
    world = World()

    def observed() -> tuple:
        snap = world.state.snapshot()  # what a review holds: its summary, and its index once read
        s, index = snap.summary, snap.nodes
        placed = {n.name: (n.config, n.gpus, n.exact, n.gpu_problem) for n in index.nodes.values()}
        assert index.summary == s, "no event between the two reads: the index is the summary's"
        return (
            (s.version, placed),
            (s.offers_version, s.offered),
            (s.models_version, s.models_present),
        )

    before = observed()
    for event in events:
        world.apply(event)
        after = observed()
        for (old_version, old_seen), (new_version, new_seen) in zip(before, after):
            # A verdict cached under a version stays right only if what it read cannot change under it.
            assert old_seen == new_seen or old_version != new_version, event
        before = after
    # A snapshot is immutable: read without the state's lock.
    live = world.state.snapshot()
    rebuilt = world.rebuilt()
    assert live.settings == rebuilt.settings
    assert live.active_text == rebuilt.active_text and live.active_digest == rebuilt.active_digest
    assert dict(live.migsyncs) == dict(rebuilt.migsyncs)
    expected = scanned([NodeFacts.from_obj(trim_node(n)) for n in world.nodes.values()])
    for got in (live.nodes.view(), rebuilt.nodes.view()):
        assert got["nodes"] == expected["nodes"]
        assert got["users"] == expected["users"] and got["users order"] == expected["users order"]
        assert {c: sorted(g) for c, g in got["groups"].items()} == {c: sorted(g) for c, g in expected["groups"].items()}
        assert [g[2][0] for g in sum(got["groups"].values(), [])] == [
            g[2][0] for g in sum([sorted(v, key=lambda g: g[2][0]) for v in got["groups"].values()], [])
        ], "groups in name order"
        for key in ("configured", "gpu sets", "models", "offered", "config models"):
            assert got[key] == expected[key], key
    for fit in (frozenset({H100}), frozenset({A100}), frozenset({H100, A100})):
        for config in CONFIGS:
            want = [
                n.name
                for n in sorted(expected["nodes"].values(), key=lambda n: n.name)
                if n.gpus and n.config != config and not n.model_ids <= fit
            ]
            assert _not_served(live.nodes, fit, config) == want
            assert len(live.nodes.not_served(fit, config)) == len(want)
    assert _verdicts(live) == _verdicts(rebuilt)


# ------------------------------------------------------------------------------------------ caching
class Fixed:
    """A ClusterState stand-in for create_app: the real Snapshot, replaced by the test."""

    def __init__(self, snap: Snapshot) -> None:
        self.snap = snap
        self.synced = True

    def wait_synced(self, timeout: float) -> bool:
        return True

    def snapshot(self) -> Snapshot:
        return self.snap

    def errors(self) -> dict[str, str]:
        return {}


def _node(name: str, config: str) -> dict:
    return {
        "metadata": {
            "name": name,
            "labels": {"migops.io/gpu.device-id": H100, "nvidia.com/gpu.count": "8", "nvidia.com/mig.config": config},
        }
    }


def test_a_node_verdict_survives_other_nodes_changes() -> None:
    """A rollout relabels node after node: each review is the same question about the config in force,
    answered from the cache whatever the other nodes do; a new config in force is a new question."""
    from migops.webhook import metrics

    policy = {
        "metadata": {"name": "cluster-policy"},
        "spec": {"mig": {"strategy": "mixed"}},
        "status": {"namespace": "gpu-operator"},
    }
    snap = Snapshot.build(
        0, [trim_node(_node(n, "all-disabled")) for n in NAMES], [policy], [configmap(DEFAULT_CONFIG)]
    )
    indexer = NodeIndexer(NodeFacts.from_obj(trim_node(_node(n, "all-disabled"))) for n in NAMES)
    snap = replace(snap, summary=indexer.summary, index=indexer.index)
    state = Fixed(snap)
    client = create_app(state).test_client()
    hits = metrics.child(metrics.CACHE, "hit")
    body = review(
        _node("gpu-node-1", "all-balanced"), operation="UPDATE", old=_node("gpu-node-1", "all-disabled"), kind="Node"
    )
    assert client.post("/validate", json=body).json["response"]["allowed"] is True
    for name in NAMES[2:]:  # the rest of the rollout lands in the state
        indexer.put(NodeFacts.from_obj(trim_node(_node(name, "all-balanced"))))
        state.snap = replace(snap, summary=indexer.summary)
        before = hits._value.get()
        assert client.post("/validate", json=body).json["response"]["allowed"] is True
        assert hits._value.get() == before + 1, "answered from the cache"
    state.snap = replace(state.snap, mig=MigView(snap.settings, configmap(SMALL)))
    denied = client.post("/validate", json=body).json["response"]
    assert denied["allowed"] is False and "config-not-found" in denied["status"]["message"]


def test_a_review_holds_an_immutable_snapshot_and_never_the_states_lock() -> None:
    """A snapshot read before node events answers as before them (the state swapped in a new one), and
    a review, a cache miss included, is answered while the informers' handlers hold the state's lock
    (a slow rule never holds up the watch events, nor they the review)."""
    import threading

    world = World()
    policy = {"metadata": {"name": "cluster-policy"}, "spec": {"mig": {"strategy": "mixed"}}}
    world.apply(("policy", "ADDED", policy))
    world.apply(("configmap", "ADDED", configmap(DEFAULT_CONFIG)))
    world.apply(("node", "ADDED", _node("gpu-node-1", "all-disabled")))
    held = world.state.snapshot()
    assert [n.name for n in held.users["all-disabled"]] == ["gpu-node-1"]
    world.apply(("node", "ADDED", _node("gpu-node-2", "all-disabled")))
    world.apply(("node", "ADDED", _node("gpu-node-1", "all-balanced")))
    assert [n.name for n in held.users["all-disabled"]] == ["gpu-node-1"]  # as when it was taken
    now = world.state.snapshot()
    assert [n.name for n in now.users["all-disabled"]] == ["gpu-node-2"] and now.summary != held.summary

    class Synced:
        """The state's snapshots and lock, its informers taken as synced."""

        synced, lock, snapshot = True, world.state.lock, world.state.snapshot

        def wait_synced(self, timeout: float) -> bool:
            return True

        def errors(self) -> dict[str, str]:
            return {}

    client = create_app(Synced()).test_client()
    body = review(configmap(SMALL), operation="UPDATE", old=configmap(DEFAULT_CONFIG))  # a miss: judged now
    answers: list[Any] = []
    with world.state.lock:  # as a handler does while it applies an event
        thread = threading.Thread(target=lambda: answers.append(client.post("/validate", json=body).json))
        thread.start()
        thread.join(10)
    assert answers, "the review waited for the state's lock"
    denied = answers[0]["response"]
    assert denied["allowed"] is False and "config-in-use" in denied["status"]["message"], denied

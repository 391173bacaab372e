"""The reconciler's state is one value the sync swaps in; `migops diff` runs the sync's own steps with a
writer that writes nothing, so it changes nothing and says what a sync would do, refusals included."""

from __future__ import annotations

from gitrepo import CONFIG_YAML
from reconciler_harness import agent_reports, eventually, labels_of

from migops.api.names import MIG_CONFIG_LABEL


def _nodes(pool: str, config: str, rollout: str = "{maxUnavailable: '100%'}") -> str:
    return (
        f"version: v1\nrollout: {rollout}\ndefault: all-disabled\nassignments:\n"
        f"  - nodeSelector: {{matchLabels: {{pool: {pool}}}}}\n    config: {config}\n"
    )


def test_a_sync_swaps_in_a_new_state_and_the_diff_changes_nothing_and_refuses_as_the_sync_does(
    rapi, repo, gpu_nodes, make_reconciler
) -> None:
    names = gpu_nodes(2, pool="sv")
    first = repo.commit({"config.yaml": CONFIG_YAML, "nodes.yaml": _nodes("sv", "all-1g.10gb")})
    rec = make_reconciler(repo.url)
    before = rec.state
    assert rec.sync().outcome == "Applied"
    assert rec.state is not before and before.desired is None  # a new value; the old one is as it was
    assert rec.state.desired is not None and rec.state.desired.revision == first
    agent_reports(rapi, CONFIG_YAML, names)
    eventually(lambda: rec.sync(fetch=False).outcome == "InSync")
    assert rec.state.last_applied == first

    # A new commit: the diff shows every change, and leaves the state (the memory of nodes in it) and the
    # nodes alone.
    second = repo.commit({"nodes.yaml": _nodes("sv", "all-3g.40gb")})
    rec.diff(server_side=False)  # (folds in the node events recorded since the last sync)
    state, labels = rec.state, labels_of(rapi, names)
    found, result = rec.diff(server_side=False)
    assert found is not None and result.revision == second, result
    assert {(c.node, c.current, c.desired) for c in found.labels} == {(n, "all-1g.10gb", "all-3g.40gb") for n in names}
    assert rec.state is state and labels_of(rapi, names) == labels
    assert state.last_attempted == first  # the diff's fetch is not remembered either

    # A commit the sync refuses (a selector's typo moving both nodes to default past maxDefaulted):
    # the diff refuses it in the same words, as it runs the same steps (the guard included).
    repo.commit({"nodes.yaml": _nodes("svv", "all-3g.40gb", "{maxUnavailable: '100%', maxDefaulted: 0}")})
    found, refused = rec.diff(server_side=False)
    assert found is None and refused.outcome == "Invalid" and "rollout.maxDefaulted is 0" in refused.message
    assert rec.state is state and labels_of(rapi, names) == labels
    synced = rec.sync()
    assert (synced.outcome, synced.message) == (refused.outcome, refused.message)
    assert f"the cluster keeps revision {first[:12]}" in synced.message  # said by the summary, once
    assert {labels_of(rapi, names)[n][MIG_CONFIG_LABEL] for n in names} == {"all-1g.10gb"}

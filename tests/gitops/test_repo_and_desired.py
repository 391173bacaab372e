"""config.yaml + nodes.yaml → RepoSpec → DesiredState: assignments, precedence, and every problem with file and path."""

from __future__ import annotations

import pytest
from gitrepo import CONFIG_YAML, UNPLACEABLE, nodes_yaml

from migops.api.objects import MigSettings
from migops.gitops.desired import FitCache, resolve
from migops.gitops.repo import RepoError, load_repo

H100 = "0x233010DE"
A100 = "0x20B010DE"


def node(name: str, device: str = H100, count: int = 8, **labels: str) -> dict:
    return {
        "metadata": {
            "name": name,
            "labels": {"migops.io/gpu.device-id": device, "nvidia.com/gpu.count": str(count), **labels},
        }
    }


def spec(nodes_text: str, config: str = CONFIG_YAML, path: str = "c"):
    return load_repo({f"{path}/config.yaml": config.encode(), f"{path}/nodes.yaml": nodes_text.encode()}, path, "abc")


def problems(exc: pytest.ExceptionInfo[RepoError]) -> list[str]:
    return [str(p) for p in exc.value.problems if p.severity == "error"]


MIXED = MigSettings(strategy="mixed")


def test_selectors_names_and_default() -> None:
    s = spec(
        nodes_yaml(
            """
  - nodeSelector: {matchLabels: {pool: infer}}
    config: all-1g.10gb
  - nodes: [n3]
    config: five-1g-one-2g
  - nodeSelector: {matchExpressions: [{key: pool, operator: In, values: [train]}]}
    config: all-3g.40gb""",
            default="all-disabled",
        )
    )
    cluster = {
        "n1": node("n1", pool="infer"),
        "n2": node("n2", pool="train"),
        "n3": node("n3", pool="infer"),
        "n4": node("n4"),
        "cpu": {"metadata": {"name": "cpu", "labels": {}}},
    }
    got = resolve(s, cluster, MIXED)
    assert {n: t.config for n, t in got.targets.items()} == {
        "n1": "all-1g.10gb",
        "n2": "all-3g.40gb",
        "n3": "five-1g-one-2g",
        "n4": "all-disabled",
    }
    assert got.targets["n3"].source == "assignments[1]" and got.targets["n4"].source == "default"
    assert got.targets["n1"].digest == s.config.digest("all-1g.10gb")
    assert (got.namespace, got.configmap) == ("gpu-operator", "default-mig-parted-config")


def test_without_default_unmatched_nodes_are_left_alone() -> None:
    s = spec(nodes_yaml("  - nodes: [n1]\n    config: all-1g.10gb"))
    assert set(resolve(s, {"n1": node("n1"), "n2": node("n2")}, MIXED).targets) == {"n1"}


def test_two_selectors_on_one_node_is_an_error() -> None:
    s = spec(
        nodes_yaml("""
  - nodeSelector: {matchLabels: {pool: a}}
    config: all-1g.10gb
  - nodeSelector: {matchLabels: {zone: z}}
    config: all-3g.40gb""")
    )
    with pytest.raises(RepoError) as err:
        resolve(s, {"n1": node("n1", pool="a", zone="z"), "n2": node("n2", pool="a")}, MIXED)
    assert problems(err) == [
        "c/nodes.yaml: assignments[1]: node n1 matches both assignments[0] and "
        "assignments[1]; a node may match one selector only (list it under nodes: to choose) "
        "[selectors-overlap]"
    ]


def test_unplaceable_geometry_names_node_file_and_path() -> None:
    s = spec(nodes_yaml("  - nodeSelector: {matchLabels: {pool: a}}\n    config: too-many"), config=UNPLACEABLE)
    cluster = {f"n{i}": node(f"n{i}", pool="a") for i in range(8)}
    with pytest.raises(RepoError) as err:
        resolve(s, cluster, MIXED)
    (msg,) = problems(err)
    assert msg.startswith(
        "c/nodes.yaml: assignments[0].config: config 'too-many' cannot be applied to nodes "
        "n0, n1, n2, n3, n4 and 3 more (8 x "
    )
    assert 'c/config.yaml: mig-configs.too-many[0].mig-devices."1g.10gb"' in msg
    assert err.value.reason == "ValidationFailed"


def test_config_on_the_wrong_gpu_model() -> None:
    s = spec(nodes_yaml("  - nodes: [a100]\n    config: all-3g.40gb"))
    with pytest.raises(RepoError) as err:
        resolve(s, {"a100": node("a100", A100)}, MIXED)
    assert "cannot be applied to node a100 (8 x " in problems(err)[0]


def test_strategy_mismatch_is_refused() -> None:
    s = spec(nodes_yaml("  - nodes: [n1]\n    config: all-1g.10gb", strategy="mixed"))
    with pytest.raises(RepoError) as err:
        resolve(s, {"n1": node("n1")}, MigSettings(strategy="single", policy="cluster-policy"))
    assert err.value.reason == "StrategyMismatch"
    assert "does not match the cluster's MIG strategy 'single' (ClusterPolicy cluster-policy" in problems(err)[0]


def test_cluster_strategy_decides_fit() -> None:
    # five-1g-one-2g mixes profiles: fine under mixed, refused under single (GFD would mark the node invalid).
    s = spec(nodes_yaml("  - nodes: [n1]\n    config: five-1g-one-2g"))
    assert resolve(s, {"n1": node("n1")}, MIXED).targets["n1"].config == "five-1g-one-2g"
    with pytest.raises(RepoError):
        resolve(s, {"n1": node("n1")}, MigSettings(strategy="single"))


def test_missing_config_name_and_yaml_error_and_bad_fields() -> None:
    with pytest.raises(RepoError) as err:
        spec(nodes_yaml("  - nodes: [n1]\n    config: no-such-config", default="nor-this"))
    assert problems(err) == [
        "c/nodes.yaml: assignments[0].config: config 'no-such-config' is not in c/config.yaml (it has: all-disabled, "
        "all-1g.10gb, all-3g.40gb, five-1g-one-2g) [config-not-found]",
        "c/nodes.yaml: default: config 'nor-this' is not in c/config.yaml (it has: all-disabled, all-1g.10gb, "
        "all-3g.40gb, five-1g-one-2g) [config-not-found]",
    ]
    with pytest.raises(RepoError) as err:
        spec(nodes_yaml(), config=CONFIG_YAML.replace("mig-enabled: true", "mig-enabled: [true", 1))
    assert problems(err)[0].startswith("c/config.yaml: ") and "[yaml-syntax]" in problems(err)[0]
    with pytest.raises(RepoError) as err:
        spec(
            "version: v1\nrollout: {maxUnavailable: 0}\nassignments:\n  - nodes: []\n    config: x\n"
            "  - nodeSelector: {}\n    config: all-disabled\nextra: 1\n"
        )
    assert problems(err) == [
        "c/nodes.yaml: extra: unexpected field 'extra' (allowed: version, strategy, configMap, rollout, default, "
        "prune, assignments, suggest) [unexpected-field]",
        "c/nodes.yaml: rollout.maxUnavailable: maxUnavailable must be a whole number >= 1 or a percentage from "
        "\"1%\" to \"100%\", not 0 [invalid-max-unavailable]",
        "c/nodes.yaml: assignments[0].nodes: nodes must be a non-empty list of node names [invalid-nodes]",
        "c/nodes.yaml: assignments[1].nodeSelector: an empty nodeSelector would match every node; name the labels "
        "to match [empty-selector]",
    ]


def test_missing_files() -> None:
    with pytest.raises(RepoError) as err:
        load_repo({"config.yaml": CONFIG_YAML.encode()}, "", "abc")
    assert problems(err) == ["nodes.yaml: (document): nodes.yaml is missing at this revision [file-missing]"]


def test_an_unassigned_invalid_config_refuses_the_commit() -> None:
    """Offline (nodes.yaml checked without a cluster) it is a warning; against the cluster the whole
    config.yaml becomes the MIG ConfigMap, which the webhook judges config by config (and `migops
    validate` the file): one verdict, so the reconciler refuses it rather than meet a 422."""
    s = spec(nodes_yaml("  - nodes: [n1]\n    config: all-1g.10gb"), config=UNPLACEABLE)
    assert any("no assignment names this config" in str(w) for w in s.warnings)
    with pytest.raises(RepoError) as err:
        resolve(s, {"n1": node("n1")}, MIXED)
    found = problems(err)
    assert any(
        "too-many" in p and "is named by no assignment but is written into the MIG ConfigMap" in p for p in found
    ), found


def test_fit_cache_validates_each_shape_once() -> None:
    s = spec(nodes_yaml("  - nodeSelector: {matchLabels: {pool: a}}\n    config: all-1g.10gb"))
    cache = FitCache()
    cluster = {f"n{i}": node(f"n{i}", pool="a") for i in range(500)}
    assert len(resolve(s, cluster, MIXED, cache).targets) == 500
    # one node shape and the config's catalogue question (the errors of its text), each asked once, and
    # the catalogue question of each of the 3 configs no node takes (they are in the ConfigMap too)
    assert len(cache._items) == 2 + 3
    resolve(s, cluster, MIXED, cache)
    assert len(cache._items) == 5


def with_annotations(n: dict, **notes: str) -> dict:
    m = n["metadata"]
    return {**n, "metadata": {**m, "annotations": {**m.get("annotations", {}), **notes}}}


def test_nodes_alike_share_a_verdict_and_nodes_read_differently_never_do() -> None:
    """resolve works out selectors, GPUs and fit once per node shape (labels and annotations). Each node
    gets the verdict it gets as its own shape: the same cluster with every node made unique by an
    annotation nothing reads gets the same targets and the same problems."""
    s = spec(
        nodes_yaml(
            "  - nodeSelector: {matchLabels: {pool: a}}\n    config: all-1g.10gb\n"
            "  - nodeSelector: {matchLabels: {pool: b}}\n    config: all-3g.40gb",
            default="all-disabled",
        )
    )
    odd = node("odd", pool="a")
    odd["metadata"]["labels"]["example.com/list"] = ["not", "a", "string"]  # not a string: its own shape
    good = {f"h{i}": node(f"h{i}", pool="a") for i in range(5)} | {
        "t0": node("t0", pool="b"),
        "n0": node("n0", pool="c"),
        "odd": odd,
    }
    bad = {
        "a0": node("a0", A100, pool="a"),  # differs from h* in the device-ID label: A100 40GB has no 1g.10gb
        "a1": node("a1", A100, pool="a"),
        "g0": with_annotations(node("g0", pool="a"), **{"migops.io/gpus": ",".join([A100] * 8)}),  # only here
        "c0": node("c0", count=999, pool="a"),  # a count no node has: its GPUs cannot be read
    }

    def unique(cluster: dict) -> dict:
        return {name: with_annotations(n, **{"example.com/own": name}) for name, n in cluster.items()}

    shared = resolve(s, good, MIXED)
    assert shared.targets == resolve(s, unique(good), MIXED).targets
    assert {n: t.config for n, t in shared.targets.items()} == {
        **{f"h{i}": "all-1g.10gb" for i in range(5)},
        "t0": "all-3g.40gb",
        "n0": "all-disabled",
        "odd": "all-1g.10gb",
    }
    with pytest.raises(RepoError) as err:
        resolve(s, good | bad, MIXED)
    with pytest.raises(RepoError) as own:
        resolve(s, unique(good | bad), MIXED)
    assert problems(err) == problems(own)
    assert [p.split(": c/config.yaml")[0].split(": the node")[0] for p in problems(err)] == [
        "c/nodes.yaml: assignments[0].config: config 'all-1g.10gb' cannot be applied to nodes a0, a1, g0 "
        "(8 x A100-SXM4-40GB)",
        "c/nodes.yaml: assignments[0].config: config 'all-1g.10gb' cannot be applied to node c0",
    ]

"""migops.api.objects: the one reader of Nodes, ClusterPolicies and managedFields, on dicts and models."""

from __future__ import annotations

from kubernetes import client as k8s

from migops.api.names import MIG_CONFIG_LABEL, RECONCILER_MANAGER
from migops.api.objects import (
    MigSettings,
    NodeFacts,
    annotations_of,
    is_unmanaged,
    label_owner_entry,
    labels,
    meta,
    owned_keys,
    settings_from_policies,
)

H100 = "0x233010DE"


def _node(**extra: object) -> dict:
    return {
        "metadata": {
            "name": "n1",
            "labels": {
                "nvidia.com/mig.config": "all-1g.10gb",
                "nvidia.com/mig.config.state": "success",
                "nvidia.com/mig-1g.10gb.count": "7",
                "migops.io/gpu.device-id": H100,
                "nvidia.com/gpu.count": "2",
            },
            "annotations": {
                "migops.io/mig.config.digest": "sha256:d",
                "migops.io/mig.config.applied": "all-1g.10gb",
                "migops.io/managed-by": "migops-system/fleet",
                "migops.io/mig.config.revision": "abc",
                "migops.io/mig.drift": "GPU 0: missing 1g.10gb",
            },
            "managedFields": [
                {
                    "manager": RECONCILER_MANAGER,
                    "operation": "Apply",
                    "time": "2026-12-01T10:00:00Z",
                    "fieldsV1": {"f:metadata": {"f:labels": {"f:nvidia.com/mig.config": {}}}},
                }
            ],
            **extra,
        },
        "status": {"capacity": {"nvidia.com/mig-2g.20gb": "1", "nvidia.com/mig-3g.40gb": "0"}},
    }


def test_node_facts_read_every_part() -> None:
    f = NodeFacts.from_obj(_node())
    assert (f.name, f.config, f.state, f.digest, f.applied) == (
        "n1",
        "all-1g.10gb",
        "success",
        "sha256:d",
        "all-1g.10gb",
    )
    assert (f.managed_by, f.revision, f.drift, f.agent, f.unmanaged) == (
        "migops-system/fleet",
        "abc",
        "GPU 0: missing 1g.10gb",
        True,
        False,
    )
    assert f.owned and f.label_written_at == 1796119200.0
    assert f.offers == {"nvidia.com/mig-1g.10gb", "nvidia.com/mig-2g.20gb"}
    assert f.exact and f.device_ids == (H100, H100) and f.describe() == "2 x H100-SXM5-80GB"
    assert NodeFacts.from_obj(_node(), offers=False).offers == frozenset()


def test_node_facts_from_a_model_equal_those_from_its_json() -> None:
    model = k8s.V1Node(
        metadata=k8s.V1ObjectMeta(name="n1", labels={MIG_CONFIG_LABEL: "x", "migops.io/unmanaged": "true"})
    )
    f = NodeFacts.from_obj(model)
    assert (f.name, f.config, f.unmanaged, f.agent) == ("n1", "x", True, False)
    assert f == NodeFacts.from_obj(
        {"metadata": {"name": "n1", "labels": {MIG_CONFIG_LABEL: "x", "migops.io/unmanaged": "true"}}}
    )
    assert is_unmanaged(model) and labels(model)[MIG_CONFIG_LABEL] == "x"


def test_malformed_parts_read_as_absent() -> None:
    for obj in (None, {}, {"metadata": ["x"]}, {"metadata": {"labels": "x", "annotations": 3, "managedFields": {}}}):
        assert meta(obj) == {} or labels(obj) == {} and annotations_of(obj) == {}
        f = NodeFacts.from_obj(obj)
        assert (f.config, f.state, f.owned, f.gpus, f.unmanaged) == (None, None, False, (), False)
    bad = NodeFacts.from_obj({"metadata": {"name": "n", "annotations": {"migops.io/gpus": ",".join([H100] * 17)}}})
    assert bad.gpus == () and "more than the 16 GPUs" in (bad.gpu_problem or "")  # says why; raises nothing


def test_managed_fields_one_reader() -> None:
    node = _node()
    node["metadata"]["managedFields"] += [
        {"manager": "kubectl", "operation": "Update", "fieldsV1": {"f:metadata": {"f:labels": {"f:a": {}}}}},
        {
            "manager": RECONCILER_MANAGER,
            "operation": "Apply",
            "subresource": "status",
            "fieldsV1": {"f:status": {"f:capacity": {"f:example.com/dev": {}}}},
        },
    ]
    assert owned_keys(node, RECONCILER_MANAGER, ("metadata", "labels")) == {MIG_CONFIG_LABEL}
    assert owned_keys(node, RECONCILER_MANAGER, ("status", "capacity")) == set()
    assert owned_keys(node, RECONCILER_MANAGER, ("status", "capacity"), subresource="status") == {"example.com/dev"}
    assert owned_keys(node, "kubectl", ("metadata", "labels"), operation="Update") == {"a"}
    assert label_owner_entry(node, "kubectl", "a") is None  # an Update, not an Apply
    node["metadata"]["managedFields"] = node["metadata"]["managedFields"][1:]
    assert not NodeFacts.from_obj(node).owned  # another manager owning a label is not ours


def test_the_strategy_is_parsed_once() -> None:
    def policy(name: str, created: str, strategy: object) -> dict:
        return {"metadata": {"name": name, "creationTimestamp": created}, "spec": {"mig": {"strategy": strategy}}}

    assert MigSettings.from_obj(policy("p", "1", "mixed")).strategy == "mixed"
    assert MigSettings.from_obj(policy("p", "1", None)).strategy == "single"  # the CRD's default
    bogus = MigSettings.from_obj(policy("p", "1", "bogus"))
    assert bogus.strategy is None and bogus.strategy_text == "bogus"
    oldest = settings_from_policies([policy("b", "2", "none"), policy("a", "1", "mixed")])
    assert (oldest.policy, oldest.strategy) == ("a", "mixed")
    assert settings_from_policies([]) == MigSettings()

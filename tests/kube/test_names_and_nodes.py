"""Pure parts of migops.kube: ClusterPolicy settings, a Node's GPUs."""

from __future__ import annotations

import pytest

from migops.api.names import GPUS_ANNOTATION
from migops.api.objects import MigSettings, node_gpus, settings_from_policies
from migops.mig.catalogue import UnknownGpuError


def _policy(name: str, created: str, **spec: object) -> dict:
    return {"metadata": {"name": name, "creationTimestamp": created}, "spec": spec}


def test_settings_defaults_without_a_policy() -> None:
    assert settings_from_policies([]) == MigSettings()
    assert MigSettings().configmap == ("gpu-operator", "default-mig-parted-config")


def test_settings_come_from_the_oldest_policy() -> None:
    newer = _policy("b", "2026-01-02T00:00:00Z", mig={"strategy": "none"})
    older = _policy(
        "a",
        "2026-01-01T00:00:00Z",
        mig={"strategy": "mixed"},
        migManager={"config": {"name": "custom-mig", "default": ""}},
    )
    older["status"] = {"namespace": "nvidia-gpu-operator"}
    s = settings_from_policies([newer, older])
    assert (s.strategy, s.config_name, s.namespace, s.default_config, s.policy) == (
        "mixed",
        "custom-mig",
        "nvidia-gpu-operator",
        "all-disabled",
        "a",
    )


def _node(labels: dict | None = None, annotations: dict | None = None) -> dict:
    return {"metadata": {"name": "n", "labels": labels or {}, "annotations": annotations or {}}}


def test_node_gpus_from_the_agents_annotation_is_exact_and_ordered() -> None:
    found = node_gpus(_node(annotations={GPUS_ANNOTATION: "0x233010DE,0x20B010DE"}))
    assert found is not None and found.exact
    assert [g.device_id for g in found.gpus] == ["0x233010DE", "0x20B010DE"]


def test_node_gpus_from_labels() -> None:
    found = node_gpus(_node({"migops.io/gpu.device-id": "0x233010DE", "nvidia.com/gpu.count": "8"}))
    assert found is not None and found.exact and len(found.gpus) == 8
    by_product = node_gpus(_node({"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "2"}))
    assert by_product is not None and [g.device_id for g in by_product.gpus] == ["0x233010DE"] * 2


def test_node_gpus_under_single_strategy_knows_the_model_not_the_count() -> None:
    found = node_gpus(
        _node({"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb", "nvidia.com/gpu.count": "7"})
    )
    assert found is not None and not found.exact
    assert [g.device_id for g in found.gpus] == ["0x233010DE"]


def test_node_without_gpus_and_unknown_gpus() -> None:
    assert node_gpus(_node({"kubernetes.io/os": "linux"})) is None
    with pytest.raises(UnknownGpuError):
        node_gpus(_node({"nvidia.com/gpu.product": "NVIDIA-Quantum-Toaster"}))

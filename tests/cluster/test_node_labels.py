"""Node labels through server-side apply, and a watch that sees them change.

This is how migops will publish `nvidia.com/mig.config`, so the semantics the reconciler relies
on are pinned down here against the real API server: ownership per field manager, removal of a
label a manager stops applying, conflicts between managers.
"""

from __future__ import annotations

import threading

import pytest
from kubernetes import client as k8s
from kubernetes import watch
from kubernetes.client.exceptions import ApiException

APPLY = "application/apply-patch+yaml"
MANAGER = "migops-test"


def _apply_labels(
    core: k8s.CoreV1Api, node: str, labels: dict[str, str], manager: str = MANAGER, force: bool | None = None
) -> k8s.V1Node:
    body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node, "labels": labels}}
    kwargs = {"force": force} if force is not None else {}
    return core.patch_node(node, body, field_manager=manager, _content_type=APPLY, **kwargs)


def _owned_labels(n: k8s.V1Node, manager: str) -> set[str]:
    for entry in n.metadata.managed_fields or []:
        if entry.manager == manager and entry.operation == "Apply":
            labels = (entry.fields_v1 or {}).get("f:metadata", {}).get("f:labels", {})
            return {k.removeprefix("f:") for k in labels}
    return set()


def test_apply_sets_labels_under_the_named_field_manager(admin, node) -> None:
    core = k8s.CoreV1Api(admin)
    result = _apply_labels(core, node, {"nvidia.com/mig.config": "all-1g.10gb", "migops.io/owner": "test"})
    assert result.metadata.labels["nvidia.com/mig.config"] == "all-1g.10gb"
    assert _owned_labels(core.read_node(node), MANAGER) == {"nvidia.com/mig.config", "migops.io/owner"}


def test_omitting_a_label_in_the_next_apply_removes_only_that_label(admin, node) -> None:
    core = k8s.CoreV1Api(admin)
    _apply_labels(core, node, {"a.example/one": "1", "a.example/two": "2"})
    _apply_labels(core, node, {"b.example/other": "x"}, manager="other-manager")

    after = _apply_labels(core, node, {"a.example/one": "1"})  # stop applying a.example/two
    assert "a.example/two" not in after.metadata.labels
    assert after.metadata.labels["a.example/one"] == "1"
    assert after.metadata.labels["b.example/other"] == "x"  # another manager's label survives
    assert _owned_labels(after, MANAGER) == {"a.example/one"}
    assert _owned_labels(after, "other-manager") == {"b.example/other"}


def test_conflicting_managers_get_409_unless_forced(admin, node) -> None:
    core = k8s.CoreV1Api(admin)
    _apply_labels(core, node, {"nvidia.com/mig.config": "all-disabled"}, manager="gpu-operator")
    with pytest.raises(ApiException) as err:
        _apply_labels(core, node, {"nvidia.com/mig.config": "all-1g.10gb"})
    assert err.value.status == 409
    assert "conflict" in err.value.body.lower()
    assert core.read_node(node).metadata.labels["nvidia.com/mig.config"] == "all-disabled"

    forced = _apply_labels(core, node, {"nvidia.com/mig.config": "all-1g.10gb"}, force=True)
    assert forced.metadata.labels["nvidia.com/mig.config"] == "all-1g.10gb"
    assert _owned_labels(forced, MANAGER) == {"nvidia.com/mig.config"}
    assert "nvidia.com/mig.config" not in _owned_labels(forced, "gpu-operator")


def test_watch_sees_the_label_change(admin, node) -> None:
    core = k8s.CoreV1Api(admin)
    _apply_labels(core, node, {"nvidia.com/mig.config": "all-disabled"})
    listed = core.list_node(field_selector=f"metadata.name={node}")
    start_rv = listed.metadata.resource_version

    seen: list[tuple[str, str | None]] = []
    w = watch.Watch()

    def consume() -> None:
        for event in w.stream(
            core.list_node,
            field_selector=f"metadata.name={node}",
            resource_version=start_rv,
            timeout_seconds=20,
            _request_timeout=30,
        ):
            value = (event["object"].metadata.labels or {}).get("nvidia.com/mig.config")
            seen.append((event["type"], value))
            if value == "all-1g.10gb":
                w.stop()

    thread = threading.Thread(target=consume, daemon=True)
    thread.start()
    _apply_labels(core, node, {"nvidia.com/mig.config": "all-1g.10gb"})
    thread.join(timeout=40)
    assert not thread.is_alive(), f"watch never saw the change; events: {seen}"
    assert ("MODIFIED", "all-1g.10gb") in seen

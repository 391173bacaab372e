"""Mutated AdmissionReviews of every kind the webhook serves: the webhook must answer none of them with a 5xx.

Used by bench/webhook_fuzz.py (100,000 reviews, prints the count of 5xx: must be 0) and
tests/webhook/test_webhook_direct.py (a few thousand). Each review starts from a realistic one (a MIG
ConfigMap, a Node as GFD and the agent label it, the ClusterPolicy, a Pod asking for MIG devices, a
ResourceClaim, a kind the webhook does not judge) and gets one to four mutations at random places:
a value replaced by a nasty one (digits str.isdigit() passes and int() refuses, numbers beyond 64 bits,
lone surrogates, 1,000-deep nesting, wrong types), a key removed, a key added, or the serialised bytes
cut or corrupted. Deterministic: review i of seed s is always the same bytes.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CONFIG = (ROOT / "examples" / "nvidia-default-config.yaml").read_text()
H100, A100 = "0x233010DE", "0x20B010DE"
CM_NS, CM_NAME = "gpu-operator", "default-mig-parted-config"
POLICY = {
    "apiVersion": "nvidia.com/v1",
    "kind": "ClusterPolicy",
    "metadata": {"name": "cluster-policy", "creationTimestamp": "2026-01-01T00:00:00Z"},
    "spec": {
        "mig": {"strategy": "mixed"},
        "migManager": {
            "enabled": True,
            "repository": "nvcr.io/nvidia/cloud-native",
            "image": "k8s-mig-manager",
            "version": "v0.12.1",
            "config": {"name": CM_NAME, "default": "all-disabled"},
        },
    },
    "status": {"namespace": CM_NS},
}
SMALL_CONFIG = (
    "version: v1\nmig-configs:\n  all-disabled:\n    - devices: all\n      mig-enabled: false\n"
    "  all-1g.10gb:\n    - devices: all\n      mig-enabled: true\n      mig-devices:\n        1g.10gb: 7\n"
)


def node(name: str, device: str = H100, config: str = "all-disabled", **extra_labels: str) -> dict[str, Any]:
    labels = {
        "kubernetes.io/hostname": name,
        "migops.io/gpu.device-id": device,
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3" if device == H100 else "NVIDIA-A100-SXM4-40GB",
        "nvidia.com/gpu.count": "8",
        "nvidia.com/mig.config": config,
        "nvidia.com/mig.config.state": "success",
        "nvidia.com/mig-1g.10gb.count": "56",
        **extra_labels,
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": {
                "migops.io/gpus": ",".join([device] * 8),
                "migops.io/managed-by": "migops-system/fleet",
            },
            "managedFields": [
                {
                    "manager": "migops-reconciler",
                    "operation": "Apply",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:metadata": {"f:labels": {"f:nvidia.com/mig.config": {}}}},
                }
            ],
        },
        "status": {"capacity": {"cpu": "64", "nvidia.com/mig-1g.10gb": "56"}},
    }


def configmap(text: str, name: str = CM_NAME, labels: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": CM_NS}
    if labels:
        meta["labels"] = labels
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"config.yaml": text}}


def pod(resource: str = "nvidia.com/mig-1g.10gb") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "trainer", "namespace": "team-a", "annotations": {"a": "b"}},
        "spec": {
            "containers": [{"name": "c", "image": "i", "resources": {"limits": {resource: "1", "cpu": "2"}}}],
            "initContainers": [{"name": "i", "image": "i", "resources": {"requests": {resource: 1}}}],
            "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb"},
            "affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}},
        },
    }


def claim() -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "claim", "namespace": "team-a"},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "mig",
                        "exactly": {"deviceClassName": "mig.nvidia.com", "count": 1},
                    }
                ],
                "config": [{"opaque": {"driver": "gpu.nvidia.com", "parameters": {"profile": "1g.10gb"}}}],
            }
        },
    }


def review(
    obj: dict[str, Any] | None,
    *,
    operation: str = "CREATE",
    old: dict[str, Any] | None = None,
    uid: str = "0",
    sub_resource: str = "",
    username: str = "system:serviceaccount:migops-system:migops-reconciler",
) -> dict[str, Any]:
    some = obj or old or {}
    api_version = some.get("apiVersion", "v1")
    group, _, version = api_version.rpartition("/")
    meta = some.get("metadata") or {}
    kind = some.get("kind", "ConfigMap")
    request: dict[str, Any] = {
        "uid": uid,
        "kind": {"group": group, "version": version, "kind": kind},
        "resource": {"group": group, "version": version, "resource": kind.lower() + "s"},
        "name": meta.get("name", ""),
        "namespace": meta.get("namespace", ""),
        "operation": operation,
        "userInfo": {"username": username, "groups": ["system:authenticated"]},
        "object": obj,
        "oldObject": old,
        "dryRun": False,
    }
    if sub_resource:
        request["subResource"] = sub_resource
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def seeds() -> list[tuple[str, dict[str, Any]]]:
    """(path, review): the ordinary reviews the mutations start from."""
    labelled = configmap(SMALL_CONFIG, name="prepared", labels={"migops.io/mig-config": "true"})
    balanced = node("gpu-node-1", config="all-balanced")
    return [
        ("/validate", review(configmap(DEFAULT_CONFIG), operation="UPDATE", old=configmap(DEFAULT_CONFIG))),
        ("/mutate", review(configmap(DEFAULT_CONFIG), operation="UPDATE", old=configmap(DEFAULT_CONFIG))),
        ("/validate", review(labelled)),
        ("/mutate", review(labelled)),
        ("/validate", review(None, operation="DELETE", old=configmap(DEFAULT_CONFIG))),
        ("/validate", review(balanced, operation="UPDATE", old=node("gpu-node-1"))),
        ("/validate", review(node("gpu-node-2", A100), operation="UPDATE", old=node("gpu-node-2", A100))),
        ("/validate", review(balanced, operation="UPDATE", old=node("gpu-node-1"), sub_resource="status")),
        ("/validate", review(balanced, operation="UPDATE", old=node("gpu-node-1"), username="admin")),
        ("/validate", review(node("gpu-node-9"))),
        ("/validate", review(POLICY)),
        ("/validate", review(_strategy(POLICY, "single"), operation="UPDATE", old=POLICY)),
        ("/validate", review(POLICY, operation="UPDATE", old=POLICY, sub_resource="status")),
        ("/validate", review(None, operation="DELETE", old=POLICY)),
        ("/validate", review(pod())),
        ("/mutate", review(pod())),
        ("/validate", review(pod("nvidia.com/mig-1g.10g"))),
        ("/validate", review(claim())),
        ("/validate", review({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "x"}})),
    ]


def _strategy(policy: dict[str, Any], strategy: str) -> dict[str, Any]:
    copy = json.loads(json.dumps(policy))
    copy["spec"]["mig"]["strategy"] = strategy
    return copy


_DEEP = re.compile(r'"\\u0000deep(\d+)"')


def nasty(rng: random.Random) -> Any:
    """A value no well-formed object holds where it lands (the deep ones are spliced in as text)."""
    choice = rng.randrange(22)
    return [
        lambda: "²",
        lambda: "٣",
        lambda: "",
        lambda: "-1",
        lambda: "0",
        lambda: "9" * rng.choice((4, 20, 400)),
        lambda: 2**70 * rng.choice((1, -1)),
        lambda: rng.choice((1e308, -0.0, 3.5, 0)),
        lambda: rng.choice((True, False)),
        lambda: None,
        lambda: [],
        lambda: {},
        lambda: [rng.choice(("a", 1, None, {}))] * rng.choice((1, 3, 1000)),
        lambda: {f"k{i}": "v" for i in range(rng.choice((1, 50)))},
        lambda: "\ud800" + "x",
        lambda: "x" * rng.choice((64, 254, 100_000)),
        lambda: f"\u0000deep{rng.choice((50, 99, 101, 500, 1000, 1100))}",
        lambda: rng.choice(("all-balanced", "all-1g.10gb", "all-disabled", "unknown-config", "mixed", "single")),
        lambda: rng.choice(("nvidia.com/mig-1g.10gb", "nvidia.com/gpu", "0x233010DE", "0x20B010DE", "0xFFFF")),
        lambda: rng.choice(("CREATE", "UPDATE", "DELETE", "CONNECT", "PATCH")),
        lambda: "version: v1\nmig-configs:\n  x: [{devices: all, mig-enabled: true, mig-devices: {1g.10gb: ²}}]\n",
        lambda: "".join(rng.choice("{}[]:,\"'&*!| \n-ab1²") for _ in range(rng.randrange(1, 60))),
    ][choice]()


_KEYS = (
    "nvidia.com/gpu.count",
    "nvidia.com/mig-1g.10gb.count",
    "nvidia.com/mig.config",
    "migops.io/gpu.device-id",
    "migops.io/gpus",
    "migops.io/managed-by",
    "migops.io/unmanaged",
    "migops.io/mig-config",
    "config.yaml",
    "strategy",
    "mig",
    "migManager",
    "namespace",
    "limits",
    "nvidia.com/mig-1g.10gb",
    "subResource",
    "parameters",
)


def _containers(doc: Any, path: tuple = ()) -> Iterator[tuple[tuple, Any]]:
    """Every (path, container) in the document, the root included."""
    stack = [(path, doc)]
    while stack:
        here, value = stack.pop()
        yield here, value
        if isinstance(value, dict):
            stack.extend((here + (k,), v) for k, v in value.items() if isinstance(v, (dict, list)))
        elif isinstance(value, list):
            stack.extend((here + (i,), v) for i, v in enumerate(value) if isinstance(v, (dict, list)))


def mutate(doc: dict[str, Any], rng: random.Random) -> None:
    """One mutation of `doc`, in place: three times in four inside the object under review (what the
    rules read), else anywhere (the envelope)."""
    request = doc.get("request")
    inner = [request.get(k) for k in ("object", "oldObject")] if isinstance(request, dict) else []
    inner = [o for o in inner if isinstance(o, dict) and o]
    root = rng.choice(inner) if inner and rng.random() < 0.75 else doc
    containers = [c for _, c in _containers(root) if c]
    target = rng.choice(containers)
    action = rng.randrange(4)
    if isinstance(target, list):
        index = rng.randrange(len(target))
        if action == 0:
            del target[index]
        else:
            target[index] = nasty(rng)
        return
    key = rng.choice(list(target))
    if action == 0:
        del target[key]
    elif action == 1:
        target[rng.choice(_KEYS)] = nasty(rng)
    else:
        target[key] = nasty(rng)


def fuzzed(i: int, seed: int = 0) -> tuple[str, bytes, object]:
    """Review i: (path, body, its request.uid after the mutations)."""
    rng = random.Random(seed * 1_000_003 + i)
    cases = _SEEDS
    path, base = cases[rng.randrange(len(cases))]
    doc = json.loads(base)
    doc["request"]["uid"] = f"fuzz-{seed}-{i}"
    for _ in range(rng.randint(1, 4)):
        mutate(doc, rng)
    request = doc.get("request")
    uid = request.get("uid") if isinstance(request, dict) else None
    text = _DEEP.sub(lambda m: "[" * int(m.group(1)) + "]" * int(m.group(1)), json.dumps(doc))
    body = text.encode("utf-8", "surrogatepass")
    roll = rng.random()
    if roll < 0.04:
        uid = None  # the cut or the corrupted byte may fall in the uid: no answer to compare
    if roll < 0.02:
        body = body[: rng.randrange(len(body))]
    elif roll < 0.04:
        at = rng.randrange(len(body))
        body = body[:at] + bytes([rng.randrange(256)]) + body[at + 1 :]
    return path, body, uid


_SEEDS = [(path, json.dumps(doc)) for path, doc in seeds()]


def state_objects() -> dict[str, list[dict[str, Any]]]:
    """The cluster the reviews are judged against: Snapshot.build's arguments."""
    nodes = [node("gpu-node-1"), node("gpu-node-2", A100, "all-1g.5gb"), node("gpu-node-3", config="all-balanced")]
    return {
        "nodes": nodes,
        "policies": [POLICY],
        "configmaps": [configmap(DEFAULT_CONFIG)],
        "migsyncs": [
            {
                "metadata": {"name": "fleet", "namespace": "migops-system"},
                "spec": {"url": "https://git.example/fleet.git", "ref": "main", "path": "clusters/a"},
            }
        ],
    }


class FixedState:
    """A ClusterState stand-in for create_app: a Snapshot of state_objects(), always synced."""

    def __init__(self) -> None:
        import threading

        from migops.webhook.state import Snapshot, trim_node, trim_policy

        objects = state_objects()
        self.lock = threading.RLock()
        self.synced = True
        self.snap = Snapshot.build(
            0,
            [trim_node(n) for n in objects["nodes"]],
            [trim_policy(p) for p in objects["policies"]],
            objects["configmaps"],
            objects["migsyncs"],
        )

    def wait_synced(self, timeout: float) -> bool:
        return True

    def snapshot(self) -> Any:
        return self.snap

    def errors(self) -> dict[str, str]:
        return {}


def app() -> Any:
    """The webhook's Flask app over FixedState; a switch target ConfigMap is read from state_objects."""
    from migops.webhook.app import ReviewPorts, create_app

    def read(namespace: str, name: str) -> dict[str, Any] | None:
        if (namespace, name) == ("team-a", CM_NAME):
            return configmap(SMALL_CONFIG)
        return None

    return create_app(FixedState(), ReviewPorts(read_configmap=read))


def run(count: int, seed: int = 0, *, client: Any = None) -> tuple[dict[int, int], list[tuple[int, str, bytes]]]:
    """Post `count` fuzzed reviews to the app: (HTTP status -> count, the first 5xx: (i, path, answer))."""
    client = client or app().test_client()
    statuses: dict[int, int] = {}
    errors: list[tuple[int, str, bytes]] = []
    for i in range(count):
        path, body, uid = fuzzed(i, seed)
        resp = client.post(path, data=body, content_type="application/json")
        statuses[resp.status_code] = statuses.get(resp.status_code, 0) + 1
        if resp.status_code >= 500 and len(errors) < 10:
            errors.append((i, path, resp.data[:300]))
        if resp.status_code == 200:
            answer = json.loads(resp.data)["response"]
            if (uid is not None and answer["uid"] != uid) or not isinstance(answer["allowed"], bool):
                errors.append((i, path, b"answer for another uid, or no verdict: " + resp.data[:200]))
    return statuses, errors

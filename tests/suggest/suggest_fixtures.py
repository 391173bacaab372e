"""Cluster objects for the suggest tests: GPU nodes as the agent publishes them, pods pending and running."""

from __future__ import annotations

import json

from gitrepo import CONFIG_YAML, nodes_yaml

from migops.gitops.repo import load_repo

H100 = "0x233010DE"
A100_40 = "0x20B010DE"

ONE_G = [{"profile": "1g.10gb", "start": s, "size": 1, "compute": [1]} for s in range(7)]


def layout(*gpus: list[dict], device: str = H100) -> str:
    return json.dumps(
        [{"gpu": i, "device_id": device, "mig_enabled": bool(inst), "instances": inst} for i, inst in enumerate(gpus)]
    )


def node(name: str, gpus: list[list[dict]], *, device: str = H100, config: str = "all-1g.10gb", **labels: str) -> dict:
    """A node the agent runs: migops.io/gpus, the layout, GFD's labels for mixed, allocatable."""
    from collections import Counter

    counts = Counter(i["profile"] for g in gpus for i in g)
    gfd = {f"nvidia.com/mig-{p}.count": str(n) for p, n in counts.items()}
    return {
        "metadata": {
            "name": name,
            "labels": {
                "migops.io/gpu.device-id": device,
                "nvidia.com/gpu.count": str(len(gpus)),
                "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3" if device == H100 else "NVIDIA-A100-SXM4-40GB",
                "nvidia.com/mig.config": config,
                **gfd,
                **labels,
            },
            "annotations": {
                "migops.io/gpus": ",".join([device] * len(gpus)),
                "migops.io/mig.layout": layout(*gpus, device=device),
            },
        },
        "status": {"allocatable": {f"nvidia.com/mig-{p}": str(n) for p, n in counts.items()}},
    }


def pod(
    name: str,
    resource: str = "nvidia.com/mig-3g.40gb",
    count: int = 1,
    *,
    node: str | None = None,
    priority: int | None = None,
    selector: dict | None = None,
    namespace: str = "ml",
) -> dict:
    spec: dict = {"containers": [{"name": "c", "resources": {"limits": {resource: str(count)}}}]}
    if node:
        spec["nodeName"] = node
    if priority is not None:
        spec["priority"] = priority
    if selector:
        spec["nodeSelector"] = selector
    return {
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
        "status": {"phase": "Running" if node else "Pending"},
    }


def repo(nodes_text: str | None = None, config: str = CONFIG_YAML, path: str = "c"):
    text = nodes_text or nodes_yaml("  - nodeSelector: {matchLabels: {pool: ml}}\n    config: all-1g.10gb")
    return load_repo({f"{path}/config.yaml": config.encode(), f"{path}/nodes.yaml": text.encode()}, path, "abc")

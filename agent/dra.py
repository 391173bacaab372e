"""The agent under Dynamic Resource Allocation (static MIG): after a geometry change, the node's
ResourceSlices from NVIDIA's DRA driver must list exactly the instances the GPUs now have.

- `verify` mode (real nodes): the driver's kubelet plugin advertises the MIG devices that exist when it
  starts, so the agent deletes its pods on this node (a configurable label selector, the driver's chart's
  by default; its DaemonSet starts them again) and waits until the driver's slices for this node list the
  instances the GPUs have, by parent GPU, profile and placement. A mismatch at the deadline is a failure
  the agent reports (nvidia.com/mig.config.state=failed with the difference), never silence.
- `publish` mode (simulated GPUs, `migops local up --dra`): no driver runs, so the agent itself publishes
  the slice the driver would, in its attribute contract (migops.mig.dra.mig_device), and then verifies it
  through the API like the real thing. A stand-in, as the simulated GPUs stand in for NVML: never used
  with the NVML backend.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from migops.agent.backend import Device, GpuState
from migops.kube import ssa
from migops.mig import dra
from migops.mig.catalogue import GpuModel

log = logging.getLogger(__name__)

Mode = Literal["verify", "publish"]
RESOURCE_API = "resource.k8s.io/v1"
FIELD_MANAGER = "migops-agent-dra"
# Instance identity, as both sides can tell it: the parent GPU's UUID, the profile, the placement start.
Instance = tuple[str, str, int | None]


@dataclass(frozen=True)
class DraOptions:
    mode: Mode
    plugin_selector: str = dra.KUBELET_PLUGIN_SELECTOR  # the driver's kubelet plugin pods (label selector)
    plugin_namespace: str | None = None  # None: any namespace
    timeout: float = 120.0  # how long the restarted plugin may take to publish
    interval: float = 2.0


def mig_uuid(parent: str, gi: int) -> str:
    """A stable MIG device UUID for a simulated instance (NVML's are random per creation)."""
    return f"MIG-{uuid.uuid5(uuid.NAMESPACE_OID, f'{parent}/{gi}')}"


def slice_name(node: str) -> str:
    return f"{node}-{dra.DRIVER}"


def devices_for(
    devices: Sequence[Device], models: Sequence[GpuModel], states: Sequence[GpuState]
) -> list[dict[str, Any]]:
    """The v1 Device entries the driver would publish for the instances the GPUs have now."""
    out: list[dict[str, Any]] = []
    for device, model, state in zip(devices, models, states, strict=True):
        by_name = {gi.name: gi for gi in model.profiles}
        facts = dra.GpuFacts(minor=device.index, uuid=device.uuid)
        for inst in sorted(state.instances, key=lambda i: i.start):
            gi = by_name.get(inst.profile)
            if gi is None:
                continue  # an instance the catalogue does not know: nothing to advertise it as
            out.append(dra.mig_device(model, gi, facts=facts, start=inst.start, uuid=mig_uuid(device.uuid, inst.id)))
    return out


def expected(devices: Sequence[Device], states: Sequence[GpuState]) -> Counter[Instance]:
    return Counter(
        (device.uuid, inst.profile, inst.start)
        for device, state in zip(devices, states, strict=True)
        for inst in state.instances
    )


def _start(entry: Mapping[str, Any]) -> int | None:
    slices = [int(k.removeprefix("memorySlice")) for k in entry.get("capacity") or {} if k.startswith("memorySlice")]
    return min(slices) if slices else None


def listed(slices: Iterable[Mapping[str, Any]], node: str) -> Counter[Instance]:
    """The MIG instances the driver's slices for `node` advertise (the newest generation of each pool)."""
    mine = [
        s
        for s in slices
        if (s.get("spec") or {}).get("driver") == dra.DRIVER and (s.get("spec") or {}).get("nodeName") == node
    ]
    newest: dict[str, int] = {}
    for s in mine:
        pool = (s["spec"].get("pool") or {}).get("name", "")
        newest[pool] = max(newest.get(pool, 0), int((s["spec"].get("pool") or {}).get("generation", 0)))
    out: Counter[Instance] = Counter()
    for s in mine:
        pool = s["spec"].get("pool") or {}
        if int(pool.get("generation", 0)) != newest[pool.get("name", "")]:
            continue  # an older generation the driver has not removed yet: the scheduler ignores it
        for entry in s["spec"].get("devices") or []:
            attrs = entry.get("attributes") or {}
            if (attrs.get("type") or {}).get("string") != dra.MIG_TYPE:
                continue
            parent = (attrs.get("parentUUID") or {}).get("string", "")
            out[(parent, (attrs.get("profile") or {}).get("string", ""), _start(entry))] += 1
    return out


def difference(want: Counter[Instance], have: Counter[Instance]) -> str | None:
    """None when they agree; else what is missing and what is extra, briefly. A listed instance without
    a placement (no memorySlice capacity) matches by parent and profile."""
    have = Counter(have)
    missing: Counter[Instance] = Counter()
    for inst, n in want.items():
        for _ in range(n):
            if have[inst] > 0:
                have[inst] -= 1
            elif have[(inst[0], inst[1], None)] > 0:
                have[(inst[0], inst[1], None)] -= 1
            else:
                missing[inst] += 1
    extra = +have
    if not missing and not extra:
        return None

    def shown(c: Counter[Instance]) -> str:
        items = [f"{p}@{s}" if s is not None else p for (_, p, s), n in sorted(c.items(), key=str) for _ in range(n)]
        return ", ".join(items[:6]) + (f" (+{len(items) - 6})" if len(items) > 6 else "")

    parts = []
    if missing:
        parts.append(f"missing {shown(missing)}")
    if extra:
        parts.append(f"stale {shown(extra)}")
    return "; ".join(parts)


class DraSlices:
    """What the agent does with ResourceSlices after applying a geometry (see the module's docstring)."""

    def __init__(
        self,
        api: k8s.ApiClient,
        node: str,
        options: DraOptions,
        *,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api, self.node, self.options = api, node, options
        self.custom = k8s.CustomObjectsApi(api)
        self.core = k8s.CoreV1Api(api)
        self._sleep, self._clock = sleep, clock
        self.generation = 0

    def publish(self, entries: list[dict[str, Any]]) -> None:
        """The stand-in driver's slice for this node (one pool, one slice; generation bumped per write)."""
        self.generation = int(time.time() * 1000)  # monotonic across agent restarts
        body = {
            "apiVersion": RESOURCE_API,
            "kind": "ResourceSlice",
            "metadata": {"name": slice_name(self.node), "labels": {"app.kubernetes.io/managed-by": "migops-agent"}},
            "spec": {
                "driver": dra.DRIVER,
                "nodeName": self.node,
                "pool": {"name": self.node, "generation": self.generation, "resourceSliceCount": 1},
                "devices": entries,
            },
        }
        ssa.apply(self.api, body, field_manager=FIELD_MANAGER, force=True)

    def restart_plugin(self) -> list[str]:
        """Delete the driver's kubelet plugin pods on this node (its DaemonSet starts them again)."""
        kwargs = {"label_selector": self.options.plugin_selector, "field_selector": f"spec.nodeName={self.node}"}
        if self.options.plugin_namespace:
            pods = self.core.list_namespaced_pod(self.options.plugin_namespace, **kwargs).items
        else:
            pods = self.core.list_pod_for_all_namespaces(**kwargs).items
        deleted = []
        for pod in pods:
            try:
                self.core.delete_namespaced_pod(pod.metadata.name, pod.metadata.namespace)
                deleted.append(f"{pod.metadata.namespace}/{pod.metadata.name}")
            except ApiException as exc:
                if exc.status != 404:
                    raise
        return deleted

    def current(self) -> Counter[Instance]:
        found = self.custom.list_cluster_custom_object(
            "resource.k8s.io", "v1", "resourceslices", field_selector=f"spec.nodeName={self.node}"
        )
        return listed(found.get("items") or [], self.node)

    def after_apply(
        self,
        devices: Sequence[Device],
        models: Sequence[GpuModel],
        states: Sequence[GpuState],
        *,
        changed: bool = True,
    ) -> str | None:
        """Publish or restart (when the GPUs `changed`), then wait for the slices to list exactly the GPUs'
        instances; the mismatch (why the node must not report success) or None."""
        want = expected(devices, states)
        if self.options.mode == "publish":
            self.publish(devices_for(devices, models, states))
        elif changed:
            restarted = self.restart_plugin()
            log.info("restarted the DRA kubelet plugin: %s", ", ".join(restarted) or "no pod matched")
            if not restarted:
                return (
                    f"no DRA kubelet plugin pod on this node matches {self.options.plugin_selector!r}: its "
                    "ResourceSlices would keep advertising the old instances"
                )
        deadline = self._clock() + self.options.timeout
        while True:
            try:
                diff = difference(want, self.current())
            except ApiException as exc:
                diff = f"could not list ResourceSlices: HTTP {exc.status} {exc.reason}"
            if diff is None:
                return None
            if self._clock() >= deadline:
                return f"the {dra.DRIVER} ResourceSlices of this node do not list the GPUs' instances: {diff}"
            self._sleep(self.options.interval)

"""DRA ResourceClaims (resource.k8s.io/v1) as `migops suggest` reads them: pending claims as demand, and
allocated claims as the MIG instances they hold.

- A pending claim is demand when a pending pod uses it (names it in spec.resourceClaims, or the
  resourceclaim controller made it from the pod's template), with that pod's priority, node selector and
  tolerations; a claim no pod uses waits for nobody and counts only when the policy says so
  (`suggest.claimsWithoutPods`). A pending pod whose template's claim does not exist yet is demand too.
- An allocated claim names its devices (`status.allocation.devices.results[]`: driver, pool -- the node
  for NVIDIA's driver -- and device, `gpu-<minor>-mig-<profile>-<GI profile ID>-<start>`): each is an
  instance in use, kept exactly. The device name's minor number is not always the GPU's index, so the
  instance is kept on every GPU of the node where it could be (never less safe than the truth).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from migops.api import objects
from migops.api.objects import LabelSelector
from migops.mig.gfd import NodeGpus
from migops.suggest.model import Demand
from migops.suggest.scheduling import pod_requests, read_tolerations

if TYPE_CHECKING:
    from migops.mig.dra import ClaimDemand

Obj = Mapping[str, Any]
# The MIG core's DRA module evaluates CEL: it is imported only when there are claims to read.


def _name(obj: Obj) -> str:
    return str(objects.meta(obj).get("name") or "")


def _namespace(obj: Obj) -> str:
    return str(objects.meta(obj).get("namespace") or "")


def claim_users(pods: Iterable[Obj]) -> dict[tuple[str, str], Obj]:
    """(namespace, claim name) -> the pending pod that waits for it (the first by name)."""
    out: dict[tuple[str, str], Obj] = {}
    for pod in sorted(pods, key=lambda p: (_namespace(p), _name(p))):
        if (pod.get("status") or {}).get("phase", "Pending") != "Pending" or (pod.get("spec") or {}).get("nodeName"):
            continue
        names = [r.get("resourceClaimName") for r in (pod.get("spec") or {}).get("resourceClaims") or ()]
        names += [s.get("resourceClaimName") for s in (pod.get("status") or {}).get("resourceClaimStatuses") or ()]
        for n in names:
            if isinstance(n, str) and n:
                out.setdefault((_namespace(pod), n), pod)
    return out


def _demand(d: ClaimDemand, pod: Obj | None) -> Demand:
    spec = (pod or {}).get("spec") or {}
    selector = tuple(sorted((str(k), str(v)) for k, v in (spec.get("nodeSelector") or {}).items())) or d.node_selector
    return Demand(
        d.namespace,
        d.name,
        d.profiles,
        d.count,
        int(spec.get("priority") or d.priority or 0),
        (LabelSelector(selector),) if selector else (),
        d.kind,
        read_tolerations(pod or {}),
        pod_requests(pod or {}),
    )


def read_claims(
    claims: Iterable[Obj],
    templates: Iterable[Obj],
    classes: Iterable[Obj],
    pods: Iterable[Obj],
    without_pods: bool = False,
    read: Any = None,
) -> list[Demand]:
    """DRA demand as Demand values, whose CEL selectors pick MIG devices (mig.dra evaluates them as the
    scheduler would): pending claims a pending pod uses (all pending claims with `without_pods`), and
    pending pods' claim templates whose claim does not exist yet. Each claim is judged by `read`
    (mig.dra's Reader; default: in this process's bounded evaluator, migops.sandbox.evaluator, as the
    selectors are code from whoever may create claims: one may build a gigabyte string)."""
    from migops.mig import dra
    from migops.sandbox.evaluator import bounded_reader

    read = read or bounded_reader()

    pods = list(pods)
    users = claim_users(pods)
    by_class = {_name(c): c for c in classes}
    by_template = {(_namespace(t), _name(t)): t for t in templates}
    waited = [c for c in claims if without_pods or (_namespace(c), _name(c)) in users]
    out = [_demand(d, users.get((d.namespace, d.name))) for d in dra.pending_demand(waited, by_class, read=read)]
    by_pod = {(_namespace(p), _name(p)): p for p in pods}
    for d in dra.pending_demand((), by_class, pods=pods, templates=by_template, read=read):
        out.append(replace(_demand(d, by_pod.get((d.namespace, d.name))), kind=d.kind))
    return out


def claimed_devices(claims: Iterable[Obj]) -> dict[str, list[str]]:
    """Node -> the names of the driver's devices allocated claims hold there (one per device)."""
    from migops.mig import dra

    out: dict[str, list[str]] = defaultdict(list)
    for claim in claims:
        if dra.is_pending(claim):
            continue
        results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or ()
        for r in results:
            if isinstance(r, Mapping) and r.get("driver") == dra.DRIVER and isinstance(r.get("pool"), str):
                out[r["pool"]].append(str(r.get("device") or ""))
    return dict(out)


def claimed_instance(device: str, node: NodeGpus) -> tuple[int | None, str, int] | None:
    """The instance a driver device name stands for on this node's models, as (None: any GPU, profile,
    start); None when it names none."""
    parts = device.split("-")
    if len(parts) < 6 or parts[0] != "gpu" or parts[2] != "mig" or not parts[1].isdigit() or not parts[-1].isdigit():
        return None
    from migops.mig import dra

    minor, start = int(parts[1]), int(parts[-1])
    for model in node.gpus:
        for gi in model.profiles:
            if dra.device_name(minor, gi, start) == device:
                return None, gi.name, start
    return None

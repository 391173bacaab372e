"""MIG under Dynamic Resource Allocation: the devices NVIDIA's DRA driver publishes for MIG instances,
and which MIG profiles a ResourceClaim's requests select.

Pure: no Kubernetes client, no I/O. The objects are resource.k8s.io/v1 dicts as the API serves them.

The driver's contract (kubernetes-sigs/dra-driver-nvidia-gpu at 95932046, cmd/gpu-kubelet-plugin;
docs/dra.md lists every name with its file and line): driver `gpu.nvidia.com`, one device per MIG
instance, named gpu-<minor>-mig-<profile without dots>-<GI profile ID>-<placement start>, with the
attributes of CommonAttributesMig (mig.go) plus `uuid`, and the capacities of CommonCapacitiesMig plus
one `memorySlice<i>` per memory slice it covers (deviceinfo.go, MigDeviceInfo.GetDevice).

Selectors are CEL, evaluated by a compiled CEL runtime with the parts of Kubernetes' CEL library DRA
selectors use (migops.mig.selectors): the verdict is the kube-scheduler's, not a hand-written guess at it. A selector that reads an attribute the catalogue
cannot know (a UUID, a driver version, a PCI address) is *undetermined* for catalogue models: it is
reported as such, never taken as "selects nothing".
"""

from __future__ import annotations

import difflib
import json
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any, Literal

from migops.mig.catalogue import GiProfile, GpuModel, catalogue
from migops.mig.devices import parse_device_id
from migops.mig.profile import ProfileSyntaxError, parse_profile
from migops.mig.selectors import CelError, cel_device, compile_selector, missing_key, selects
from migops.mig.spec import MigPartedConfig

DRIVER = "gpu.nvidia.com"  # cmd/gpu-kubelet-plugin/main.go:45 DriverName
MIG_DEVICE_CLASS = "mig.nvidia.com"  # deployments/helm/.../templates/deviceclass-mig.yaml
# The selector of the driver's own MIG DeviceClass (deviceclass-mig.yaml), used when a claim names it and
# the class itself is not at hand (the webhook does not watch DeviceClasses).
MIG_CLASS_EXPRESSION = "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'"
# The driver's kubelet plugin pods (its chart's selectorLabels, templates/_helpers.tpl:84, componentName
# kubelet-plugin in templates/kubeletplugin.yaml).
KUBELET_PLUGIN_SELECTOR = "dra-driver-nvidia-gpu-component=kubelet-plugin"
STANDARD_DOMAIN = "resource.kubernetes.io"
MIG_TYPE = "mig"  # the `type` attribute of a MIG device (mig.go:141)
# Wall time all of one claim's selectors may take over the catalogue's devices: a claim of many requests
# and alternatives is judged within it, or its verdict names the bound (a selection is never taken as
# "selects nothing" for want of time). Checked between devices: one evaluation is not interrupted.
BUDGET_SECONDS = 1.0

# The capacities of a MIG device (mig.go:120-133); the catalogue may lack some for a model.
CAPACITIES = ("multiprocessors", "copyEngines", "decoders", "encoders", "jpegEngines", "ofaEngines", "memory")

Obj = Mapping[str, Any]


def _obj(value: object) -> Obj:
    """value when it is an object, else {}: a review or a listing may hold anything there."""
    return value if isinstance(value, Mapping) else {}


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


# --- the driver's devices -----------------------------------------------------------------------------


def product_names(gpu: GpuModel) -> tuple[str, ...]:
    """`productName` candidates (NVML's device name) for a model. The catalogue keeps GFD's label, which
    is NVML's name with every space replaced by '-', so the name cannot be recovered exactly: NVML
    keeps some dashes (`NVIDIA A100-SXM4-40GB`) and not others (`NVIDIA H100 80GB HBM3`). A selector on
    productName matches a model when it matches any candidate."""
    rest = gpu.product.split("-", 1)
    spaced = gpu.product.replace("-", " ")
    first = f"{rest[0]} {rest[1]}" if len(rest) == 2 else gpu.product
    return tuple(dict.fromkeys((first, spaced)))


def _architecture(gpu: GpuModel) -> str:
    # go-nvlib's GetArchitectureAsString (nvlib.go:503): "Ampere", "Hopper", "Blackwell".
    return (gpu.architecture or "unknown").capitalize()


def _version(text: str) -> str:
    """semver.MustParse(x).String() of a driver version: '8.0' -> '8.0.0' (mig.go:160)."""
    parts = text.split(".")
    while len(parts) < 3:
        parts.append("0")
    return ".".join(str(int(p)) if p.isdigit() else p for p in parts[:3])


def device_name(minor: int, gi: GiProfile, start: int) -> str:
    """MigSpecTuple.ToCanonicalName (mig.go:111) with toRFC1123Compliant (mig.go:249)."""
    pname = re.sub(r"[^a-z0-9-.]", "-", gi.name.replace(".", "").lower()).strip("-").removesuffix(".")
    return f"gpu-{minor}-mig-{pname}-{gi.smi_id if gi.smi_id is not None else 0}-{start}"


@dataclass(frozen=True)
class GpuFacts:
    """What one physical GPU adds to its MIG devices beyond its model (simulated or real)."""

    minor: int = 0
    uuid: str | None = None
    driver_version: str | None = None  # "580.126.20"
    cuda_driver_version: str | None = None  # "13.0"
    product_name: str | None = None  # NVML's name; else the first of product_names()


def mig_device(
    gpu: GpuModel, gi: GiProfile, *, facts: GpuFacts = GpuFacts(), start: int | None = None, uuid: str | None = None
) -> dict[str, Any]:
    """The resource.k8s.io/v1 Device entry the driver publishes for one MIG instance (a whole profile
    when `start` and `uuid` are None: the per-instance parts are then left out)."""
    attrs: dict[str, dict[str, Any]] = {
        "type": {"string": MIG_TYPE},
        "profile": {"string": gi.name},
        "productName": {"string": facts.product_name or product_names(gpu)[0]},
        "brand": {"string": "Nvidia"},  # GetBrandAsString (nvlib.go:507); the driver's docs show "Nvidia"
        "architecture": {"string": _architecture(gpu)},
    }
    if gpu.compute_capability:
        attrs["cudaComputeCapability"] = {"version": _version(gpu.compute_capability)}
    if facts.uuid:
        attrs["parentUUID"] = {"string": facts.uuid}
    if facts.driver_version:
        attrs["driverVersion"] = {"version": _version(facts.driver_version)}
    if facts.cuda_driver_version:
        attrs["cudaDriverVersion"] = {"version": _version(facts.cuda_driver_version)}
    if uuid:
        attrs["uuid"] = {"string": uuid}
    capacity: dict[str, dict[str, str]] = {}
    if gi.sms is not None:
        capacity["multiprocessors"] = {"value": str(gi.sms)}
    if gi.engines is not None:
        for name, kind in (
            ("copyEngines", "copy"),
            ("decoders", "decoder"),
            ("encoders", "encoder"),
            ("jpegEngines", "jpeg"),
            ("ofaEngines", "ofa"),
        ):
            capacity[name] = {"value": str(getattr(gi.engines, kind))}
    if gi.memory_mib is not None:
        capacity["memory"] = {"value": f"{gi.memory_mib}Mi"}  # MemorySizeMB MiB in bytes (mig.go:133)
    device: dict[str, Any] = {"attributes": attrs, "capacity": capacity}
    if start is not None:
        for i in range(start, start + gi.memory_slices):
            capacity[f"memorySlice{i}"] = {"value": "1"}
        device = {"name": device_name(facts.minor, gi, start), **device}
    return device


def device_class_name(profile: str) -> str:
    """mig-<profile>.nvidia.com, '+' (not allowed in a name) as '-': mig-1g.10gb-me.nvidia.com."""
    return f"mig-{profile.replace('+', '-').replace(',', '-')}.{MIG_DEVICE_CLASS.split('.', 1)[1]}"


def driver_device_class() -> dict[str, Any]:
    """The driver's own `mig.nvidia.com` DeviceClass (its chart's deviceclass-mig.yaml)."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": MIG_DEVICE_CLASS},
        "spec": {"selectors": [{"cel": {"expression": MIG_CLASS_EXPRESSION}}]},
    }


def profile_device_classes(models: Iterable[GpuModel]) -> list[dict[str, Any]]:
    """One DeviceClass per MIG profile of these models, selecting the driver's devices of that profile
    (the driver ships only `mig.nvidia.com`; per-profile classes are made by hand today, its #939)."""
    profiles = sorted({gi.name for g in models for gi in g.profiles if not gi.profile.negative})
    return [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": device_class_name(p), "labels": {"app.kubernetes.io/part-of": "migops"}},
            "spec": {
                "selectors": [
                    {"cel": {"expression": f"{MIG_CLASS_EXPRESSION} && device.attributes['{DRIVER}'].profile == '{p}'"}}
                ]
            },
        }
        for p in profiles
    ]


@lru_cache(maxsize=1)
def own_classes() -> dict[str, dict[str, Any]]:
    """The DeviceClasses whose selectors are known by their name: the driver's `mig.nvidia.com` and
    migops's `mig-<profile>.nvidia.com` for every catalogue profile (what `migops local up --dra`
    installs and docs/dra.md shows), so a claim naming one is judged with its class's selectors."""
    classes = [driver_device_class(), *profile_device_classes(catalogue().gpus)]
    return {c["metadata"]["name"]: c for c in classes}


# --- which profiles a request selects ------------------------------------------------------------------


# Per-GPU attributes: the catalogue cannot know them, so a selector failing on their absence is
# undetermined for a model, not wrong (mig.go:144,162,165; deviceinfo.go:261).
PER_GPU_ATTRIBUTES = ("uuid", "parentUUID", "driverVersion", "cudaDriverVersion", "pciBusID", "pcieRoot", "numaNode")

_DEVICES: dict[str, Any] = {}  # device key -> CEL value, for the cached evaluation


@dataclass(frozen=True)
class ModelDevices:
    """The MIG devices (one per profile) the driver would publish for one model, by key."""

    gpu: GpuModel
    devices: tuple[tuple[str, tuple[str, ...]], ...]  # (profile, one device key per productName candidate)
    # (profile, key of the device with an empty productName): the same for every model of a table (they
    # share architecture and compute capability), so selectors that never read productName are
    # evaluated once per table, not once per model.
    generic: tuple[tuple[str, tuple[str, ...]], ...] = ()


def _key(device: Obj) -> str:
    return json.dumps(device, sort_keys=True)


@lru_cache(maxsize=64)
def model_devices(gpu: GpuModel) -> ModelDevices:
    out = []
    generic = []
    for gi in gpu.profiles:
        if gi.profile.negative:
            continue  # `-me` names select, they are not instances of their own
        keys = []
        for p in (*product_names(gpu), "-"):
            entry = mig_device(gpu, gi, facts=GpuFacts(product_name=p))
            key = _key(entry)
            if key not in _DEVICES:
                _DEVICES[key] = cel_device(entry, DRIVER)
            keys.append(key)
        out.append((gi.name, tuple(keys[:-1])))
        generic.append((gi.name, (keys[-1],)))
    return ModelDevices(gpu, tuple(out), tuple(generic))


@lru_cache(maxsize=1 << 16)  # bounded: (expression, catalogue device); models share devices
def _selects_key(expression: str, key: str) -> bool | str:
    try:
        return selects(expression, _DEVICES[key])
    except CelError as exc:
        return str(exc)


def warm() -> None:
    """Build every catalogue model's devices and judge the driver's class selector on them now (a
    server's start), not in the first review: ~0.7 s, after which a claim costs ~0.2 s."""
    evaluate([MIG_CLASS_EXPRESSION], catalogue().gpus, deadline=time.monotonic() + 60.0)


Mode = Literal["ExactCount", "All"]


@dataclass(frozen=True)
class Selection:
    """What one request (or one firstAvailable alternative) of a claim selects among catalogue models."""

    path: str  # spec.devices.requests[0] or ...requests[0].firstAvailable[1]
    request: str  # the request's name (sub-request: "request/sub")
    device_class: str
    expressions: tuple[str, ...]  # the class's selectors, then the request's
    mode: Mode
    count: int
    by_model: tuple[tuple[str, frozenset[str]], ...]  # device ID -> profiles selected on that model
    errors: tuple[str, ...] = ()  # selectors that fail on some device, or do not compile
    class_missing: bool = False
    gaps: bool = False  # some device undetermined: it reads what the catalogue does not know
    over_budget: bool = False  # not judged: the claim's selectors took longer than BUDGET_SECONDS
    from_class: int = 0  # how many of `expressions` are the class's (the first ones)
    # What the class alone selects, when the request's selectors alone select something too and the
    # two together nothing (dra-selects-nothing).
    class_profiles: frozenset[str] = frozenset()

    @property
    def profiles(self) -> frozenset[str]:
        return frozenset().union(*(p for _, p in self.by_model)) if self.by_model else frozenset()

    @property
    def undetermined(self) -> bool:
        return bool(self.errors) or self.class_missing


@dataclass(frozen=True)
class ClaimRequests:
    """The requests of one ResourceClaim / ResourceClaimTemplate (`spec` of the claim)."""

    kind: str
    namespace: str
    name: str
    selections: tuple[Selection, ...]
    problems: tuple[str, ...] = ()  # malformed parts, each naming the field


def class_expressions(device_class: Obj) -> tuple[str, ...]:
    """The CEL selectors of a v1 DeviceClass."""
    spec = device_class.get("spec")
    selectors = spec.get("selectors") if isinstance(spec, Mapping) else None
    return tuple(
        s["cel"]["expression"]
        for s in (selectors if isinstance(selectors, list) else [])
        if isinstance(s, Mapping) and isinstance(s.get("cel"), Mapping) and isinstance(s["cel"].get("expression"), str)
    )


def _request_expressions(req: Obj) -> tuple[str, ...]:
    selectors = req.get("selectors")
    return tuple(
        s["cel"]["expression"]
        for s in (selectors if isinstance(selectors, list) else [])
        if isinstance(s, Mapping) and isinstance(s.get("cel"), Mapping) and isinstance(s["cel"].get("expression"), str)
    )


class OverBudget(CelError):
    """The claim's selectors were not judged within its budget (BUDGET_SECONDS)."""


def over_budget_message(seconds: float) -> str:
    return f"not judged within {seconds:g} s, the bound on one claim's selectors"


def evaluate(
    expressions: Sequence[str], models: Iterable[GpuModel], deadline: float | None = None
) -> tuple[tuple[tuple[str, frozenset[str]], ...], tuple[str, ...], bool]:
    """Profiles per model that every expression accepts, the selectors' failures (deduplicated), and
    whether some device was undetermined (a catalogue gap). OverBudget once time.monotonic() passes
    `deadline` (default: BUDGET_SECONDS from now).

    A failure is kept only when it is about the selector, not about what the catalogue lacks: a missing
    per-GPU attribute, or a capacity the catalogue leaves unknown, makes that device undetermined."""
    for e in expressions:
        compile_selector(e)  # CelError: does not compile
    errors: dict[str, None] = {}
    gaps = False
    by_model: list[tuple[str, frozenset[str]]] = []
    reads_product = any("productName" in e for e in expressions)
    deadline = time.monotonic() + BUDGET_SECONDS if deadline is None else deadline
    for gpu in models:
        chosen = set()
        devices = model_devices(gpu)
        for profile, keys in devices.devices if reads_product else devices.generic:
            for key in keys:
                if time.monotonic() > deadline:
                    raise OverBudget(over_budget_message(BUDGET_SECONDS))
                failed = _first_failure(expressions, key)
                if failed is None:
                    chosen.add(profile)
                    break
                if failed is False:
                    continue
                if "recursion" in failed:  # nesting too deep: fails the same way on every device
                    return tuple(by_model), (f"too deeply nested: {failed}",), gaps
                if _catalogue_gap(failed, gpu):
                    gaps = True
                else:
                    errors.setdefault(failed)
        if chosen:
            by_model.append((gpu.device_id, frozenset(chosen)))
    return tuple(by_model), tuple(errors), gaps


def _first_failure(expressions: Sequence[str], key: str) -> str | Literal[False] | None:
    """None when every expression accepts the device, False when one rejects it, else the failure."""
    for e in expressions:
        result = _selects_key(e, key)
        if isinstance(result, str):
            return result
        if not result:
            return False
    return None


def _catalogue_gap(message: str, gpu: GpuModel) -> bool:
    """Whether a failure comes from a value the catalogue does not have for this model."""
    name = missing_key(message)
    if name is None:
        return False
    if name in PER_GPU_ATTRIBUTES:
        return True
    unknown = {
        "memory": any(gi.memory_mib is None for gi in gpu.profiles),
        "multiprocessors": any(gi.sms is None for gi in gpu.profiles),
    }
    engines = any(gi.engines is None for gi in gpu.profiles)
    return unknown.get(name, engines and name in CAPACITIES)


def _count(req: Obj, path: str, problems: list[str]) -> tuple[Mode, int]:
    mode = req.get("allocationMode", "ExactCount")
    if mode == "All":
        return "All", 1
    count = req.get("count", 1)
    if mode != "ExactCount" or not isinstance(count, int) or isinstance(count, bool) or count < 1:
        problems.append(f"{path}: allocationMode must be ExactCount or All and count a positive integer")
        return "ExactCount", 1
    return "ExactCount", count


def claim_requests(
    obj: Obj,
    classes: Mapping[str, Obj] | None = None,
    models: Iterable[GpuModel] | None = None,
) -> ClaimRequests:
    """Read a ResourceClaim or ResourceClaimTemplate and evaluate each request against the MIG devices
    of `models` (default: every catalogue model). `classes`: DeviceClasses by name; a class not there is
    the driver's own `mig.nvidia.com` when so named, else unknown (the request is undetermined)."""
    kind = str(obj.get("kind") or "ResourceClaim")
    meta = _obj(obj.get("metadata"))
    spec = _obj(obj.get("spec"))
    if kind == "ResourceClaimTemplate":
        spec = _obj(spec.get("spec"))
        prefix = "spec.spec.devices.requests"
    else:
        prefix = "spec.devices.requests"
    devices = _obj(spec.get("devices"))
    requests = _list(devices.get("requests"))
    pool = tuple(models) if models is not None else catalogue().gpus
    deadline = time.monotonic() + BUDGET_SECONDS  # one budget for the whole claim
    problems: list[str] = []
    selections = []
    for i, req in enumerate(requests):
        path = f"{prefix}[{i}]"
        if not isinstance(req, Mapping):
            problems.append(f"{path}: must be an object")
            continue
        name = str(req.get("name", ""))
        if isinstance(req.get("exactly"), Mapping):
            selections.append(_selection(req["exactly"], f"{path}.exactly", name, classes, (pool, deadline), problems))
        elif isinstance(req.get("firstAvailable"), list):
            for j, sub in enumerate(req["firstAvailable"]):
                sub_path = f"{path}.firstAvailable[{j}]"
                if not isinstance(sub, Mapping):
                    problems.append(f"{sub_path}: must be an object")
                    continue
                sub_name = f"{name}/{sub.get('name', '')}"
                selections.append(_selection(sub, sub_path, sub_name, classes, (pool, deadline), problems))
        else:
            problems.append(f"{path}: needs exactly or firstAvailable")
    return ClaimRequests(
        kind, str(meta.get("namespace") or ""), str(meta.get("name") or ""), tuple(selections), tuple(problems)
    )


def _selection(
    req: Obj,
    path: str,
    name: str,
    classes: Mapping[str, Obj] | None,
    within: tuple[Sequence[GpuModel], float],
    problems: list[str],
) -> Selection:
    """One request (or alternative) judged on the models of `within` before its deadline."""
    class_name = req.get("deviceClassName")
    if not isinstance(class_name, str) or not class_name:
        problems.append(f"{path}.deviceClassName: required")
        class_name = ""
    known = classes.get(class_name) if classes is not None else None
    if known is None:
        known = own_classes().get(class_name)
    base, missing = (class_expressions(known), False) if known is not None else ((), True)
    expressions = base + _request_expressions(req)
    mode, count = _count(req, path, problems)
    over, alone = False, frozenset[str]()
    try:
        by_model, errors, gaps = evaluate(expressions, *within)
        if not by_model and not errors and base and len(expressions) > len(base):
            alone = _alone(base, within)
    except CelError as exc:
        by_model, errors, gaps, over = (), (str(exc),), False, isinstance(exc, OverBudget)
    return Selection(
        path, name, class_name, expressions, mode, count, by_model, errors, missing, gaps, over, len(base), alone
    )


def _alone(base: tuple[str, ...], within: tuple[Sequence[GpuModel], float]) -> frozenset[str]:
    """What the class selects alone, when it narrows the MIG profiles (a class per profile), so that
    with the request's selectors nothing is left; empty for a class that selects none, or every one (the
    driver's mig.nvidia.com: the request alone is then what selects nothing, another rule)."""
    pool, _ = within
    chosen = frozenset().union(*(p for _, p in evaluate(base, *within)[0]))
    every = {gi.name for g in pool for gi in g.profiles if not gi.profile.negative}
    return chosen if chosen and not every <= chosen else frozenset()


# --- demand --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClaimDemand:
    """MIG demand from one pending claim request: `count` devices of any of `profiles`, on one node.

    The fields are those of migops.suggest's Demand, which suggest/claims.py builds from it (the MIG core
    cannot import migops.api's LabelSelector, so the node selector stays a plain mapping here)."""

    namespace: str
    name: str
    profiles: frozenset[str]  # GFD's profile names (`3g.40gb`, `1g.10gb+me`)
    count: int = 1
    priority: int = 0
    node_selector: tuple[tuple[str, str], ...] = ()  # labels the node must have (the pod's nodeSelector)
    kind: str = "ResourceClaim"  # or ResourceClaimTemplate (a pending pod's claim not created yet)
    request: str = ""  # the request's name ("req/sub" for a firstAvailable alternative)
    models: frozenset[str] = frozenset()  # device IDs of the models that offer one of the profiles

    @property
    def source(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name} request {self.request}"


# Judges a claim's requests with the DeviceClasses by name: claim_requests, or one that runs it under
# bounds elsewhere (migops.sandbox.evaluator) and answers None for a claim over them.
Reader = Callable[[Obj, Mapping[str, Obj] | None], "ClaimRequests | None"]


def class_names(claim: Obj) -> frozenset[str]:
    """The DeviceClasses a claim's (or a template's) requests name."""
    spec = _obj(claim.get("spec"))
    if claim.get("kind") == "ResourceClaimTemplate":
        spec = _obj(spec.get("spec"))
    found: set[str] = set()
    for req in _list(_obj(spec.get("devices")).get("requests")):
        req = _obj(req)
        for sub in [_obj(req.get("exactly")), *(_obj(s) for s in _list(req.get("firstAvailable")))]:
            if isinstance(sub.get("deviceClassName"), str):
                found.add(sub["deviceClassName"])
    return frozenset(found)


def is_pending(claim: Obj) -> bool:
    """A ResourceClaim with no allocation yet."""
    status = claim.get("status")
    return not (isinstance(status, Mapping) and status.get("allocation"))


def demand(
    parsed: ClaimRequests, *, priority: int = 0, node_selector: Mapping[str, str] | None = None
) -> tuple[ClaimDemand, ...]:
    """Demand of a claim's requests: one per request that selects MIG profiles; of a firstAvailable
    request, its first alternative that selects any (the scheduler tries them in order)."""
    out: list[ClaimDemand] = []
    seen: set[str] = set()
    for sel in parsed.selections:
        top = sel.path.split(".firstAvailable")[0]
        if top in seen or not sel.profiles:
            continue
        seen.add(top)
        out.append(
            ClaimDemand(
                namespace=parsed.namespace,
                name=parsed.name,
                kind=parsed.kind,
                request=sel.request,
                profiles=sel.profiles,
                count=sel.count,
                priority=priority,
                node_selector=tuple(sorted((node_selector or {}).items())),
                models=frozenset(m for m, _ in sel.by_model),
            )
        )
    return tuple(out)


def pending_demand(
    claims: Iterable[Obj],
    classes: Mapping[str, Obj] | None = None,
    *,
    pods: Iterable[Obj] = (),
    templates: Mapping[tuple[str, str], Obj] | None = None,
    read: Reader | None = None,
) -> tuple[ClaimDemand, ...]:
    """MIG demand of pending ResourceClaims, and of pending Pods' claim templates whose claim does not
    exist yet (the resourceclaim controller creates it when the pod is created). `read` judges each
    claim's requests (default: claim_requests, here); a claim it gives no answer for is no demand."""
    read = read or claim_requests
    out: list[ClaimDemand] = []
    for claim in claims:
        if is_pending(claim) and (parsed := read(claim, classes)) is not None:
            out.extend(demand(parsed))
    for pod in pods:
        spec = _obj(pod.get("spec"))
        status = _obj(pod.get("status"))
        if status.get("phase", "Pending") != "Pending":
            continue
        made = {_obj(s).get("name") for s in _list(status.get("resourceClaimStatuses"))}
        ns = str(_obj(pod.get("metadata")).get("namespace") or "")
        for ref in _list(spec.get("resourceClaims")):
            if not isinstance(ref, Mapping) or ref.get("name") in made:
                continue
            template = (templates or {}).get((ns, str(ref.get("resourceClaimTemplateName"))))
            parsed = read(template, classes) if template is not None else None
            if parsed is not None:
                selector = _obj(spec.get("nodeSelector"))
                pod_name = str(_obj(pod.get("metadata")).get("name") or "")
                for d in demand(
                    parsed,
                    priority=int(spec.get("priority") or 0),
                    node_selector={str(k): str(v) for k, v in selector.items()},
                ):
                    # Named after the pod that waits (its claim does not exist yet); the template in `request`.
                    out.append(replace(d, name=pod_name, kind="Pod", request=f"{d.name}/{d.request}"))
    return tuple(out)


# --- admission findings --------------------------------------------------------------------------------


def _profile_literals(expressions: Iterable[str]) -> tuple[str, ...]:
    """String literals in the selectors that parse as MIG profile names (what the user meant to ask)."""
    found: dict[str, None] = {}
    for e in expressions:
        for m in re.finditer(r"'([^'\\]{1,40})'|\"([^\"\\]{1,40})\"", e):
            text = m[1] or m[2]
            try:
                parse_profile(text)
            except ProfileSyntaxError:
                continue
            found.setdefault(text)
    return tuple(found)


def provided_profiles(config: MigPartedConfig, gpu: GpuModel) -> frozenset[str]:
    """Profiles some geometry of the config creates on a GPU of this model (entries whose device filter
    names it, or that have none)."""
    out: set[str] = set()
    for name in config.names():
        for entry in config.entries(name):
            if entry.device_filter and not any(_filter_names(f, gpu) for f in entry.device_filter):
                continue
            if not entry.mig_enabled:
                continue
            for pc in entry.mig_devices:
                if pc.count > 0:
                    found = gpu.find_profile(pc.profile)
                    if found:
                        out.add(found[0].name)
    return frozenset(out)


def _filter_names(text: str, gpu: GpuModel) -> bool:
    try:
        return parse_device_id(text).matches(gpu.pci)
    except ValueError:
        return False


@dataclass(frozen=True)
class Finding:
    """A warning about one request: (rule, where, text), as the webhook's merge_warnings takes them."""

    rule: str
    where: str
    text: str


def _closest(wanted: Sequence[str], offered: Iterable[str]) -> list[str]:
    pool = sorted(set(offered))
    near: dict[str, None] = {}
    for w in wanted:
        for n in difflib.get_close_matches(w, pool, n=3, cutoff=0.5):
            near.setdefault(n)
    return list(near)[:3] or pool[:3]


def _describe(sel: Selection) -> str:
    wanted = _profile_literals(sel.expressions)
    return ", ".join(wanted) if wanted else "its selectors"


def findings(
    selections: Iterable[Selection],
    present: Iterable[GpuModel],
    config: MigPartedConfig | None = None,
    *,
    mig_only: bool = True,
) -> tuple[Finding, ...]:
    """Warnings for selections that are about MIG and select no profile a GPU model in the cluster
    offers (`present`), or none that a geometry of `config` provides. A selection is about MIG when
    its class or selectors select MIG devices of some catalogue model, or name a profile.
    An undetermined selection gets a warning saying so, once."""
    present = tuple(present)
    found = (_selection_finding(sel, present, config, mig_only) for sel in selections)
    return tuple(f for f in found if f is not None)


def _selection_finding(
    sel: Selection, present: tuple[GpuModel, ...], config: MigPartedConfig | None, mig_only: bool
) -> Finding | None:
    """The warning about one selection, if it has one (see findings)."""
    # Short: a warning is at most 120 characters (the API server's advice).
    where = f"request {sel.request}" if sel.request else sel.path
    literals = _profile_literals(sel.expressions)
    about_mig = bool(sel.by_model) or bool(literals) or any("'mig'" in e or '"mig"' in e for e in sel.expressions)
    if mig_only and not about_mig and not sel.over_budget:
        return None
    if sel.errors:
        return Finding("dra-selector-error", where, f"selector fails: {sel.errors[0]}")
    if sel.class_missing or (sel.gaps and not sel.by_model):
        return None  # the class's selectors, or the attributes read, are unknown here: no verdict
    present_ids = {g.device_id for g in present}
    here = {m: p for m, p in sel.by_model if m in present_ids}
    offered_here = sorted({gi.name for g in present for gi in g.profiles if not gi.profile.negative})
    if not sel.by_model and sel.class_profiles:
        return Finding("dra-selects-nothing", where, _nothing(sel))
    if not sel.by_model:
        near = _closest(literals, offered_here or [gi.name for g in catalogue().gpus for gi in g.profiles])
        return Finding(
            "dra-unknown-profile", where, f"{_describe(sel)}: no GPU model has it; closest: {', '.join(near)}"
        )
    if present and not here:
        models = [g for g in catalogue().gpus if g.device_id in dict(sel.by_model)]
        return Finding(
            "dra-profile-not-in-cluster",
            where,
            f"{_few(sel.profiles)}: only on {', '.join(g.name for g in models[:2])}, not in this cluster; "
            f"closest: {', '.join(_closest(sorted(sel.profiles), offered_here))}",
        )
    if config is not None and here:
        wanted = set().union(*here.values())
        provided = {gi for g in present if g.device_id in here for gi in provided_profiles(config, g)}
        if not (provided & wanted):
            near = _closest(sorted(wanted), provided) if provided else ["none"]
            return Finding(
                "dra-profile-not-configured",
                where,
                f"{_few(wanted)}: no geometry in force creates it; closest: {', '.join(near)}",
            )
    return None


def _nothing(sel: Selection) -> str:
    """The class's and the request's constraints that no device meets together (at most 120 characters
    with the request's name: the request's selector is shortened)."""
    mine = " && ".join(sel.expressions[sel.from_class :])
    mine = re.sub(r"device\.attributes\[['\"]gpu\.nvidia\.com['\"]\]\.", "", mine)
    mine = mine if len(mine) <= 40 else mine[:39] + "…"
    return f"class {sel.device_class} ({_few(sel.class_profiles, 2)}) and selector {mine}: no device has both"


def _few(profiles: Iterable[str], limit: int = 3) -> str:
    names = sorted(profiles)
    return ", ".join(names[:limit]) + (f" (+{len(names) - limit})" if len(names) > limit else "")


__all__ = [
    "DRIVER",
    "KUBELET_PLUGIN_SELECTOR",
    "MIG_CLASS_EXPRESSION",
    "MIG_DEVICE_CLASS",
    "CelError",
    "OverBudget",
    "ClaimDemand",
    "ClaimRequests",
    "Finding",
    "GpuFacts",
    "Selection",
    "claim_requests",
    "class_expressions",
    "demand",
    "evaluate",
    "findings",
    "mig_device",
    "pending_demand",
    "provided_profiles",
]

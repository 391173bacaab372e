"""What GPU Feature Discovery and the device plugin publish for a node, per MIG strategy: written
(`advertise`, `node_labels_without_mig`) and read back (`read_gpus`, `mig_offers`) in one place.

The contract is GFD's (NVIDIA/k8s-device-plugin internal/lm; mig-hardware.md section 6), so users can
predict the labels and resources a config produces, the local stack can label simulated nodes the
way a GPU Operator cluster does, and the webhook and gitops read a node's GPUs from the same labels.
Pure functions over label dicts; the names are re-exported by `migops.api.names`.
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache

from migops.mig.catalogue import Catalogue, GiProfile, GpuModel, UnknownGpuError, catalogue
from migops.mig.profile import compute_subprofile_allowed, parse_profile
from migops.mig.validate import MAX_GPUS_PER_NODE, GpuResult, Strategy

PREFIX = "nvidia.com/"
DEVICE_ID_LABEL = "migops.io/gpu.device-id"  # ours: the PCI device ID, which GFD does not publish
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
MIG_CONFIG_STATE_LABEL = "nvidia.com/mig.config.state"
MIG_CAPABLE_LABEL = f"{PREFIX}mig.capable"
MIG_STRATEGY_LABEL = f"{PREFIX}mig.strategy"
GPU_PRODUCT_LABEL = f"{PREFIX}gpu.product"
GPU_COUNT_LABEL = f"{PREFIX}gpu.count"
GPUS_ANNOTATION = "migops.io/gpus"  # the agent's: the node's GPUs in index order, "0x233010DE,0x233010DE"
GPU_RESOURCE = f"{PREFIX}gpu"  # whole GPUs, and MIG devices under `single`
MIG_RESOURCE_PREFIX = f"{PREFIX}mig-"  # MIG devices under `mixed`: nvidia.com/mig-<profile>
MIG_COUNT_LABEL = re.compile(r"^nvidia\.com/mig-(.+)\.count$")  # `mixed`: MIG devices of a profile
_SINGLE_MIG = "-MIG-"  # `single`: gpu.product is <product>-MIG-<profile>
# What GFD publishes of a MIG device type (`_mig_device_labels`; under `single` on nvidia.com/gpu.*).
_ENGINES = ("copy", "decoder", "encoder", "jpeg", "ofa")
_DEVICE_ATTRIBUTES = (
    "product",
    "replicas",
    "sharing-strategy",
    "slices.gi",
    "slices.ci",
    "memory",
    "multiprocessors",
    *(f"engines.{e}" for e in _ENGINES),
    "count",
)
# Every nvidia.com/gpu.* label GFD publishes (node_labels_without_mig, advertise): the agent writes
# exactly these for simulated GPUs. Any other nvidia.com/gpu.* label is not GFD's: the GPU Operator's
# controls (gpu.workload.config, gpu.deploy.*) are set by the operator or a person, never the agent.
GPU_ATTRIBUTE_LABELS = frozenset(
    f"{PREFIX}gpu.{a}" for a in (*_DEVICE_ATTRIBUTES, "present", "family", "compute.major", "compute.minor")
)
# nvidia.com/mig-<profile>.<attribute> (`mixed`), the profile's '+' written '.' as in resource names.
MIG_DEVICE_LABEL = re.compile(
    r"^nvidia\.com/mig-.+\.(" + "|".join(a.replace(".", r"\.") for a in _DEVICE_ATTRIBUTES) + r")$"
)


def is_gfd_label(key: str) -> bool:
    """One of the labels GFD publishes (and the agent in its place, for simulated GPUs), and no more:
    the agent's own-node policy (manifests/base/agent/own-node-policy.yaml) lets it write exactly these."""
    return (
        key in GPU_ATTRIBUTE_LABELS
        or MIG_DEVICE_LABEL.match(key) is not None
        or key in (MIG_CAPABLE_LABEL, MIG_STRATEGY_LABEL, DEVICE_ID_LABEL)
    )


def resource_name(profile: str) -> str:
    """Mixed-strategy resource for a MIG profile; '+' is not allowed in resource names (as in label
    values, mig-parted writes it as '.')."""
    return f"{PREFIX}mig-{profile.replace('+', '.')}"


def node_labels_without_mig(
    gpu: GpuModel, count: int, strategy: Strategy, mig_capable: bool | None = None
) -> dict[str, str]:
    """The labels GFD publishes for a node with `count` GPUs of this model and MIG disabled. A GPU that
    cannot do MIG gets `mig.capable=false` (unless `mig_capable` says another GPU of the node can), and a
    value the catalogue does not know (an unlisted GPU's memory) is left out rather than made up."""
    labels = {
        f"{PREFIX}gpu.present": "true",
        f"{PREFIX}gpu.product": gpu.product,
        f"{PREFIX}gpu.count": str(count),
    }
    if gpu.memory_mib is not None:
        labels[f"{PREFIX}gpu.memory"] = str(gpu.memory_mib)
    if gpu.architecture is not None:
        labels[f"{PREFIX}gpu.family"] = gpu.architecture
    if gpu.compute_capability is not None:
        major, minor = gpu.compute_capability.split(".")
        labels[f"{PREFIX}gpu.compute.major"] = major
        labels[f"{PREFIX}gpu.compute.minor"] = minor
    labels.update(
        {
            f"{PREFIX}gpu.replicas": "1",
            f"{PREFIX}gpu.sharing-strategy": "none",
            MIG_CAPABLE_LABEL: "true" if (gpu.mig_capable if mig_capable is None else mig_capable) else "false",
            DEVICE_ID_LABEL: gpu.device_id,
        }
    )
    if strategy in ("single", "mixed"):
        labels[MIG_STRATEGY_LABEL] = strategy
    return labels


@dataclass(frozen=True)
class Advertisement:
    """Extended resources and labels a node will carry once the config is applied."""

    resources: dict[str, int]
    labels: dict[str, str]
    invalid_reason: str | None = None  # set when GFD would publish -MIG-INVALID


def _mig_device_labels(prefix: str, gpu: GpuModel, profile_text: str) -> dict[str, str]:
    """Attributes of one MIG device type, as GFD reads them from NVML MigDevice.GetAttributes."""
    profile = parse_profile(profile_text)
    found = gpu.find_profile(profile)
    gi: GiProfile | None = found[0] if found else None
    labels = {
        f"{prefix}.product": f"{gpu.product}-MIG-{profile_text}",
        f"{prefix}.replicas": "1",
        f"{prefix}.sharing-strategy": "none",
        f"{prefix}.slices.gi": str(profile.gpu),
        f"{prefix}.slices.ci": str(profile.compute),
    }
    if gi and gi.memory_mib is not None:
        labels[f"{prefix}.memory"] = str(gi.memory_mib)
    if gi and gi.sms is not None:
        # A compute-instance sub-profile gets its share of the GPU instance's SMs.
        labels[f"{prefix}.multiprocessors"] = str(gi.sms * profile.compute // profile.gpu)
    if gi and gi.engines is not None:
        for engine in _ENGINES:
            labels[f"{prefix}.engines.{engine}"] = str(getattr(gi.engines, engine))
    return labels


def advertise(results: Sequence[GpuResult], strategy: Strategy) -> Advertisement:
    """Predict resources and labels for a node whose GPUs end up as `results` (uncovered GPUs count
    as MIG-disabled). Mirrors GFD's rules, including the -MIG-INVALID case under `single`."""
    if not results:
        return Advertisement({}, {})
    # GPUs that cannot do MIG stay whole GPUs whatever the config says; the node's model labels are
    # its first MIG-capable GPU's.
    capable = [r for r in results if r.gpu.mig_capable]
    first = (capable or list(results))[0].gpu
    enabled = [r for r in capable if r.mig_enabled]
    full = [r for r in results if not (r.mig_enabled and r.gpu.mig_capable)]
    base = node_labels_without_mig(first, len(results), strategy, mig_capable=bool(capable))
    devices = Counter(d for r in enabled for d in r.mig_devices)
    if strategy == "none" or not enabled:
        return Advertisement({f"{PREFIX}gpu": len(results)}, base)
    if strategy == "single":
        reasons = []
        if full:
            reasons.append("MIG-enabled and MIG-disabled GPUs are mixed")
        if any(not r.mig_devices for r in enabled):
            reasons.append("a MIG-enabled GPU has no MIG devices")
        if len(devices) > 1:
            reasons.append(f"more than one MIG device type ({', '.join(sorted(devices))})")
        labels = {k: v for k, v in base.items() if k != f"{PREFIX}gpu.memory"}
        if reasons:
            labels.update(
                {
                    f"{PREFIX}gpu.product": f"{first.product}-MIG-INVALID",
                    f"{PREFIX}gpu.count": "0",
                    f"{PREFIX}gpu.replicas": "0",
                    f"{PREFIX}gpu.memory": "0",
                }
            )
            return Advertisement({f"{PREFIX}gpu": 0}, labels, "; ".join(reasons))
        ((profile, count),) = devices.items()
        for key, value in _mig_device_labels(f"{PREFIX}gpu", enabled[0].gpu, profile).items():
            labels[key] = value
        labels[f"{PREFIX}gpu.count"] = str(count)
        return Advertisement({f"{PREFIX}gpu": count}, labels)
    # mixed: one resource per MIG profile; whole GPUs stay nvidia.com/gpu; gpu.count counts physical GPUs.
    labels = dict(base)
    labels[f"{PREFIX}gpu.replicas"] = "0" if not full else "1"
    resources: dict[str, int] = {}
    if full:
        resources[f"{PREFIX}gpu"] = len(full)
    owners = {d: r.gpu for r in enabled for d in r.mig_devices}
    for profile, count in sorted(devices.items()):
        prefix = f"{PREFIX}mig-{profile.replace('+', '.')}"
        labels.update(_mig_device_labels(prefix, owners[profile], profile))
        labels[f"{prefix}.count"] = str(count)
        resources[resource_name(profile)] = count
    return Advertisement(resources, labels)


# ------------------------------------------------------------------------------------------ reading


@dataclass(frozen=True)
class NodeGpus:
    """A node's GPUs as its labels tell them."""

    gpus: tuple[GpuModel, ...]  # index order; one entry per GPU when exact, else one per model
    exact: bool  # False: the model is known, not the count (GFD under the single strategy)


def read_gpus(
    labels: Mapping[str, object], annotations: Mapping[str, object], cat: Catalogue | None = None
) -> NodeGpus | None:
    """The node's GPUs (docs/interfaces.md). In order: the agent's `migops.io/gpus` annotation (every
    GPU, index order: exact); else the device-ID label (or GFD's product name) times GFD's gpu.count.
    Under the single strategy GFD counts MIG devices there, not GPUs, and names the product
    `<model>-MIG-<profile>`: then only the model is known. None when nothing names a GPU; raises
    UnknownGpuError for a device ID or product the catalogue cannot resolve."""
    cat = cat or catalogue()
    listed = annotations.get(GPUS_ANNOTATION)
    if listed and isinstance(listed, str):
        ids = listed.split(",", MAX_GPUS_PER_NODE)  # bounded before any work: not a list of thousands
        if len(ids) > MAX_GPUS_PER_NODE:
            raise UnknownGpuError(f"{GPUS_ANNOTATION}: more than the {MAX_GPUS_PER_NODE} GPUs any known node has")
        return NodeGpus(tuple(cat.resolve(d) for d in ids), True)
    product = labels.get(GPU_PRODUCT_LABEL)
    product = product if isinstance(product, str) else ""
    device = labels.get(DEVICE_ID_LABEL)
    name = (device if isinstance(device, str) else "") or product.split(_SINGLE_MIG)[0]
    if not name:
        return None
    model = cat.resolve(name)
    count = labels.get(GPU_COUNT_LABEL)
    count = count if isinstance(count, str) else ""
    if _SINGLE_MIG in product or not _ascii_digits(count) or int(count) < 1:
        return NodeGpus((model,), False)
    if len(count) > 3 or int(count) > MAX_GPUS_PER_NODE:  # a count of 10**9 must not become a tuple of 10**9
        raise UnknownGpuError(
            f"{GPU_COUNT_LABEL}={count[:20]}: more than the {MAX_GPUS_PER_NODE} GPUs any known node has"
        )
    return NodeGpus((model,) * int(count), True)


def mig_offers(labels: Mapping[str, object], capacity: Mapping[str, object]) -> frozenset[str]:
    """The MIG resources (nvidia.com/mig-<profile>) a node advertises now: GFD's count labels and the
    device plugin's capacity, where either is above zero."""
    offers = {
        MIG_RESOURCE_PREFIX + m.group(1)
        for k, v in labels.items()
        if (m := MIG_COUNT_LABEL.match(k)) and _ascii_digits(v) and int(str(v)) > 0
    }
    offers.update(k for k, v in capacity.items() if k.startswith(MIG_RESOURCE_PREFIX) and str(v) not in ("0", ""))
    return frozenset(offers)


def _ascii_digits(value: object) -> bool:
    """A count as GFD writes it and Go's strconv.Atoi reads it: ASCII digits only. str.isdigit() also
    passes "²" (which int() refuses) and "٣" (which int() reads as 3, where Go refuses it)."""
    return isinstance(value, str) and value.isascii() and value.isdigit()


@cache
def mig_resources() -> dict[str, tuple[str, tuple[GpuModel, ...]]]:
    """Every MIG resource name a known GPU can advertise under `mixed` -> (profile, models): each
    GPU-instance profile (and its driver aliases), and each compute-instance sub-profile mig-parted can
    create in it, named as the device plugin names them (`resource_name`)."""
    found: dict[str, tuple[str, list[GpuModel]]] = {}
    for gpu in catalogue().gpus:
        for gi in gpu.profiles:
            for name in (gi.name, *gi.aliases):
                base = parse_profile(name)
                for c in range(1, base.gpu + 1):
                    if compute_subprofile_allowed(c, base.gpu):
                        profile = str(dataclasses.replace(base, compute=c))
                        entry = found.setdefault(resource_name(profile), (profile, []))
                        if gpu not in entry[1]:
                            entry[1].append(gpu)
    return {k: (p, tuple(models)) for k, (p, models) in found.items()}


def single_product(model: GpuModel, profile: str) -> str:
    """The gpu.product value GFD publishes under `single` for a node of this model with this profile."""
    return advertise([GpuResult(0, model, None, True, (), (profile,))], "single").labels[GPU_PRODUCT_LABEL]

"""What GPU Feature Discovery and the device plugin will publish for a node, per MIG strategy.

The contract is GFD's (NVIDIA/k8s-device-plugin internal/lm; mig-hardware.md section 6), so users can
predict the labels and resources a config produces, and the local stack can label simulated nodes the
way a GPU Operator cluster does.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from migops.mig.catalogue import GiProfile, GpuModel
from migops.mig.profile import parse_profile
from migops.mig.validate import GpuResult, Strategy

PREFIX = "nvidia.com/"
DEVICE_ID_LABEL = "migops.io/gpu.device-id"  # ours: the PCI device ID, which GFD does not publish
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
MIG_CONFIG_STATE_LABEL = "nvidia.com/mig.config.state"


def resource_name(profile: str) -> str:
    """Mixed-strategy resource for a MIG profile; '+' is not allowed in resource names (as in label
    values, mig-parted writes it as '.')."""
    return f"{PREFIX}mig-{profile.replace('+', '.')}"


def node_labels_without_mig(gpu: GpuModel, count: int, strategy: Strategy, mig_capable: bool | None = None
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
    labels.update({
        f"{PREFIX}gpu.replicas": "1",
        f"{PREFIX}gpu.sharing-strategy": "none",
        f"{PREFIX}mig.capable": "true" if (gpu.mig_capable if mig_capable is None else mig_capable) else "false",
        DEVICE_ID_LABEL: gpu.device_id,
    })
    if strategy in ("single", "mixed"):
        labels[f"{PREFIX}mig.strategy"] = strategy
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
        for engine in ("copy", "decoder", "encoder", "jpeg", "ofa"):
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
            labels.update({f"{PREFIX}gpu.product": f"{first.product}-MIG-INVALID", f"{PREFIX}gpu.count": "0",
                           f"{PREFIX}gpu.replicas": "0", f"{PREFIX}gpu.memory": "0"})
            return Advertisement({f"{PREFIX}gpu": 0}, labels, "; ".join(reasons))
        (profile, count), = devices.items()
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

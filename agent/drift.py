"""Drift: the GPUs changed behind the agent's back (`nvidia-smi mig -dgi` by hand, a GPU reset, a MIG mode
switched off) after a config was applied.

What counts as drift is exactly what the flow would change: a GPU that does not `plan.matches` its
config (MIG mode or a pending mode, or a different set of GPU instances and compute instances by profile
and composition; a same instance at another valid placement is the same geometry, as mig-parted sees
it). So a repair is an ordinary run of the flow, and a check that finds nothing never disagrees with it.

`differences` is pure; `check` reads the GPUs (the backend's getters only: for NVML,
`probe.ReadOnlyNvml`). What the checks remember (the phase, the drift last told, the repairs within the
window) is `state.DriftState`, a value the loop (agent/loop.py) replaces after each check.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from migops.agent.backend import Backend, GpuInstance, GpuState
from migops.agent.desired import node_models
from migops.agent.plan import Desired, gi_profile, matches
from migops.agent.state import DriftState
from migops.mig.catalogue import GpuModel

POLICIES = ("repair", "report")


@dataclass(frozen=True)
class DriftOptions:
    interval: float = 30.0  # seconds between checks of an applied config; 0 turns the checks off
    policy: str = "repair"  # repair | report
    max_repairs: int = 3  # repairs allowed within `window`; one more drift holds repairs (state failed)
    window: float = 600.0

    @property
    def enabled(self) -> bool:
        return self.interval > 0


@dataclass(frozen=True)
class GpuDrift:
    index: int
    what: str

    def __str__(self) -> str:
        return f"GPU {self.index}: {self.what}"


def _name(model: GpuModel, profile: str, composition: tuple[int, ...]) -> str:
    """`3g.40gb` for a GI with one full-size compute instance, else `3g.40gb[1c+2c]` (`[-]`: none)."""
    gi = gi_profile(model, profile)
    if gi is not None and composition == (gi.compute_slices,):
        return profile
    return f"{profile}[{'+'.join(f'{c}c' for c in composition) or '-'}]"


def _instances(model: GpuModel, keys: Counter[tuple[str, tuple[int, ...]]], pool: Sequence[GpuInstance] = ()) -> str:
    """`2 x 1g.10gb, 3g.40gb`; with `pool`, each named at its placement (`1g.10gb@6`)."""
    if pool:
        left = Counter(keys)
        shown = []
        for inst in pool:
            key = (inst.profile, inst.composition)
            if left[key] > 0:
                left[key] -= 1
                shown.append(
                    f"{_name(model, *key)}@{inst.start}"
                    + (f" (pids {','.join(map(str, inst.pids))})" if inst.pids else "")
                )
        return ", ".join(shown)
    return ", ".join(f"{n} x {_name(model, *k)}" if n > 1 else _name(model, *k) for k, n in sorted(keys.items()))


def differences(states: Sequence[GpuState], desired: Sequence[Desired]) -> tuple[GpuDrift, ...]:
    """What differs, per GPU, between the GPUs as read and their config; () when every GPU matches."""
    out = []
    for s, d in zip(states, desired):
        if matches(s, d):
            continue
        if s.mode_pending:
            out.append(
                GpuDrift(
                    s.index,
                    f"MIG mode change to {'enabled' if s.mig_pending else 'disabled'} pending "
                    f"(config: {'enabled' if d.mig_enabled else 'disabled'})",
                )
            )
        elif s.mig_enabled != d.mig_enabled:
            out.append(
                GpuDrift(
                    s.index,
                    f"MIG {'enabled' if s.mig_enabled else 'disabled'} "
                    f"(config: {'enabled' if d.mig_enabled else 'disabled'})",
                )
            )
        else:
            have = Counter((i.profile, i.composition) for i in s.instances)
            want = d.compositions()
            parts = []
            if want - have:
                parts.append("missing " + _instances(d.model, want - have))
            if have - want:
                parts.append("extra " + _instances(d.model, have - want, s.instances))
            if not s.instances:
                parts.append("no instances left")
            out.append(GpuDrift(s.index, "; ".join(parts)))
    return tuple(out)


def summary(drifts: Sequence[GpuDrift]) -> str:
    return "; ".join(map(str, drifts))


@dataclass(frozen=True)
class Check:
    """One look at the GPUs."""

    models: tuple[GpuModel, ...]
    states: tuple[GpuState, ...]
    drifts: tuple[GpuDrift, ...]
    seconds: float

    @property
    def text(self) -> str:
        return summary(self.drifts)


def check(backend: Backend, desired: Sequence[Desired]) -> Check:
    """Read every GPU and compare it with what the config makes of it. Raises GpuError (a read failed)."""
    began = time.perf_counter()
    devices = backend.devices()
    models = node_models(devices)
    states = tuple(backend.read(d.index) for d in devices)
    return Check(tuple(models), states, differences(states, desired), time.perf_counter() - began)


def repairs_in_window(drift: DriftState, options: DriftOptions, now: float) -> tuple[float, ...]:
    """The repairs made within the window that ends now."""
    return tuple(t for t in drift.repairs if t >= now - options.window)

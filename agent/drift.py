"""Drift: the GPUs changed behind the agent's back (`nvidia-smi mig -dgi` by hand, a GPU reset, a MIG mode
switched off) after a config was applied.

What counts as drift is exactly what the flow would change: a GPU that does not `plan.matches` its
config (MIG mode or a pending mode, or a different set of GPU instances and compute instances by profile
and composition; a same instance at another valid placement is the same geometry, as mig-parted sees
it). So a repair is an ordinary run of the flow, and a check that finds nothing never disagrees with it.

`differences` is pure; `DriftWatch` reads the GPUs (the backend's getters only: for NVML,
`probe.ReadOnlyNvml`) and keeps what the controller needs to rate-limit repairs.
"""

from __future__ import annotations

import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from migops.agent.backend import Backend, GpuInstance, GpuState
from migops.agent.flow import Failure, Request, desired_on_node, node_models
from migops.agent.plan import Desired, gi_profile, matches
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


@dataclass
class DriftWatch:
    """The checks of one applied config: the desired geometry (validated once), when the next check is
    due, the drift last reported, and the repairs made within the window."""

    options: DriftOptions
    clock: Callable[[], float] = time.monotonic
    next_check: float = 0.0
    reported: str = ""  # the drift text last published (DRIFT_ANNOTATION), "" when none
    held_until: float = 0.0  # repairs held (repeated drift) until then
    holding: bool = False  # the last outcome is a drift report or a held repair, not a flow failure
    repairing: bool = False  # a repair started and has not succeeded yet (its retries are repairs too)
    repairs: deque[float] = field(default_factory=deque)  # monotonic times of the repairs in the window
    _desired: tuple[tuple, list[Desired]] | None = None

    def now(self) -> float:
        return self.clock()

    def reset(self) -> None:
        """A new config (or content, or strategy): repairs are counted anew."""
        self.repairs.clear()
        self.held_until = 0.0
        self.holding = False
        self._desired = None

    def schedule(self) -> None:
        self.next_check = self.now() + self.options.interval

    def due(self) -> bool:
        return self.options.enabled and self.now() >= self.next_check

    def check(self, backend: Backend, request: Request, key: tuple) -> Check:
        """Read every GPU and compare. Raises GpuError (a read failed) or flow.Failure (the config no
        longer validates on these GPUs: left to the flow)."""
        began = time.perf_counter()
        devices = backend.devices()
        models = node_models(devices)
        if self._desired is None or self._desired[0] != key:
            self._desired = (key, desired_on_node(request, models))
        states = tuple(backend.read(d.index) for d in devices)
        drifts = differences(states, self._desired[1])
        return Check(tuple(models), states, drifts, time.perf_counter() - began)

    def repairs_left(self) -> int:
        cutoff = self.now() - self.options.window
        while self.repairs and self.repairs[0] < cutoff:
            self.repairs.popleft()
        return self.options.max_repairs - len(self.repairs)

    def hold(self) -> float:
        """Hold repairs until the oldest in the window ages out; the seconds until then."""
        self.held_until = self.repairs[0] + self.options.window if self.repairs else self.now()
        self.holding = True
        return max(self.held_until - self.now(), 0.0)


__all__ = ["POLICIES", "Check", "DriftOptions", "DriftWatch", "Failure", "GpuDrift", "differences", "summary"]

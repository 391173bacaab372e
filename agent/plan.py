"""From what a GPU is to what the config says it should be: the smallest set of driver calls.

Per GPU: a mode change (which needs every instance gone), else a diff of GPU instances from
`migops.mig.placement.plan_change` (instances that can stay, stay; new ones at explicit placements),
and, inside GPU instances that stay, a diff of compute instances. GPUs whose geometry already
matches get no step at all.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from migops.agent.backend import GpuInstance, GpuState
from migops.mig.catalogue import GiProfile, GpuModel
from migops.mig.gfd import advertise
from migops.mig.placement import Placement, plan_change
from migops.mig.validate import GpuResult, Strategy


@dataclass(frozen=True)
class Desired:
    """What one GPU should become: MIG on/off and, when on, GPU instances with their CI sizes."""

    index: int
    model: GpuModel
    mig_enabled: bool | None  # None: no entry covers the GPU (left as it is)
    instances: tuple[tuple[Placement, tuple[int, ...]], ...] = ()  # (GI placement, CI sizes largest first)

    def compositions(self) -> Counter[tuple[str, tuple[int, ...]]]:
        return Counter((p.profile, ci) for p, ci in self.instances)


def gi_profile(model: GpuModel, name: str) -> GiProfile | None:
    for gi in model.profiles:
        if gi.name == name:
            return gi
    return None


def desired_from_result(result: GpuResult) -> Desired:
    """The validator's verdict for one GPU as instances: its GPU instances with the compute instances
    packed into each, exactly as `migops.mig.validate` decided (`GpuResult.instances`); the agent
    executes that packing, it does not work it out again."""
    if not result.mig_enabled:
        return Desired(result.index, result.gpu, result.mig_enabled)
    if result.layout and not result.instances:  # a result the validator did not make (or an invalid one)
        raise ValueError(f"GPU {result.index}: the verdict carries no compute-instance packing")
    return Desired(result.index, result.gpu, True, tuple(sorted(result.instances)))


# ------------------------------------------------------------------------------------------ steps


@dataclass(frozen=True)
class Step:
    """One driver call. `gi` names an existing GI (by ID) or, for creates, the placement."""

    op: str  # destroy_ci | destroy_gi | create_gi | create_ci
    gpu: int
    placement: Placement
    gi: int | None = None
    ci: int | None = None
    slices: int | None = None

    def __str__(self) -> str:
        what = f"{self.placement.profile}@{self.placement.start}"
        extra = f" ci={self.ci}" if self.ci is not None else (f" {self.slices}c" if self.slices else "")
        return f"GPU {self.gpu}: {self.op} {what}{extra}"


@dataclass(frozen=True)
class GpuPlan:
    """How one GPU gets from `current` to `desired`."""

    index: int
    mode_change: bool  # MIG mode must change: every instance goes first, then set mode (+ reset)
    steps: tuple[Step, ...]  # GI/CI changes, destroys first, in the order they must run
    keep: tuple[GpuInstance, ...]  # GIs left untouched (same placement and CIs)
    must_go: tuple[GpuInstance, ...]  # existing GIs destroyed or re-partitioned
    target: tuple[tuple[Placement, tuple[int, ...]], ...]  # the GPU's layout afterwards
    error: str | None = None  # the desired geometry cannot be reached from here

    @property
    def touches(self) -> bool:
        return self.mode_change or bool(self.steps)

    @property
    def busy(self) -> tuple[GpuInstance, ...]:
        """Instances with running processes that this plan would destroy or re-partition."""
        return tuple(i for i in self.must_go if i.pids)


def _creates(index: int, placement: Placement, sizes: tuple[int, ...]) -> list[Step]:
    return [Step("create_gi", index, placement)] + [Step("create_ci", index, placement, slices=s) for s in sizes]


def _destroys(index: int, inst: GpuInstance, gi_too: bool = True) -> list[Step]:
    steps = [Step("destroy_ci", index, inst.placement, gi=inst.id, ci=ci.id) for ci in inst.compute]
    return steps + ([Step("destroy_gi", index, inst.placement, gi=inst.id)] if gi_too else [])


def plan_gpu(current: GpuState, desired: Desired) -> GpuPlan:
    """The plan for one GPU. A GPU no entry covers is left alone. Instances with running processes
    (`GpuInstance.pids`) are kept wherever the target allows: among the layouts that realise it, one
    that keeps them wins, then the fewest steps."""
    index = current.index
    if desired.mig_enabled is None:
        return GpuPlan(index, False, (), current.instances, (), _layout(current))
    mode_change = current.mig_enabled != desired.mig_enabled or current.mode_pending
    if not desired.mig_enabled:
        if not current.mig_enabled and not current.mode_pending:
            return GpuPlan(index, False, (), (), (), ())
        steps: list[Step] = [s for inst in current.instances for s in _destroys(index, inst)]
        return GpuPlan(index, True, tuple(steps), (), current.instances, ())
    if mode_change:
        # Every instance goes before the mode changes; then the GPU starts empty.
        steps = [s for inst in current.instances for s in _destroys(index, inst)]
        steps += [s for p, ci in desired.instances for s in _creates(index, p, ci)]
        return GpuPlan(index, True, tuple(steps), (), current.instances, desired.instances)
    return _diff(current, desired)


def _diff(current: GpuState, desired: Desired) -> GpuPlan:
    """MIG stays on: the instances that can stay, stay (busy ones first); the rest is destroyed, and the
    missing ones created at explicit placements."""
    index, model = current.index, desired.model
    table = model.table
    if table is None:  # MIG is on, but the catalogue knows no geometry for this GPU (the validator refuses it)
        return GpuPlan(index, False, (), (), (), (), error=f"GPU {index}: no MIG profile table for {model.label()}")
    request: Counter[GiProfile] = Counter()
    for placement, _ in desired.instances:
        gi = gi_profile(model, placement.profile)
        assert gi is not None
        request[gi] += 1
    wanted = desired.compositions()
    # A busy instance is worth keeping only as it is: re-partitioned, its work ends all the same.
    busy = [i.placement for i in current.instances if i.pids and wanted[(i.profile, i.composition)] > 0]
    change = plan_change(table, [i.placement for i in current.instances], request, busy)
    if change is None:
        return GpuPlan(index, False, (), (), (), (), error=f"GPU {index}: the geometry cannot be placed")
    by_placement = {i.placement: i for i in current.instances}
    # Kept GIs whose compute instances already match stay untouched (busy ones first); the others are
    # re-partitioned.
    untouched, repartition = [], []
    for inst in sorted((by_placement[p] for p in change.keep), key=lambda i: not i.pids):
        key = (inst.profile, inst.composition)
        if wanted[key] > 0:
            wanted[key] -= 1
            untouched.append(inst)
        else:
            repartition.append(inst)
    leftover = sorted(wanted.elements(), key=lambda k: (k[0], k[1]))
    steps: list[Step] = []
    must_go: list[GpuInstance] = []
    for p in change.destroy:
        must_go.append(by_placement[p])
        steps += _destroys(index, by_placement[p])
    target: list[tuple[Placement, tuple[int, ...]]] = [(i.placement, i.composition) for i in untouched]
    assigned: list[tuple[Placement, tuple[int, ...], GpuInstance | None]] = []
    for inst in repartition:
        must_go.append(inst)
        steps += _destroys(index, inst, gi_too=False)
        assigned.append((inst.placement, _take(leftover, inst.profile), inst))
    assigned += [(p, _take(leftover, p.profile), None) for p in change.create]
    for placement, sizes, existing in sorted(assigned, key=lambda a: a[0]):
        if existing is None:
            steps += _creates(index, placement, sizes)
        else:
            steps += [Step("create_ci", index, placement, gi=existing.id, slices=s) for s in sizes]
        target.append((placement, sizes))
    untouched.sort(key=lambda i: i.placement)
    return GpuPlan(index, False, tuple(steps), tuple(untouched), tuple(must_go), tuple(sorted(target)))


def _take(pool: list[tuple[str, tuple[int, ...]]], profile: str) -> tuple[int, ...]:
    for i, (name, sizes) in enumerate(pool):
        if name == profile:
            del pool[i]
            return sizes
    raise AssertionError(f"no composition left for {profile}")  # plan_change created what was asked


def _layout(state: GpuState) -> tuple[tuple[Placement, tuple[int, ...]], ...]:
    return tuple(sorted((i.placement, i.composition) for i in state.instances))


def matches(state: GpuState, desired: Desired) -> bool:
    """Is the GPU already what the config asks for? Placements may differ (any valid layout of the
    same instances is the same geometry, as mig-parted's assert sees it)."""
    if desired.mig_enabled is None:
        return True
    if state.mig_enabled != desired.mig_enabled or state.mode_pending:
        return False
    if not desired.mig_enabled:
        return True
    return Counter((i.profile, i.composition) for i in state.instances) == desired.compositions()


# --------------------------------------------------------------------------------- what GFD sees


def mig_device_names(model: GpuModel, inst: GpuInstance) -> list[str]:
    """The profile string of each compute instance (`1c.3g.40gb`, or `3g.40gb` for a full one)."""
    gi = gi_profile(model, inst.profile)
    if gi is None:
        return []
    return [str(dataclasses.replace(gi.profile, compute=ci.slices)) for ci in inst.compute]


def observed_results(models: Sequence[GpuModel], states: Sequence[GpuState]) -> tuple[GpuResult, ...]:
    """The node's GPUs as they are, in the validator's terms, for `migops.mig.gfd.advertise`."""
    return tuple(
        GpuResult(
            s.index,
            m,
            None,
            s.mig_enabled,
            tuple(sorted(i.placement for i in s.instances)),
            tuple(d for i in s.instances for d in mig_device_names(m, i)),
        )
        for m, s in zip(models, states)
    )


def gfd_advertisement(models: Sequence[GpuModel], states: Sequence[GpuState], strategy: Strategy):
    """Labels and resources GFD and the device plugin publish for these GPUs under `strategy`."""
    return advertise(observed_results(models, states), strategy)


def layout_annotation(models: Sequence[GpuModel], states: Sequence[GpuState]) -> list[dict[str, object]]:
    """docs/interfaces.md's `migops.io/mig.layout` value."""
    return [
        {
            "gpu": s.index,
            "device_id": m.device_id,
            "mig_enabled": s.mig_enabled,
            "instances": [{**i.placement.as_dict(), "compute": list(i.composition)} for i in s.instances],
        }
        for m, s in zip(models, states)
    ]

"""The per-GPU diff: what stays, what goes, what is created where."""

from __future__ import annotations

import pytest

from migops.agent.backend import ComputeInstance, GpuInstance, GpuState
from migops.agent.plan import desired_from_result, gfd_advertisement, matches, observed_results, plan_gpu
from migops.mig.catalogue import catalogue
from migops.mig.spec import parse_config
from migops.mig.validate import validate_on_node

H100 = catalogue().resolve("0x233010DE")


def _desired(devices: str, enabled: bool = True):
    text = f"version: v1\nmig-configs:\n  c:\n    - devices: all\n      mig-enabled: {str(enabled).lower()}\n"
    if enabled:
        text += f"      mig-devices: {{{devices}}}\n"
    report = validate_on_node(parse_config(text), "c", [H100])
    assert report.valid, report.problems
    return desired_from_result(report.gpus[0])


def _gi(id_: int, profile: str, start: int, size: int, cis: tuple[int, ...], pids: tuple[int, ...] = ()) -> GpuInstance:
    return GpuInstance(id_, profile, start, size, tuple(ComputeInstance(i, c) for i, c in enumerate(cis)), pids)


BALANCED = GpuState(
    0,
    True,
    True,
    (
        _gi(1, "1g.10gb", 0, 1, (1,)),
        _gi(2, "1g.10gb", 1, 1, (1,)),
        _gi(3, "2g.20gb", 2, 2, (2,)),
        _gi(4, "3g.40gb", 4, 4, (3,)),
    ),
)


def test_compute_subprofiles_are_packed_into_gpu_instances() -> None:
    d = _desired('"1c.3g.40gb": 3, "3g.40gb": 1')
    assert sorted(ci for _, ci in d.instances) == [(1, 1, 1), (3,)]
    assert sorted(p.start for p, _ in d.instances) == [0, 4]


def test_unchanged_gpu_has_no_step_even_at_other_placements() -> None:
    d = _desired('"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1')
    assert matches(BALANCED, d)
    moved = GpuState(
        0,
        True,
        True,
        (
            _gi(1, "2g.20gb", 0, 2, (2,)),
            _gi(2, "1g.10gb", 2, 1, (1,)),
            _gi(3, "1g.10gb", 3, 1, (1,)),
            _gi(4, "3g.40gb", 4, 4, (3,)),
        ),
    )
    assert matches(moved, d)
    assert not plan_gpu(moved, d).touches


def test_instances_that_can_stay_stay() -> None:
    plan = plan_gpu(BALANCED, _desired('"1g.10gb": 4, "3g.40gb": 1'))
    assert not plan.mode_change
    assert [i.id for i in plan.keep] == [1, 2, 4]
    assert [i.id for i in plan.must_go] == [3]
    assert [str(s) for s in plan.steps] == [
        "GPU 0: destroy_ci 2g.20gb@2 ci=0",
        "GPU 0: destroy_gi 2g.20gb@2",
        "GPU 0: create_gi 1g.10gb@2",
        "GPU 0: create_ci 1g.10gb@2 1c",
        "GPU 0: create_gi 1g.10gb@3",
        "GPU 0: create_ci 1g.10gb@3 1c",
    ]


def test_repartitioned_gpu_instance_keeps_its_gi() -> None:
    plan = plan_gpu(BALANCED, _desired('"1g.10gb": 2, "2g.20gb": 1, "1c.3g.40gb": 3'))
    assert [i.id for i in plan.keep] == [1, 2, 3]
    assert [s.op for s in plan.steps] == ["destroy_ci", "create_ci", "create_ci", "create_ci"]
    assert all(s.gi == 4 for s in plan.steps)


def test_busy_instances_are_reported() -> None:
    busy = GpuState(
        0, True, True, BALANCED.instances[:2] + (_gi(3, "2g.20gb", 2, 2, (2,), (77,)),) + BALANCED.instances[3:]
    )
    plan = plan_gpu(busy, _desired('"1g.10gb": 4, "3g.40gb": 1'))
    assert [(i.id, i.pids) for i in plan.busy] == [(3, (77,))]
    assert not plan_gpu(busy, _desired('"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1')).busy


def test_mode_changes() -> None:
    off = GpuState(0, False, False, ())
    plan = plan_gpu(off, _desired('"7g.80gb": 1'))
    assert plan.mode_change and [s.op for s in plan.steps] == ["create_gi", "create_ci"]
    plan = plan_gpu(BALANCED, _desired("", enabled=False))
    assert plan.mode_change and sum(s.op == "destroy_gi" for s in plan.steps) == 4
    assert not plan_gpu(off, _desired("", enabled=False)).touches
    pending = GpuState(0, False, True, ())  # enable requested, not yet reset
    assert not matches(pending, _desired("", enabled=False))


def test_what_gfd_sees_comes_from_the_gpus() -> None:
    results = observed_results([H100], [BALANCED])
    assert sorted(results[0].mig_devices) == ["1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"]
    ad = gfd_advertisement([H100], [BALANCED], "mixed")
    assert ad.resources == {"nvidia.com/mig-1g.10gb": 2, "nvidia.com/mig-2g.20gb": 1, "nvidia.com/mig-3g.40gb": 1}
    assert gfd_advertisement([H100], [BALANCED], "single").labels["nvidia.com/gpu.product"].endswith("MIG-INVALID")


def test_the_agent_executes_the_validators_packing_and_decides_none_of_its_own() -> None:
    """desired_from_result takes GpuResult.instances as it is (here one the validator would not make:
    the full CI in the GI at slice 0), and refuses a result that carries a layout but no packing."""
    import dataclasses

    import pytest

    report = validate_on_node(
        parse_config(
            'version: v1\nmig-configs:\n  c:\n    - devices: all\n      mig-enabled: true\n'
            '      mig-devices: {"1c.3g.40gb": 3, "3g.40gb": 1}\n'
        ),
        "c",
        [H100],
    )
    result = report.gpus[0]
    (low, first), (high, second) = sorted(result.instances)
    swapped = dataclasses.replace(result, instances=((low, second), (high, first)))
    assert desired_from_result(swapped).instances == ((low, second), (high, first))
    assert desired_from_result(result).instances == tuple(sorted(result.instances))
    with pytest.raises(ValueError, match="no compute-instance packing"):
        desired_from_result(dataclasses.replace(result, instances=()))


def test_the_agent_refuses_a_text_error_about_another_model_as_the_other_deciders_do() -> None:
    """One verdict (migops.mig.fit): an H100 entry naming a profile H100 lacks makes the config wrong for an
    A100 node too, so the agent refuses it before anything is paused, as webhook, reconciler and CLI do."""
    from migops.agent.desired import FlowFailure, desired_on_node
    from migops.agent.state import ConfigRequest
    from migops.mig.catalogue import catalogue
    from migops.mig.spec import parse_config

    text = (
        "version: v1\nmig-configs:\n  mixed-fleet:\n"
        "    - device-filter: [\"0x233010DE\"]\n      devices: all\n      mig-enabled: true\n"
        "      mig-devices: {\"3g.45gb\": 1}\n"
        "    - device-filter: [\"0x20B010DE\"]\n      devices: all\n      mig-enabled: true\n"
        "      mig-devices: {\"3g.20gb\": 2}\n"
    )
    a100 = catalogue().resolve("0x20B010DE")
    request = ConfigRequest("mixed-fleet", parse_config(text), None, "mixed", "gpu-operator")
    with pytest.raises(FlowFailure, match="3g.45gb"):
        desired_on_node(request, [a100, a100])


def test_the_plan_keeps_the_instance_running_work_where_the_target_allows() -> None:
    """The agent plans with the processes it sees on each instance: a busy 2g.20gb at 4 survives a
    reconfiguration that, planned lowest start first, would destroy it."""
    state = GpuState(0, True, True, (_gi(1, "1g.20gb", 0, 2, (1,)), _gi(2, "2g.20gb", 4, 2, (2,), (4242,))))
    target = _desired('"3g.40gb": 1, "2g.20gb": 1, "1g.20gb": 1')
    plan = plan_gpu(state, target)
    assert plan.busy == () and [i.id for i in plan.keep] == [2]
    assert [i.id for i in plan.must_go] == [1]
    assert sorted((p.profile, p.start) for p, _ in plan.target) == [("1g.20gb", 6), ("2g.20gb", 4), ("3g.40gb", 0)]
    idle = GpuState(0, True, True, (_gi(1, "1g.20gb", 0, 2, (1,)), _gi(2, "2g.20gb", 4, 2, (2,))))
    assert [i.id for i in plan_gpu(idle, target).keep] == [1]  # nothing runs: the plan it always was
    # A busy instance the target re-partitions ends all the same: it is not worth a layout of its own.
    split = _desired('"3g.40gb": 1, "1c.2g.20gb": 2, "1g.20gb": 1')
    assert plan_gpu(state, split).busy

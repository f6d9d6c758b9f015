"""The engine: the seed scenario end to end on the pure core, and a random world of instances."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest
from fleet_builders import POOL, host

from lowcostgpu.core import engine
from lowcostgpu.core.effects import EmitEvent, SignalWorkload, StartWorkload
from lowcostgpu.core.engine import EngineState, LaunchSpec
from lowcostgpu.core.lifecycle import (
    CheckpointReported,
    CompletionReported,
    ResumeRequested,
    StopRequested,
    WorkloadExited,
    WorkloadStarted,
)
from lowcostgpu.core.metering import instance_gpu_spans, meter
from lowcostgpu.core.rating import build_invoice
from lowcostgpu.core.scheduler import SchedulerConfig
from lowcostgpu.core.snapshot import FleetSnapshot
from lowcostgpu.domain.capacity import CapacityClass
from lowcostgpu.domain.catalog import parse_catalog
from lowcostgpu.domain.errors import InsufficientCapacity
from lowcostgpu.domain.events import Reason
from lowcostgpu.domain.status import InstanceStatus

CATALOG = parse_catalog(
    (Path(__file__).parents[2] / "src/lowcostgpu/domain/catalog.toml").read_text()
)
CONFIG = SchedulerConfig(min_runtime_s=60)
ODC, INT = CapacityClass.ON_DEMAND, CapacityClass.INTERRUPTIBLE


def reasons(step: engine.EngineStep, subject: str) -> list[Reason]:
    return [e.reason for e in step.effects if isinstance(e, EmitEvent) and e.object_id == subject]


def test_the_seed_scenario_interrupt_requeue_resume_and_bill() -> None:
    state = EngineState(FleetSnapshot.build([host("h1", 8)]))
    spec = LaunchSpec("i-b3e19d02", POOL, 8, INT, account_id="acme")
    step = engine.launch(state, spec, 1000, CONFIG)
    assert reasons(step, "i-b3e19d02") == [Reason.QUEUED, Reason.SCHEDULED]
    start = next(e for e in step.effects if isinstance(e, StartWorkload))
    assert (start.gpu_indices, start.restart_count) == ((0, 1, 2, 3, 4, 5, 6, 7), 0)
    step = engine.report(step.state, "i-b3e19d02", WorkloadStarted(), 1010, CONFIG)
    step = engine.report(step.state, "i-b3e19d02", CheckpointReported(4200), 12_000, CONFIG)

    # 03:12 an on-demand request needs the GPUs: the interruptible instance is reclaimed.
    step = engine.launch(step.state, LaunchSpec("od-1", POOL, 8, ODC), 12_520, CONFIG)
    assert Reason.PREEMPTED in reasons(step, "i-b3e19d02")
    assert any(isinstance(e, SignalWorkload) and e.signal == "SIGTERM" for e in step.effects)
    assert not any(isinstance(e, StartWorkload) for e in step.effects)  # od-1 waits
    assert step.wake_at == 12_520 + 300

    # The workload checkpoints and exits in its grace period: od-1 starts at once.
    step = engine.report(step.state, "i-b3e19d02", WorkloadExited(0), 12_550, CONFIG)
    assert reasons(step, "i-b3e19d02") == [Reason.INTERRUPTED, Reason.REQUEUED]
    assert [e.subject_id for e in step.effects if isinstance(e, StartWorkload)] == ["od-1"]
    inst = step.state.instance("i-b3e19d02")
    assert inst.status is InstanceStatus.QUEUED
    assert inst.enqueued_at == 1000  # back at its original place in the queue
    step = engine.report(step.state, "od-1", WorkloadStarted(), 12_551, CONFIG)

    # 03:57 capacity frees: auto-restarted from the volume, restart count 1.
    step = engine.report(step.state, "od-1", WorkloadExited(0), 15_220, CONFIG)
    restart = next(e for e in step.effects if isinstance(e, StartWorkload))
    assert (restart.subject_id, restart.restart_count) == ("i-b3e19d02", 1)
    step = engine.report(step.state, "i-b3e19d02", WorkloadStarted(), 15_230, CONFIG)
    assert Reason.RESTARTED in reasons(step, "i-b3e19d02")
    step = engine.report(step.state, "i-b3e19d02", CompletionReported(9000), 20_000, CONFIG)
    step = engine.report(step.state, "i-b3e19d02", WorkloadExited(0), 20_010, CONFIG)
    inst = step.state.instance("i-b3e19d02")
    assert inst.status is InstanceStatus.SUCCEEDED

    # GPU billing: 1010 → 12520 (notice) and 15230 → 20010 (exit), 8 GPUs, half price.
    records = meter(instance_gpu_spans(inst), {}, 30_000, 60)
    gpu_s = sum(r.quantity_s for r in records)
    assert gpu_s == 8 * ((12_520 - 1010) + (20_010 - 15_230))
    invoice = build_invoice("acme", records, CATALOG, 0, 30_000)
    exact = Decimal(gpu_s) * Decimal("0.234") / 3600  # a100-sxm4 at 0.468 × 0.50
    assert invoice.total.amount == exact.quantize(Decimal("0.01"))
    assert invoice.savings.amount == invoice.total.amount


def test_on_demand_that_cannot_fit_is_refused_and_changes_nothing() -> None:
    state = EngineState(FleetSnapshot.build([host("h1", 2)]))
    step = engine.launch(state, LaunchSpec("od-1", POOL, 2, ODC), 0, CONFIG)
    with pytest.raises(InsufficientCapacity):
        engine.launch(step.state, LaunchSpec("od-2", POOL, 1, ODC), 0, CONFIG)
    assert set(step.state.instances) == {"od-1"}


@pytest.mark.parametrize(("exit_at", "killed"), [(1299, False), (1300, True)])
def test_grace_deadline_boundary(exit_at: int, killed: bool) -> None:
    state = EngineState(FleetSnapshot.build([host("h1", 1)]))
    step = engine.launch(state, LaunchSpec("i", POOL, 1, INT), 0, CONFIG)
    step = engine.report(step.state, "i", WorkloadStarted(), 0, CONFIG)
    step = engine.launch(step.state, LaunchSpec("od", POOL, 1, ODC), 1000, CONFIG)
    step = engine.tick(step.state, exit_at, CONFIG)
    assert (Reason.KILLED in reasons(step, "i")) is killed
    starts = [e.subject_id for e in step.effects if isinstance(e, StartWorkload)]
    assert starts == (["od"] if killed else [])


def test_a_user_stop_ends_in_stopped_without_requeue() -> None:
    state = EngineState(FleetSnapshot.build([host("h1", 1)]))
    step = engine.launch(state, LaunchSpec("i", POOL, 1, INT), 0, CONFIG)
    step = engine.report(step.state, "i", WorkloadStarted(), 0, CONFIG)
    step = engine.report(step.state, "i", StopRequested(), 10, CONFIG)
    step = engine.report(step.state, "i", WorkloadExited(0), 20, CONFIG)
    assert step.state.instance("i").status is InstanceStatus.STOPPED
    assert list(step.state.fleet.tickets()) == []
    assert list(step.state.fleet.allocations()) == []


@pytest.mark.parametrize(
    "resume_at", [20, 21]
)  # the same second as the first run's stop, and after
def test_a_run_resumed_in_the_same_second_gets_its_own_allocation_and_start(resume_at: int) -> None:
    """A start effect is keyed by allocation: a shared id would make the resumed run's start look
    already done, and the instance would stay `starting` for ever."""
    state = EngineState(FleetSnapshot.build([host("h1", 1)]))
    step = engine.launch(state, LaunchSpec("i", POOL, 1, ODC), 20, CONFIG)
    first = next(e for e in step.effects if isinstance(e, StartWorkload))
    step = engine.report(step.state, "i", WorkloadStarted(), 20, CONFIG)
    step = engine.report(step.state, "i", StopRequested(), 20, CONFIG)
    step = engine.report(step.state, "i", WorkloadExited(0), 20, CONFIG)
    step = engine.report(step.state, "i", ResumeRequested(), resume_at, CONFIG)
    second = next(e for e in step.effects if isinstance(e, StartWorkload))
    assert second.allocation_id != first.allocation_id
    assert second.effect_key != first.effect_key
    assert step.state.instance("i").allocation_id == second.allocation_id
    assert [a.id for a in step.state.fleet.allocations()] == [second.allocation_id]
    rebuilt = engine.state_from_instances([host("h1", 1)], [step.state.instance("i")])
    assert [a.id for a in rebuilt.fleet.allocations()] == [second.allocation_id]

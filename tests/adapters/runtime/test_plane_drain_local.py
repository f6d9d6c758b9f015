"""End to end on real processes: the control plane on `LocalRuntime` drains a workload that
keeps running after its SIGTERM (as one that checkpoints would). The SIGTERM is carried out
late (the clock moves between the reclaim's commit and the signal): the SIGKILL comes at the
real SIGTERM + grace, not a second before, and the exit reaches the plane as a change."""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from conftest import PROGRAM, LocalHarness, plane_on
from lowcostgpu.adapters.clock import FixedClock
from lowcostgpu.adapters.fakes import FakeVolumes
from lowcostgpu.adapters.store.memory import MemoryStore
from lowcostgpu.app.effects import Outcome
from lowcostgpu.app.launch import LaunchRequest
from lowcostgpu.bootstrap.wiring import Wired
from lowcostgpu.domain.capacity import Host, PoolKey
from lowcostgpu.domain.events import Reason
from lowcostgpu.domain.status import InstanceStatus
from lowcostgpu.ports.store_records import OutboxEntry
from waiting import wait_until

GRACE, LATE = 30, 7


@pytest.fixture
def plane_on_local(local: LocalHarness) -> Iterator[tuple[Wired, FixedClock, MemoryStore]]:
    clock, store = FixedClock(1_000_000), MemoryStore()
    hosts = [Host("h1", PoolKey("eu-west", "a100-sxm4"), 8)]
    wired = plane_on(local.runtime, hosts, store, FakeVolumes(), clock)
    yield wired, clock, store


def _argv(control: Path) -> tuple[str, ...]:
    control.mkdir(parents=True, exist_ok=True)
    return (sys.executable, str(PROGRAM), str(control))


@pytest.mark.parametrize(("offset_s", "killed"), [(-1, False), (0, True)])
def test_a_late_sigterm_on_real_processes_is_followed_by_sigkill_at_sent_plus_grace(
    local: LocalHarness,
    plane_on_local: tuple[Wired, FixedClock, MemoryStore],
    offset_s: int,
    killed: bool,
) -> None:
    wired, clock, store = plane_on_local
    plane, control = wired.plane, local.root / "control" / "victim"
    victim = plane.launch(
        LaunchRequest(
            "acme",
            "a100-sxm4",
            "interruptible",
            8,
            command=_argv(control),
            grace_period_s=GRACE,
            auto_requeue=False,  # it does not run again once the on-demand instance has left
        )
    ).state.id

    def running(instance_id: str) -> bool:
        plane.tick()
        return store.instance(instance_id).state.status is InstanceStatus.RUNNING

    wait_until(lambda: running(victim) and (control / "ready").exists(), what="victim running")
    run = plane.outbox._carry_out

    def late(entries: Sequence[OutboxEntry]) -> Outcome:
        if any(e.kind == "SignalWorkload" for e in entries):
            clock.advance(LATE)
        return run(entries)

    plane.outbox._carry_out = late
    decided = clock.now()
    od_control = local.root / "control" / "od"
    od = plane.launch(LaunchRequest("acme", "a100-sxm4", "on-demand", 8, command=_argv(od_control)))
    wait_until((control / "sigterm-main").exists, what="the SIGTERM delivered")
    assert store.instance(victim).state.deadline == decided + LATE + GRACE
    clock.at = decided + LATE + GRACE + offset_s
    plane.tick()
    if not killed:
        assert store.instance(victim).state.status is InstanceStatus.INTERRUPTING
        assert not (od_control / "ready").exists()
        return
    assert Reason.KILLED in [e.reason for e in store.events() if e.object_id == victim]
    wait_until(lambda: running(od.state.id), what="the on-demand instance running")
    (od_control / "exit").write_text("0")

    def succeeded() -> bool:
        plane.tick()
        return store.instance(od.state.id).state.status is InstanceStatus.SUCCEEDED

    wait_until(succeeded, what="the on-demand exit seen as a change")

"""Multi-node instances (gangs) through the engine: placed whole, reclaimed and requeued as one."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pytest
from fleet_builders import POOL, host

from lowcostgpu.core import engine
from lowcostgpu.core.effects import Effect, EmitEvent, KillWorkload, SignalWorkload, StartWorkload
from lowcostgpu.core.engine import EngineState, LaunchSpec
from lowcostgpu.core.lifecycle import (
    CheckpointReported,
    LifecycleEvent,
    StartFailed,
    StopRequested,
    WorkloadExited,
    WorkloadStarted,
)
from lowcostgpu.core.metering import instance_gpu_spans, meter
from lowcostgpu.core.scheduler import SchedulerConfig
from lowcostgpu.core.snapshot import FleetSnapshot
from lowcostgpu.core.victim_policy import LEAST_WORK_LOST
from lowcostgpu.domain.capacity import CapacityClass
from lowcostgpu.domain.errors import InvalidRequest
from lowcostgpu.domain.events import Reason
from lowcostgpu.domain.status import InstanceStatus

_I = InstanceStatus
IR, OD = CapacityClass.INTERRUPTIBLE, CapacityClass.ON_DEMAND
CONFIG = SchedulerConfig(min_runtime_s=0, policy=LEAST_WORK_LOST)


@dataclass
class World:
    """An engine state and what its last step said, driven at chosen times."""

    hosts: int = 3
    gpus_per_host: int = 4
    config: SchedulerConfig = CONFIG
    state: EngineState = field(init=False)
    effects: list[Effect] = field(default_factory=list)

    def __post_init__(self) -> None:
        hosts = [host(f"h{i}", self.gpus_per_host) for i in range(self.hosts)]
        self.state = EngineState(FleetSnapshot.build(hosts))

    def launch(
        self, iid: str, gpus: int, at: int, nodes: int = 1, cls: CapacityClass = IR, hold_s: int = 0
    ) -> None:
        spec = LaunchSpec(
            iid, POOL, gpus, cls, grace_period_s=60, nodes=nodes, hold_survivors_s=hold_s
        )
        self._take(engine.launch(self.state, spec, at, self.config))

    def report(self, iid: str, event: LifecycleEvent, at: int) -> None:
        self._take(engine.report(self.state, iid, event, at, self.config))

    def tick(self, at: int) -> None:
        self._take(engine.tick(self.state, at, self.config))

    def _take(self, step: engine.EngineStep) -> None:
        self.state, self.effects = step.state, list(step.effects)

    def of(self, kind: type, iid: str) -> list[Effect]:
        return [e for e in self.effects if isinstance(e, kind) and _subject(e) == iid]

    def reasons(self, iid: str) -> list[Reason]:
        return [e.reason for e in self.effects if isinstance(e, EmitEvent) and e.object_id == iid]

    def status(self, iid: str) -> InstanceStatus:
        return self.state.instances[iid].status

    def hosts_of(self, iid: str) -> list[str]:
        return sorted(a.host_id for a in self.state.fleet.allocations() if a.subject_id == iid)


def _subject(effect: Effect) -> str:
    return str(getattr(effect, "subject_id", getattr(effect, "object_id", "")))


def running_gang(nodes: int = 2, at: int = 0) -> World:
    world = World()
    world.launch("g", 4, at, nodes=nodes)
    world.report("g", WorkloadStarted(), at + 1)
    return world


def test_a_gang_starts_every_member_on_its_own_host_with_its_rank() -> None:
    world = World()
    world.launch("g", 4, 0, nodes=2)
    starts = world.of(StartWorkload, "g")
    assert [(s.rank, s.nodes, s.host_id) for s in starts] == [(0, 2, "h0"), (1, 2, "h1")]
    assert {s.master_host_id for s in starts} == {"h0"}
    assert len({s.allocation_id for s in starts}) == 2
    assert world.hosts_of("g") == ["h0", "h1"]


def test_a_gang_waits_until_every_host_is_free_at_once() -> None:
    world = World(hosts=2)
    world.launch("small", 1, 0)
    world.launch("g", 4, 1, nodes=2)
    assert world.status("g") is _I.QUEUED and world.hosts_of("g") == []  # never a partial gang
    world.report("small", WorkloadStarted(), 2)
    world.report("small", WorkloadExited(0), 100)
    assert world.status("g") is _I.STARTING and world.hosts_of("g") == ["h0", "h1"]


def test_a_gang_at_the_head_holds_hosts_for_itself_as_they_free() -> None:
    config_wait = CONFIG.head_reservation_after_s
    world = World(hosts=2)
    world.launch("a", 2, 0)
    world.launch("b", 2, 0)  # h0 full (a, b); h1 empty
    world.launch("g", 4, 1, nodes=2)
    world.report("a", WorkloadExited(0), config_wait + 10)  # h0 half free: the gang still waits
    world.launch("late", 2, config_wait + 11)
    assert world.status("late") is _I.QUEUED  # the head's hosts are held: no backfill on them
    world.report("b", WorkloadExited(0), config_wait + 20)
    assert world.status("g") is _I.STARTING


def test_too_many_nodes_for_the_pool_is_refused_with_what_fits() -> None:
    with pytest.raises(InvalidRequest, match="only 3 host"):
        World().launch("g", 4, 0, nodes=4)


def test_on_demand_gangs_are_refused_with_what_to_do() -> None:
    with pytest.raises(InvalidRequest, match="interruptible"):
        World().launch("g", 4, 0, nodes=2, cls=OD)


def test_victim_choice_prices_a_gang_at_all_its_gpus() -> None:
    """Two hosts of a gang (2 × 4 GPUs) and a lone 4-GPU job that lost more per host: the lone
    job is the cheaper victim (4 × 1,000 s < 8 × 900 s), though one gang member alone is not."""
    world = World()
    world.launch("lone", 4, 0)
    world.report("lone", WorkloadStarted(), 0)
    world.launch("g", 4, 100, nodes=2)
    world.report("g", WorkloadStarted(), 100)
    world.launch("od", 4, 1000, cls=OD)
    assert Reason.PREEMPTED in world.reasons("lone")
    assert world.status("g") is _I.RUNNING


def test_a_reclaimed_gang_signals_all_members_and_ends_when_the_last_has_exited() -> None:
    world = World(hosts=2)
    world.launch("g", 4, 0, nodes=2)
    world.report("g", WorkloadStarted(), 1)
    world.launch("od", 4, 500, cls=OD)
    assert world.reasons("g").count(Reason.PREEMPTED) == 1  # one event for the gang
    (notice,) = [e for e in world.of(EmitEvent, "g") if e.reason is Reason.PREEMPTED]
    assert notice.data["host_ids"] == ["h0", "h1"] and notice.data["nodes"] == 2
    signalled = {e.allocation_id for e in world.of(SignalWorkload, "g")}
    assert signalled == set(world.state.instances["g"].allocation_ids())
    rank0, rank1 = world.state.instances["g"].allocation_ids()
    world.report("g", WorkloadExited(143, rank1), 510)
    assert world.status("g") is _I.INTERRUPTING  # one member still saving
    world.report("g", WorkloadExited(143, rank0), 520)
    assert world.reasons("g")[-1] is Reason.REQUEUED
    assert world.status("g") is _I.QUEUED and world.hosts_of("g") == []
    assert world.status("od") in (_I.STARTING, _I.RUNNING)


@pytest.mark.parametrize(
    ("rank1_exits", "tick_at", "killed"),
    [
        (True, 559, 0),  # before the deadline (notice at 500, grace 60): nothing killed yet
        (True, 560, 1),  # at it: only the member still running
        (False, 560, 2),  # neither exited: both
    ],
)
def test_at_the_deadline_only_the_members_still_running_are_killed(
    rank1_exits: bool, tick_at: int, killed: int
) -> None:
    world = World(hosts=2)
    world.launch("g", 4, 0, nodes=2)
    world.report("g", WorkloadStarted(), 1)
    world.launch("od", 4, 500, cls=OD)
    rank1 = world.state.instances["g"].allocation_ids()[1]
    if rank1_exits:
        world.report("g", WorkloadExited(143, rank1), 530)
    world.tick(tick_at)
    assert len(world.of(KillWorkload, "g")) == killed
    assert world.status("g") is (_I.QUEUED if killed else _I.INTERRUPTING)


def test_a_gang_succeeds_when_every_member_has_exited_cleanly() -> None:
    world = running_gang()
    rank0, rank1 = world.state.instances["g"].allocation_ids()
    world.report("g", WorkloadExited(0, rank1), 50)
    assert world.status("g") is _I.RUNNING
    world.report("g", WorkloadExited(0, rank0), 60)
    assert world.status("g") is _I.SUCCEEDED and world.hosts_of("g") == []


@pytest.mark.parametrize(
    "event_of",
    [
        lambda member: WorkloadExited(1, member),
        lambda member: StartFailed("image not found", member),
    ],
    ids=["a member fails", "a member cannot start"],
)
def test_one_member_failing_fails_the_gang_and_kills_the_others(event_of: object) -> None:
    world = running_gang(nodes=3)
    ids = world.state.instances["g"].allocation_ids()
    world.report("g", event_of(ids[1]), 50)  # type: ignore[operator]
    assert world.status("g") is _I.FAILED
    assert {e.allocation_id for e in world.of(KillWorkload, "g")} == {ids[0], ids[2]}
    assert world.hosts_of("g") == []


def test_a_report_about_a_member_of_an_earlier_run_changes_nothing() -> None:
    world = running_gang()
    world.report("g", WorkloadExited(0, "g@0.7:r1"), 50)
    assert world.status("g") is _I.RUNNING and world.effects == []


def test_a_requeued_gang_restarts_every_member_with_the_next_restart_count() -> None:
    world = World(hosts=2)
    world.launch("g", 4, 0, nodes=2)
    world.report("g", WorkloadStarted(), 1)
    world.report("g", CheckpointReported(7), 300)
    world.launch("od", 4, 500, cls=OD)
    for member in world.state.instances["g"].allocation_ids():
        world.report("g", WorkloadExited(143, member), 510)
    assert world.status("g") is _I.QUEUED  # one host is the on-demand job's now
    world.report("od", WorkloadStarted(), 511)
    world.report("od", WorkloadExited(0), 600)
    starts = world.of(StartWorkload, "g")
    assert [(s.rank, s.restart_count) for s in starts] == [(0, 1), (1, 1)]
    assert len({s.host_id for s in starts}) == 2


def test_a_gang_is_billed_for_the_gpus_of_all_its_hosts() -> None:
    world = running_gang(nodes=3)
    for member in world.state.instances["g"].allocation_ids():
        world.report("g", WorkloadExited(0, member), 101)
    (span,) = instance_gpu_spans(world.state.instances["g"])
    assert (span.quantity, span.start, span.end) == (12, 1, 101)


# --- Keeping the survivors (`hold_survivors_s`) ------------------------------------------------


def reclaimed_gang(hold_s: int) -> tuple[World, str]:
    """h0, h1: a gang (hold `hold_s`); h2: on-demand work. An on-demand request at 500 takes one
    of the gang's hosts; the gang's members exit at 510. Returns the world and the kept host.
    (No head reservation in the way: the hold alone keeps the host.)"""
    world = World(config=replace(CONFIG, head_reservation_after_s=10_000))
    world.launch("base", 4, 0, cls=OD)  # h0: the best fit for the first request
    world.launch("g", 4, 1, nodes=2, hold_s=hold_s)
    world.report("g", WorkloadStarted(), 2)
    world.launch("od", 4, 500, cls=OD)
    members = world.state.instances["g"].allocation_ids()
    hosts = set(world.hosts_of("g"))
    for member in members:
        world.report("g", WorkloadExited(143, member), 510)
    kept = hosts - {a.host_id for a in world.state.fleet.allocations() if a.subject_id == "od"}
    return world, kept.pop()


def test_a_reclaimed_gang_keeps_its_other_host_from_the_queue_while_held() -> None:
    world, kept = reclaimed_gang(hold_s=120)
    state = world.state.instances["g"]
    assert state.status is _I.QUEUED and state.held_hosts == (kept,) and state.held_until == 630
    world.launch("small", 1, 520)
    assert world.status("small") is _I.QUEUED  # the only free host is held for the gang
    world.report("base", WorkloadExited(0), 560)  # one more host frees: the gang restarts
    assert world.status("g") is _I.STARTING and kept in world.hosts_of("g")
    assert world.state.instances["g"].held_hosts == ()


def test_without_a_hold_the_surviving_host_goes_to_the_queue_at_once() -> None:
    world, kept = reclaimed_gang(hold_s=0)
    world.launch("small", 1, 520)
    assert world.status("small") is _I.STARTING and world.hosts_of("small") == [kept]


@pytest.mark.parametrize(("tick_at", "released"), [(629, False), (630, True)])
def test_the_hold_ends_at_its_deadline_and_the_host_goes_back_to_the_queue(
    tick_at: int, released: bool
) -> None:
    world, _ = reclaimed_gang(hold_s=120)  # held from 510 to 630
    world.launch("small", 1, 520)
    world.tick(tick_at)
    assert (world.status("small") is _I.STARTING) is released
    assert (Reason.HOSTS_RELEASED in world.reasons("g")) is released
    assert world.status("g") is _I.QUEUED


def test_the_held_hosts_are_billed_from_the_drain_to_the_restart() -> None:
    world, _ = reclaimed_gang(hold_s=120)
    world.report("base", WorkloadExited(0), 560)
    spans = instance_gpu_spans(world.state.instances["g"])
    assert [(s.quantity, s.start, s.end) for s in spans] == [(8, 2, 500), (4, 510, 560)]


def test_a_gang_placed_again_the_second_its_hold_began_is_billed_once_for_each_second() -> None:
    """The hold starts when the drain ends and ends at the restart: in the same second, it is
    an empty span beside the new run, which metering must take, not refuse as an overlap (it
    did: "usage of g overlaps itself", found by the engine's Hypothesis world)."""
    world, _ = reclaimed_gang(hold_s=120)  # drained at 510, held from 510
    world.report("base", WorkloadExited(0), 510)  # h0 frees in the same second: placed again
    world.report("g", WorkloadStarted(), 510)
    world.report("g", StopRequested(), 540)
    spans = instance_gpu_spans(world.state.instances["g"])
    assert [(s.quantity, s.start, s.end) for s in spans] == [
        (8, 2, 500),
        (8, 510, 540),
        (4, 510, 510),
    ]
    billed = sum(r.quantity_s for r in meter(spans, {}, 10_000, 60))
    assert billed == 8 * 498 + 8 * 30


def test_a_stop_while_held_ends_the_hold_and_its_billing() -> None:
    world, _ = reclaimed_gang(hold_s=120)
    world.report("g", StopRequested(), 540)
    state = world.state.instances["g"]
    assert state.status is _I.STOPPED and not state.held_hosts
    assert instance_gpu_spans(state)[-1].end == 540


@pytest.mark.parametrize(
    ("nodes", "hold_s", "message"),
    [(1, 60, "for multi-node instances"), (2, 361, "0 to 360 s"), (2, -1, "0 to 360 s")],
)
def test_a_hold_that_cannot_apply_is_refused_with_what_can(
    nodes: int, hold_s: int, message: str
) -> None:
    with pytest.raises(InvalidRequest, match=message):
        World().launch("g", 4, 0, nodes=nodes, hold_s=hold_s)

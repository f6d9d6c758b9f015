"""Gangs that keep their survivors, under random reclaims: the hold's invariants at every step.

The general engine world (`test_engine_properties.py`) reaches a survivor hold rarely (in ~0.4 %
of its steps); this one is made for it: every gang holds its survivors and on-demand requests
come often, so that about two thirds of its steps start with a hold in force. A host held for a
gang takes no other preemptible work while the hold lasts; once the gang is placed (on its held
hosts or elsewhere) the hold is over and the host is anyone's."""

from __future__ import annotations

from fleet_builders import POOL, assert_holds_kept, host
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from lowcostgpu.core import engine
from lowcostgpu.core.engine import EngineState, EngineStep, LaunchSpec
from lowcostgpu.core.engine_state import build_index
from lowcostgpu.core.lifecycle import WorkloadExited, WorkloadStarted
from lowcostgpu.core.scheduler import SchedulerConfig
from lowcostgpu.core.snapshot import FleetSnapshot
from lowcostgpu.domain.capacity import CapacityClass
from lowcostgpu.domain.errors import InsufficientCapacity
from lowcostgpu.domain.status import InstanceStatus

_I = InstanceStatus
HOLD_S = 60


class HoldingWorld(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        # No head reservation: the hold alone must keep the hosts.
        self.config = SchedulerConfig(min_runtime_s=0, head_reservation_after_s=10**6)
        self.state = EngineState(FleetSnapshot.build([host(f"h{i}", 2) for i in range(4)]))
        self.now, self.count = 0, 0

    def _apply(self, step: EngineStep) -> None:
        assert_holds_kept(self.state, step.state, self.now)
        self.state = step.state

    def _in(self, *statuses: InstanceStatus) -> list[str]:
        return sorted(i.id for i in self.state.instances.values() if i.status in statuses)

    @rule(nodes=st.integers(2, 3), gpus=st.integers(1, 2))
    def launch_gang(self, nodes: int, gpus: int) -> None:
        self.count += 1
        spec = LaunchSpec(
            f"g{self.count}", POOL, gpus, CapacityClass.INTERRUPTIBLE, grace_period_s=30,
            nodes=nodes, hold_survivors_s=HOLD_S,
        )  # fmt: skip
        self._apply(engine.launch(self.state, spec, self.now, self.config))

    @rule(gpus=st.integers(1, 2), on_demand=st.booleans())
    def launch(self, gpus: int, on_demand: bool) -> None:
        self.count += 1
        cls = CapacityClass.ON_DEMAND if on_demand else CapacityClass.INTERRUPTIBLE
        spec = LaunchSpec(f"x{self.count}", POOL, gpus, cls, grace_period_s=30)
        try:
            self._apply(engine.launch(self.state, spec, self.now, self.config))
        except InsufficientCapacity:
            assert on_demand

    @precondition(lambda self: any(i.launched for i in self.state.instances.values()))
    @rule(data=st.data())
    def starts(self, data: st.DataObject) -> None:
        ready = sorted(i.id for i in self.state.instances.values() if i.launched)
        subject = data.draw(st.sampled_from(ready))
        self._apply(engine.report(self.state, subject, WorkloadStarted(), self.now, self.config))

    @precondition(lambda self: self._in(_I.RUNNING, _I.INTERRUPTING, _I.STOPPING))
    @rule(data=st.data(), code=st.sampled_from([0, 143]))
    def a_member_exits(self, data: st.DataObject, code: int) -> None:
        subject = data.draw(st.sampled_from(self._in(_I.RUNNING, _I.INTERRUPTING, _I.STOPPING)))
        member = data.draw(st.sampled_from(self.state.instances[subject].allocation_ids()))
        event = WorkloadExited(code, member)
        self._apply(engine.report(self.state, subject, event, self.now, self.config))

    @rule(dt=st.integers(1, 40))
    def time_passes(self, dt: int) -> None:
        self.now += dt
        self._apply(engine.tick(self.state, self.now, self.config))

    @invariant()
    def a_hold_is_a_queued_gangs_own_hosts_for_at_most_its_time(self) -> None:
        for instance_id, hold in self.state.index.survivor_holds.items():
            inst = self.state.instances[instance_id]
            assert inst.status is _I.QUEUED and inst.nodes > 1
            assert 0 < len(hold.hosts) < inst.nodes and len(set(hold.hosts)) == len(hold.hosts)
            assert hold.until - HOLD_S <= self.now  # it began at a drain's end, not later
        rebuilt = build_index(self.state.instances, self.state.nodes)
        assert dict(self.state.index.survivor_holds) == dict(rebuilt.survivor_holds)

    @invariant()
    def held_billing_never_outlasts_the_hold(self) -> None:
        for inst in self.state.instances.values():
            for run in inst.held_runs:
                end = self.now if run.billed_until is None else run.billed_until
                assert 0 <= end - run.started_at <= HOLD_S
                if run.billed_until is None:  # the hold in force: what it keeps is billed
                    assert inst.held and run.gpus == inst.gpus * len(inst.held_hosts), inst

    @invariant()
    def no_partial_gang_ever_holds_gpus(self) -> None:
        hosts: dict[str, list[str]] = {}
        for a in self.state.fleet.allocations():
            hosts.setdefault(a.subject_id, []).append(a.host_id)
        for subject, on in hosts.items():
            inst = self.state.instances[subject]
            assert len(on) == inst.nodes and len(set(on)) == inst.nodes


TestHoldingWorld = HoldingWorld.TestCase
TestHoldingWorld.settings = settings(max_examples=80, stateful_step_count=60, deadline=None)

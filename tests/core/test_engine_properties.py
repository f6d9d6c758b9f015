"""A random world driven through the engine: the invariants of the issue, checked at every step."""

from __future__ import annotations

from itertools import combinations

from fleet_builders import POOL, assert_holds_kept, host
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from lowcostgpu.core import engine
from lowcostgpu.core.effects import EmitEvent
from lowcostgpu.core.engine import EngineState, EngineStep, LaunchSpec
from lowcostgpu.core.engine_state import build_index
from lowcostgpu.core.lifecycle import (
    CheckpointReported,
    StopRequested,
    WorkloadExited,
    WorkloadStarted,
)
from lowcostgpu.core.metering import instance_gpu_spans, meter
from lowcostgpu.core.scheduler import SchedulerConfig
from lowcostgpu.core.snapshot import FleetSnapshot
from lowcostgpu.domain.capacity import CapacityClass
from lowcostgpu.domain.errors import InsufficientCapacity
from lowcostgpu.domain.events import Reason
from lowcostgpu.domain.status import INSTANCE_HOLDS_GPUS, InstanceStatus

_I = InstanceStatus
NOTICE_REASONS = {Reason.PREEMPTED, Reason.STOPPING}


class EngineWorld(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.config = SchedulerConfig(min_runtime_s=30, head_reservation_after_s=100)
        self.state = EngineState(FleetSnapshot.build([host("h0", 4), host("h1", 2), host("h2", 2)]))
        self.now = 0
        self.count = 0
        # The test's own account of running time: from the start report to the notice or exit.
        self.running_since: dict[str, int] = {}
        self.true_gpu_s: dict[str, int] = {}

    # Inputs ----------------------------------------------------------------------------------

    def _apply(self, step: EngineStep) -> None:
        assert_holds_kept(self.state, step.state, self.now)
        for effect in step.effects:
            if isinstance(effect, EmitEvent) and effect.reason in NOTICE_REASONS:
                self._stop_clock(effect.object_id)
        self.state = step.state

    def _stop_clock(self, subject: str) -> None:
        if subject in self.running_since:
            gpus = self.state.instances[subject].total_gpus
            gpus = gpus or self.true_gpus[subject]
            since = self.running_since.pop(subject)
            self.true_gpu_s[subject] = self.true_gpu_s.get(subject, 0) + gpus * (self.now - since)

    @property
    def true_gpus(self) -> dict[str, int]:
        return {i.id: i.total_gpus for i in self.state.instances.values()}

    @rule(gpus=st.integers(1, 4), on_demand=st.booleans())
    def launch(self, gpus: int, on_demand: bool) -> None:
        self.count += 1
        cls = CapacityClass.ON_DEMAND if on_demand else CapacityClass.INTERRUPTIBLE
        spec = LaunchSpec(f"x{self.count}", POOL, gpus, cls, grace_period_s=60)
        try:
            self._apply(engine.launch(self.state, spec, self.now, self.config))
        except InsufficientCapacity:
            assert on_demand

    @rule(gpus=st.integers(1, 2), nodes=st.integers(2, 3), hold_s=st.sampled_from([0, 60]))
    def launch_gang(self, gpus: int, nodes: int, hold_s: int) -> None:
        """A multi-node interruptible instance: `nodes` hosts of `gpus` GPUs each, which may
        keep its surviving hosts for `hold_s` after a reclaim."""
        self.count += 1
        spec = LaunchSpec(
            f"g{self.count}",
            POOL,
            gpus,
            CapacityClass.INTERRUPTIBLE,
            grace_period_s=60,
            nodes=nodes,
            hold_survivors_s=hold_s,
        )
        self._apply(engine.launch(self.state, spec, self.now, self.config))

    def _in(self, *statuses: InstanceStatus) -> list[str]:
        return sorted(i.id for i in self.state.instances.values() if i.status in statuses)

    @precondition(lambda self: any(i.launched for i in self.state.instances.values()))
    @rule(data=st.data())
    def workload_starts(self, data: st.DataObject) -> None:
        ready = sorted(i.id for i in self.state.instances.values() if i.launched)
        subject = data.draw(st.sampled_from(ready))
        was = self.state.instances[subject].status
        self._apply(engine.report(self.state, subject, WorkloadStarted(), self.now, self.config))
        if was is _I.STARTING and self.state.instances[subject].status is _I.RUNNING:
            self.running_since[subject] = self.now

    @precondition(lambda self: self._in(_I.RUNNING, _I.INTERRUPTING, _I.STOPPING))
    @rule(data=st.data(), code=st.sampled_from([0, 1, 143]))
    def workload_exits(self, data: st.DataObject, code: int) -> None:
        subject = data.draw(st.sampled_from(self._in(_I.RUNNING, _I.INTERRUPTING, _I.STOPPING)))
        inst = self.state.instances[subject]
        member = data.draw(st.sampled_from(inst.allocation_ids()))  # one member of a gang
        event = WorkloadExited(code, member)
        self._apply(engine.report(self.state, subject, event, self.now, self.config))
        if self.state.instances[subject].status is not _I.RUNNING:
            self._stop_clock(subject)  # the run ended (a gang's: at its last member or a failure)

    @precondition(lambda self: self._in(_I.RUNNING))
    @rule(data=st.data())
    def checkpoint(self, data: st.DataObject) -> None:
        subject = data.draw(st.sampled_from(self._in(_I.RUNNING)))
        # Sometimes with a save claim (the rebuilt fleet must carry it as the followed one does).
        save_s = data.draw(st.none() | st.integers(0, 400))
        event = CheckpointReported(self.now, save_s, data.draw(st.booleans()))
        self._apply(engine.report(self.state, subject, event, self.now, self.config))

    @precondition(lambda self: self._in(_I.RUNNING))
    @rule(data=st.data())
    def user_stops(self, data: st.DataObject) -> None:
        subject = data.draw(st.sampled_from(self._in(_I.RUNNING)))
        self._apply(engine.report(self.state, subject, StopRequested(), self.now, self.config))

    @rule(dt=st.integers(1, 90))
    def time_passes(self, dt: int) -> None:
        wake = engine.next_wake(self.state)
        self.now += dt
        if wake is not None and wake <= self.now:
            for i in self.state.instances.values():
                if i.deadline is not None and i.deadline <= self.now:
                    self._stop_clock(i.id)  # SIGKILL ends it, if the notice did not already
        self._apply(engine.tick(self.state, self.now, self.config))

    # Invariants ------------------------------------------------------------------------------

    @invariant()
    def no_gpu_index_is_held_twice(self) -> None:
        for hs in self.state.fleet.hosts.values():
            for a, b in combinations(hs.allocations, 2):
                if a.gpu_indices & b.gpu_indices:
                    assert a.id in b.waits_for or b.id in a.waits_for

    @invariant()
    def on_demand_is_never_interrupted(self) -> None:
        for i in self.state.instances.values():
            if i.capacity_class is CapacityClass.ON_DEMAND:
                assert i.status not in (_I.INTERRUPTING, _I.INTERRUPTED)
                assert i.interruption_count == 0

    @invariant()
    def fleet_and_instances_agree(self) -> None:
        held: dict[str, set[str]] = {}
        hosts: dict[str, list[str]] = {}
        for a in self.state.fleet.allocations():
            held.setdefault(a.subject_id, set()).add(a.id)
            hosts.setdefault(a.subject_id, []).append(a.host_id)
        queued = {t.subject_id for t in self.state.fleet.tickets()}
        for i in self.state.instances.values():
            if i.status in INSTANCE_HOLDS_GPUS:
                assert held.get(i.id) == set(i.allocation_ids())
            else:
                assert i.id not in held
            assert (i.id in queued) == (i.status is _I.QUEUED)

    @invariant()
    def the_survivor_holds_index_is_the_one_the_instances_imply(self) -> None:
        rebuilt = build_index(self.state.instances, self.state.nodes)
        assert dict(self.state.index.survivor_holds) == dict(rebuilt.survivor_holds)

    @invariant()
    def no_partial_gang_ever_holds_gpus(self) -> None:
        """A multi-node instance holds all its hosts or none, each a distinct host."""
        hosts: dict[str, list[str]] = {}
        for a in self.state.fleet.allocations():
            hosts.setdefault(a.subject_id, []).append(a.host_id)
        for subject, on in hosts.items():
            inst = self.state.instances[subject]
            assert len(on) == inst.nodes and len(set(on)) == inst.nodes

    @invariant()
    def the_fleet_can_be_rebuilt_from_the_instances_alone(self) -> None:
        """What the store keeps (instances) is enough: the snapshot is derived, not stored."""
        hosts = [hs.host for hs in self.state.fleet.hosts.values()]
        rebuilt = engine.state_from_instances(hosts, self.state.instances.values())
        assert sorted(rebuilt.fleet.allocations(), key=lambda a: a.id) == sorted(
            self.state.fleet.allocations(), key=lambda a: a.id
        )
        assert list(rebuilt.fleet.tickets()) == list(self.state.fleet.tickets())

    def teardown(self) -> None:
        """Metered GPU-seconds equal the true running time, to the second."""
        for i in self.state.instances.values():
            spans = instance_gpu_spans(i)
            closed = [s for s in spans if s.end is not None]
            if len(closed) != len(spans):
                continue  # still running: its open span is metered as time passes
            records = meter(closed, {}, self.now + 10_000, 60)
            held = sum(r.gpus * (r.billed_until - r.started_at) for r in i.held_runs if r.gpus)
            assert sum(r.quantity_s for r in records) == self.true_gpu_s.get(i.id, 0) + held


TestEngineWorld = EngineWorld.TestCase
TestEngineWorld.settings = settings(max_examples=120, stateful_step_count=50, deadline=None)

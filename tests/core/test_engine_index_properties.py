"""The engine's cost per decision: the index it keeps is the one a rebuild derives, every step
says which ids it changed, and finished instances can leave the state and come back.

A random world of instances (both classes) and clusters is driven through the engine; after
every step the index kept by `Work` must equal `build_index` of the records (cache equals
rebuild), `touched` must cover every id whose record differs from before, and an instance outside
`LIVE` must hold nothing, so that `forget_instances` may drop it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fleet_builders import POOL, host
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from lowcostgpu.core import cluster_engine, engine
from lowcostgpu.core.clusters import ClusterSpec
from lowcostgpu.core.engine import EngineState, EngineStep, LaunchSpec
from lowcostgpu.core.engine_state import build_index
from lowcostgpu.core.instance_state import LIVE
from lowcostgpu.core.lifecycle import (
    CheckpointReported,
    DeleteRequested,
    LifecycleEvent,
    ResumeRequested,
    StopRequested,
    WorkloadExited,
    WorkloadStarted,
)
from lowcostgpu.core.scheduler import SchedulerConfig
from lowcostgpu.core.snapshot import FleetSnapshot
from lowcostgpu.domain.capacity import CapacityClass
from lowcostgpu.domain.errors import Conflict, InsufficientCapacity
from lowcostgpu.domain.status import InstanceStatus, NodeStatus

_I = InstanceStatus
CONFIG = SchedulerConfig(min_runtime_s=30, head_reservation_after_s=100)
NO_RISK = SchedulerConfig(min_runtime_s=30, head_reservation_after_s=100, risk_window_s=0)


def _differs(before: Mapping[str, Any], after: Mapping[str, Any]) -> set[str]:
    return {k for k in {*before, *after} if before.get(k) != after.get(k)}


class IndexWorld(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        hosts = [host("h0", 4), host("h1", 4), host("h2", 2)]
        self.state = EngineState(FleetSnapshot.build(hosts))
        self.now = 0
        self.count = 0
        self.forgotten: dict[str, Any] = {}
        spec = ClusterSpec(POOL, 2, 1, 2, grace_period_s=40)
        self._apply(cluster_engine.create_cluster(self.state, "c", spec, 0, CONFIG))

    def _apply(self, step: EngineStep) -> None:
        before = self.state
        assert _differs(before.instances, step.state.instances) <= step.touched.instances
        assert _differs(before.nodes, step.state.nodes) <= step.touched.nodes
        assert _differs(before.clusters, step.state.clusters) <= step.touched.clusters
        self.state = step.state

    def _in(self, *statuses: InstanceStatus) -> list[str]:
        return sorted(i.id for i in self.state.instances.values() if i.status in statuses)

    def _report(self, subject: str, event: LifecycleEvent) -> None:
        self._apply(engine.report(self.state, subject, event, self.now, CONFIG))

    # Inputs ----------------------------------------------------------------------------------

    @rule(gpus=st.integers(1, 4), on_demand=st.booleans(), grace=st.sampled_from([0, 20, 60]))
    def launch(self, gpus: int, on_demand: bool, grace: int) -> None:
        self.count += 1
        cls = CapacityClass.ON_DEMAND if on_demand else CapacityClass.INTERRUPTIBLE
        spec = LaunchSpec(f"x{self.count:03d}", POOL, gpus, cls, grace_period_s=grace)
        try:
            self._apply(engine.launch(self.state, spec, self.now, CONFIG))
        except InsufficientCapacity:
            assert on_demand

    @precondition(lambda self: any(i.launched for i in self.state.instances.values()))
    @rule(data=st.data())
    def workload_starts(self, data: st.DataObject) -> None:
        ready = sorted(i.id for i in self.state.instances.values() if i.launched)
        self._report(data.draw(st.sampled_from(ready)), WorkloadStarted())

    @precondition(lambda self: self._in(_I.RUNNING, _I.INTERRUPTING, _I.STOPPING))
    @rule(data=st.data(), code=st.sampled_from([0, 1, 143]))
    def workload_exits(self, data: st.DataObject, code: int) -> None:
        subject = data.draw(st.sampled_from(self._in(_I.RUNNING, _I.INTERRUPTING, _I.STOPPING)))
        self._report(subject, WorkloadExited(code))

    @precondition(lambda self: self._in(_I.RUNNING))
    @rule(data=st.data())
    def checkpoint(self, data: st.DataObject) -> None:
        self._report(data.draw(st.sampled_from(self._in(_I.RUNNING))), CheckpointReported(1))

    @precondition(lambda self: self._in(_I.RUNNING, _I.QUEUED, _I.INTERRUPTING))
    @rule(data=st.data())
    def user_stops(self, data: st.DataObject) -> None:
        subject = data.draw(st.sampled_from(self._in(_I.RUNNING, _I.QUEUED, _I.INTERRUPTING)))
        self._report(subject, StopRequested())

    @precondition(lambda self: self._in(_I.STOPPED, _I.SUCCEEDED, _I.FAILED, _I.QUEUED))
    @rule(data=st.data())
    def user_deletes(self, data: st.DataObject) -> None:
        choices = self._in(_I.STOPPED, _I.SUCCEEDED, _I.FAILED, _I.QUEUED)
        self._report(data.draw(st.sampled_from(choices)), DeleteRequested())

    @rule(nodes=st.integers(0, 3))
    def cluster_target_changes(self, nodes: int) -> None:
        step = cluster_engine.update_cluster_target(self.state, "c", 2 * nodes, self.now, CONFIG)
        self._apply(step)

    @precondition(
        lambda self: any(n.status is NodeStatus.CORDONED for n in self.state.nodes.values())
    )
    @rule(data=st.data())
    def node_pods_leave(self, data: st.DataObject) -> None:
        cordoned = sorted(
            n.id for n in self.state.nodes.values() if n.status is NodeStatus.CORDONED
        )
        node_id = data.draw(st.sampled_from(cordoned))
        self._apply(cluster_engine.node_exited(self.state, node_id, self.now, CONFIG))

    @rule(dt=st.integers(1, 90))
    def time_passes(self, dt: int) -> None:
        self.now += dt
        self._apply(engine.tick(self.state, self.now, CONFIG))

    @rule()
    def finished_instances_leave(self) -> None:
        gone = [i for i in self.state.instances.values() if i.status not in LIVE]
        self.state = engine.forget_instances(self.state, [i.id for i in gone])
        self.forgotten.update({i.id: i for i in gone})
        assert not any(i.status not in LIVE for i in self.state.instances.values())

    @precondition(lambda self: self.forgotten)
    @rule(data=st.data())
    def a_stopped_instance_comes_back_and_resumes(self, data: st.DataObject) -> None:
        subject = data.draw(st.sampled_from(sorted(self.forgotten)))
        inst = self.forgotten.pop(subject)
        self.state = engine.adopt(self.state, inst)
        if inst.status in (_I.STOPPED, _I.INTERRUPTED):
            self._report(subject, ResumeRequested())

    @precondition(lambda self: self._in(_I.RUNNING))
    @rule()
    def a_live_instance_cannot_be_forgotten(self) -> None:
        try:
            engine.forget_instances(self.state, self._in(_I.RUNNING)[:1])
        except Conflict:
            return
        raise AssertionError("forgot a running instance")

    # Invariants ------------------------------------------------------------------------------

    @invariant()
    def the_index_kept_is_the_index_rebuilt(self) -> None:
        kept, rebuilt = self.state.index, build_index(self.state.instances, self.state.nodes)
        assert kept.describes(self.state.instances, self.state.nodes)
        assert dict(kept.instance_deadlines) == dict(rebuilt.instance_deadlines)
        assert list(kept.instance_deadline_order) == list(rebuilt.instance_deadline_order)
        assert dict(kept.node_deadlines) == dict(rebuilt.node_deadlines)
        assert dict(kept.cluster_nodes) == dict(rebuilt.cluster_nodes)

    @invariant()
    def next_wake_is_the_earliest_open_deadline_or_hold(self) -> None:
        deadlines = [
            i.deadline
            for i in self.state.instances.values()
            if i.deadline is not None and i.status in (_I.INTERRUPTING, _I.STOPPING)
        ]
        deadlines += [
            n.deadline
            for n in self.state.nodes.values()
            if n.deadline is not None and n.status is NodeStatus.CORDONED
        ]
        deadlines += [h.until for h in self.state.holds.values()]
        # and the end of a preemption-risk episode's oldest arrival, or a deferred replay of
        # its demand (`core.risk`)
        pools = self.state.risk.pools.values()
        deadlines += [p.expires_at for p in pools if p.warned and p.expires_at]
        deadlines += [p.replay_due_at for p in pools if p.replay_due_at is not None]
        assert engine.next_wake(self.state) == min(deadlines, default=None)

    @invariant()
    def an_instance_outside_live_holds_nothing(self) -> None:
        held = {a.subject_id for a in self.state.fleet.allocations()}
        queued = {t.subject_id for t in self.state.fleet.tickets()}
        for i in self.state.instances.values():
            if i.status not in LIVE:
                assert i.allocation_id is None and i.id not in held and i.id not in queued
                assert i.id not in self.state.index.instance_deadlines
                waited = {a for alloc in self.state.fleet.allocations() for a in alloc.waits_for}
                assert not waited & {r.allocation_id for r in i.runs}


TestIndexWorld = IndexWorld.TestCase
TestIndexWorld.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)


# --- Batched reports ---------------------------------------------------------------------------


def _running_world(n: int) -> EngineState:
    """`n` single-GPU jobs of both classes, all running, and nothing queued."""
    state = EngineState(FleetSnapshot.build([host("h0", 4), host("h1", 4)]))
    for k in range(n):
        cls = CapacityClass.ON_DEMAND if k % 2 else CapacityClass.INTERRUPTIBLE
        state = engine.launch(state, LaunchSpec(f"j{k}", POOL, 1, cls), 0, CONFIG).state
        state = engine.report(state, f"j{k}", WorkloadStarted(), 0, CONFIG).state
    return state


# Runtime reports (a stale one changes nothing; a user's request in a wrong status would raise).
_EVENTS = st.sampled_from(
    [WorkloadExited(0), WorkloadExited(1), WorkloadExited(143), CheckpointReported(3)]
)


@given(
    n=st.integers(1, 8),
    reports=st.lists(st.tuples(st.integers(0, 9), _EVENTS), max_size=10),
)
@settings(max_examples=80, deadline=None)
def test_a_batch_of_reports_is_the_reports_one_by_one_when_nothing_is_queued(
    n: int, reports: list[tuple[int, LifecycleEvent]]
) -> None:
    # A batch assesses the preemption risk once, at the end, as it makes one queue pass: the
    # warnings in between are the difference (`engine.report_many`), so they are off here.
    state = _running_world(n)
    events = [(f"j{k}", event) for k, event in reports]
    one_by_one, effects, touched = state, [], engine.NOTHING
    for subject, event in events:
        if subject in one_by_one.instances:
            step = engine.report(one_by_one, subject, event, 10, NO_RISK)
            one_by_one, touched = step.state, touched | step.touched
            effects += step.effects
    batch = engine.report_many(state, events, 10, NO_RISK)
    assert dict(batch.state.instances) == dict(one_by_one.instances)
    assert batch.state.fleet == one_by_one.fleet
    assert list(batch.effects) == effects
    assert batch.touched == touched
    assert batch.wake_at == engine.next_wake(one_by_one)


def test_a_batch_places_freed_gpus_once_at_the_end() -> None:
    state = _running_world(8)  # both hosts full
    state = engine.launch(state, LaunchSpec("q", POOL, 1, CapacityClass.INTERRUPTIBLE), 1).state
    batch = engine.report_many(state, [("j0", WorkloadExited(0)), ("j2", WorkloadExited(0))], 5)
    assert batch.state.instances["q"].status is _I.STARTING
    assert {"j0", "j2", "q"} <= batch.touched.instances


def test_refused_touches_nothing_and_an_unchanged_state_keeps_its_maps() -> None:
    state = _running_world(2)
    step = engine.refused(state, POOL, 4, 0, CONFIG)
    assert not step.touched
    assert step.state.instances is state.instances and step.state.index.instances is state.instances
    idle = engine.tick(step.state, 1, CONFIG)
    assert idle.state.instances is state.instances and not idle.touched

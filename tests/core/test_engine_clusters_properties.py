"""A random world of clusters and instances on one fleet, driven through the engine.

Target changes, on-demand and interruptible arrivals, exits, node drains and time; the invariants
are checked after every step.
"""

from __future__ import annotations

from itertools import combinations

from fleet_builders import POOL, host
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from lowcostgpu.core import cluster_engine, engine
from lowcostgpu.core.clusters import ClusterSpec
from lowcostgpu.core.drain import WorkloadExited
from lowcostgpu.core.engine import EngineState, EngineStep, LaunchSpec
from lowcostgpu.core.nodes import allocated_preemptible_gpus
from lowcostgpu.core.scheduler import SchedulerConfig
from lowcostgpu.core.snapshot import FleetSnapshot
from lowcostgpu.domain.capacity import CapacityClass
from lowcostgpu.domain.errors import InsufficientCapacity
from lowcostgpu.domain.status import INSTANCE_HOLDS_GPUS, InstanceStatus, NodeStatus

_N = NodeStatus
_I = InstanceStatus
NODE_GPUS = 2
CLUSTERS = ("ca", "cb")


class ClusterWorld(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.config = SchedulerConfig(min_runtime_s=30, head_reservation_after_s=100)
        hosts = [host("h0", 4), host("h1", 4), host("h2", 2)]
        self.state = EngineState(FleetSnapshot.build(hosts))
        self.now = 0
        self.count = 0
        self.removed: set[str] = set()
        for cid in CLUSTERS:
            spec = ClusterSpec(POOL, NODE_GPUS, 1, 2 * NODE_GPUS, grace_period_s=40)
            self._apply(cluster_engine.create_cluster(self.state, cid, spec, 0, self.config))

    def _apply(self, step: EngineStep) -> None:
        self.removed |= {n.id for n in step.state.nodes.values() if n.status is _N.REMOVED}
        self.state = step.state

    # Inputs ----------------------------------------------------------------------------------

    # Up to what the pool could ever hold beside the cluster's standard node (5 slots of 2 GPUs,
    # less 1): more is refused (`cluster_engine.check_sizes`). Two clusters still contend.
    @rule(cluster=st.sampled_from(CLUSTERS), nodes=st.integers(0, 4))
    def target_changes(self, cluster: str, nodes: int) -> None:
        step = cluster_engine.update_cluster_target(
            self.state, cluster, nodes * NODE_GPUS, self.now, self.config
        )
        self._apply(step)

    @rule(gpus=st.integers(1, 4), on_demand=st.booleans())
    def launch(self, gpus: int, on_demand: bool) -> None:
        self.count += 1
        cls = CapacityClass.ON_DEMAND if on_demand else CapacityClass.INTERRUPTIBLE
        spec = LaunchSpec(f"x{self.count}", POOL, gpus, cls, grace_period_s=30)
        try:
            self._apply(engine.launch(self.state, spec, self.now, self.config))
        except InsufficientCapacity:
            assert on_demand

    def _instances(self, *statuses: InstanceStatus) -> list[str]:
        return sorted(i.id for i in self.state.instances.values() if i.status in statuses)

    @precondition(lambda self: self._instances(_I.STARTING, _I.RUNNING, _I.INTERRUPTING))
    @rule(data=st.data())
    def instance_exits(self, data: st.DataObject) -> None:
        held = self._instances(_I.STARTING, _I.RUNNING, _I.INTERRUPTING)
        subject = data.draw(st.sampled_from(held))
        if not self.state.instances[subject].launched:
            return
        step = engine.report(self.state, subject, WorkloadExited(0), self.now, self.config)
        self._apply(step)

    @precondition(lambda self: any(n.status is _N.CORDONED for n in self.state.nodes.values()))
    @rule(data=st.data())
    def node_pods_leave(self, data: st.DataObject) -> None:
        cordoned = sorted(n.id for n in self.state.nodes.values() if n.status is _N.CORDONED)
        node_id = data.draw(st.sampled_from(cordoned))
        self._apply(cluster_engine.node_exited(self.state, node_id, self.now, self.config))

    @rule(dt=st.integers(1, 60))
    def time_passes(self, dt: int) -> None:
        self.now += dt
        self._apply(engine.tick(self.state, self.now, self.config))

    # Invariants ------------------------------------------------------------------------------

    @invariant()
    def no_gpu_index_is_held_twice(self) -> None:
        for hs in self.state.fleet.hosts.values():
            for a, b in combinations(hs.allocations, 2):
                if a.gpu_indices & b.gpu_indices:
                    assert a.id in b.waits_for or b.id in a.waits_for

    @invariant()
    def standard_nodes_are_never_preempted(self) -> None:
        for n in self.state.nodes.values():
            if not n.preemptible:
                assert n.drain_reason != "preempted"
                assert n.status in (_N.READY, _N.PENDING), "standard nodes stay until delete"

    @invariant()
    def allocated_never_exceeds_the_target_once_drains_are_over(self) -> None:
        for cid, cluster in self.state.clusters.items():
            mine = [n for n in self.state.nodes.values() if n.cluster_id == cid]
            if not any(n.status is _N.CORDONED for n in mine):
                assert allocated_preemptible_gpus(mine) <= cluster.desired_preemptible_gpus

    @invariant()
    def fleet_and_subjects_agree(self) -> None:
        held = {a.subject_id: a.id for a in self.state.fleet.allocations()}
        queued = {t.subject_id for t in self.state.fleet.tickets()}
        for i in self.state.instances.values():
            assert held.get(i.id) == (i.allocation_id if i.status in INSTANCE_HOLDS_GPUS else None)
            assert (i.id in queued) == (i.status is _I.QUEUED)
        for n in self.state.nodes.values():
            assert held.get(n.id) == n.allocation_id
            assert (n.id in queued) == n.queued
        assert not self.removed & (set(held) | queued), "a removed node holds nothing"

    @invariant()
    def the_fleet_can_be_rebuilt_from_stored_records(self) -> None:
        hosts = [hs.host for hs in self.state.fleet.hosts.values()]
        rebuilt = engine.state_from_instances(
            hosts,
            self.state.instances.values(),
            clusters=self.state.clusters.values(),
            nodes=self.state.nodes.values(),
        )
        assert sorted(rebuilt.fleet.allocations(), key=lambda a: a.id) == sorted(
            self.state.fleet.allocations(), key=lambda a: a.id
        )
        assert list(rebuilt.fleet.tickets()) == list(self.state.fleet.tickets())


TestClusterWorld = ClusterWorld.TestCase
TestClusterWorld.settings = settings(max_examples=100, stateful_step_count=40, deadline=None)

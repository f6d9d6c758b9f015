"""One input's worth of changes to the engine state: drafts of its maps and the effects so far.

`Work` is the engine's scratch space (`core.engine` explains what the steps decide). It never
copies a map: each is a `Draft` over the state's persistent map (`core.overlay`), so an input
costs what it reads and writes, and `done()` folds the changes into the next state in
O(changes · log n). Every write of an instance or a node, whoever makes it (`Work` itself,
`core.cluster_engine`), goes through the draft's watch (`core.index_drafts`), which keeps the
state's indexes (`engine_state.StateIndex`) in line; the ids written are the
step's `touched`, reported only where the value really changed.
"""

from __future__ import annotations

from immutables import Map

from lowcostgpu.core import cluster_reconcile, lifecycle, node_lifecycle
from lowcostgpu.core.clusters import ClusterPlan, ClusterState
from lowcostgpu.core.effects import Effect, ReleaseAllocation
from lowcostgpu.core.engine_state import (
    EngineState,
    EngineStep,
    Touched,
    next_wake,
)
from lowcostgpu.core.fleet_sync import follow_instance, follow_node
from lowcostgpu.core.holds import OnDemandHold, active
from lowcostgpu.core.index_drafts import IndexDrafts
from lowcostgpu.core.instance_state import InstanceState
from lowcostgpu.core.lifecycle import LifecycleEvent
from lowcostgpu.core.node_lifecycle import NodeEvent
from lowcostgpu.core.nodes import NodeState
from lowcostgpu.core.overlay import Draft
from lowcostgpu.core.queue import schedule_pool
from lowcostgpu.core.scheduler import SchedulerConfig
from lowcostgpu.core.snapshot import (
    FleetSnapshot,
    allocation_id_for,
    apply_plan,
    dequeue,
    enqueue,
    member_allocation_id,
    release,
)
from lowcostgpu.core.state import Plan, SurvivorHold
from lowcostgpu.domain.capacity import PoolKey, Timestamp
from lowcostgpu.domain.errors import NotFound


class Work:
    """One input's worth of changes: drafts over the state's maps and the effects so far."""

    def __init__(self, state: EngineState) -> None:
        self.base = state
        self.fleet = state.fleet
        # The drafts' watches are the index drafts' methods, never this object's: no cycle
        # (`core.index_drafts`), so a finished work is freed at once.
        self.indexes = IndexDrafts(state.index)
        self.instances: Draft[str, InstanceState] = Draft(
            state.instances, self.indexes.instance_written
        )
        self.clusters: Draft[str, ClusterState] = Draft(state.clusters)
        self.nodes: Draft[str, NodeState] = Draft(state.nodes, self.indexes.node_written)
        self.holds: dict[PoolKey, OnDemandHold] = dict(state.holds)  # one per pool at most
        self.effects: list[Effect] = []

    def nodes_of(self, cluster_id: str) -> list[NodeState]:
        """The cluster's nodes (removed ones included), by id: O(its nodes), from the index."""
        members = self.indexes.cluster_nodes.get(cluster_id, ())
        return [self.nodes[n] for n in sorted(members)]

    def done(self) -> EngineStep:
        """The next state from the drafts, O(changes · log n), and what the step touched."""
        instances, nodes_ = self.instances.finish(), self.nodes.finish()
        index = self.indexes.finish(instances, nodes_)
        before = self.base.holds
        same = len(before) == len(self.holds) and all(
            self.holds.get(pool) is hold for pool, hold in before.items()
        )
        holds = before if same else Map(self.holds)
        state = EngineState(
            self.fleet, instances, self.clusters.finish(), nodes_, holds, index, self.base.risk
        )
        touched = Touched(self.instances.changed(), self.nodes.changed(), self.clusters.changed())
        return EngineStep(state, tuple(self.effects), next_wake(state), touched)

    def advance(self, instance_id: str, event: LifecycleEvent, now: Timestamp) -> None:
        """Step one instance and keep the fleet in line with what its step decided."""
        old = self.instances[instance_id]
        result = lifecycle.step(old, event, now)
        new = result.state
        if new is not old:
            self.instances[instance_id] = new
        self.effects.extend(result.effects)
        self.fleet = follow_instance(self.fleet, old, new)
        for effect in result.effects:
            if isinstance(effect, ReleaseAllocation):
                self._release(effect.allocation_id, old.host_of(effect.allocation_id), now)

    def advance_node(self, node_id: str, event: NodeEvent, now: Timestamp) -> None:
        """Step one node and keep the fleet in line: its ticket, its allocation, its release."""
        old = self.nodes[node_id]
        result = node_lifecycle.node_step(old, event, now)
        self._node_stepped(old, result.state, result.effects, now)

    def _node_stepped(
        self, old: NodeState, new: NodeState, effects: tuple[Effect, ...], now: Timestamp
    ) -> None:
        if new is not old:
            self.nodes[new.id] = new
        self.effects.extend(effects)
        self.fleet = follow_node(self.fleet, old, new)
        for effect in effects:
            if isinstance(effect, ReleaseAllocation):
                self._release(effect.allocation_id, old.host_id, now)

    def _release(self, allocation_id: str, host_id: str | None, now: Timestamp) -> None:
        """Free the allocation's GPUs and start whoever waited for exactly those GPUs."""
        try:
            alloc = self.fleet.allocation(allocation_id, host_id)
        except NotFound:
            return  # released already (a replayed report)
        waiting = [
            a.subject_id
            for a in self.fleet.hosts[alloc.host_id].allocations
            if allocation_id in a.waits_for
        ]
        self.fleet = release(self.fleet, allocation_id, alloc.host_id)
        for subject in waiting:
            if subject in self.instances:
                self.advance(subject, lifecycle.VictimReleased(allocation_id), now)
            elif subject in self.nodes:
                self.advance_node(subject, lifecycle.VictimReleased(allocation_id), now)

    def carry_out(self, plan: Plan, now: Timestamp) -> None:
        """Apply a scheduler plan to the fleet and to every instance it names."""
        allocation_ids = {
            p.subject_id: self._allocation_id(p.subject_id, now) for p in plan.placements
        }
        self.fleet = apply_plan(self.fleet, plan, now, allocation_ids)
        for pre in plan.preemptions:
            reclaimed = lifecycle.Reclaimed(
                pre.for_subject,
                pre.lost_gpu_s,
                pre.reason,
                pre.for_account_id,
                pre.policy,
                pre.allocation_id,
            )
            if pre.subject_id in self.instances:
                self.advance(pre.subject_id, reclaimed, now)
            elif pre.subject_id in self.nodes:
                self.advance_node(pre.subject_id, reclaimed, now)
        for placement in plan.placements:
            allocation_id = allocation_ids[placement.subject_id]
            members = tuple(
                (member_allocation_id(allocation_id, rank), host_id, tuple(sorted(indices)))
                for rank, (host_id, indices) in enumerate(placement.members, start=1)
            )
            placed = lifecycle.Placed(
                allocation_id,
                placement.host_id,
                placement.gpu_indices,
                placement.waits_for,
                members,
            )
            if placement.subject_id in self.instances:
                self.advance(placement.subject_id, placed, now)
            elif placement.subject_id in self.nodes:
                self.advance_node(placement.subject_id, placed, now)

    def _allocation_id(self, subject_id: str, now: Timestamp) -> str:
        inst = self.instances.get(subject_id)
        return allocation_id_for(subject_id, now, inst.placement_count if inst else 0)

    def schedule(self, now: Timestamp, config: SchedulerConfig) -> None:
        """A queue pass; with clusters, between a reconcile and a second one that reports."""
        if self.clusters:
            self.reconcile(now)
        self.holds = active(self.holds, now)
        plan = _queue_pass(
            self.fleet, now, config, self.holds, self.indexes.live_survivor_holds(now)
        )
        if plan:  # an empty plan changes nothing
            self.carry_out(plan, now)
        if self.clusters:
            self.reconcile(now)

    def reconcile(self, now: Timestamp) -> None:
        """Every cluster toward its target. O(clusters + their nodes): the reconcile of a
        cluster reads all its nodes, removed ones included (they are owed replacements)."""
        for cluster_id in sorted(self.clusters):
            cluster = self.clusters[cluster_id]
            mine = self.nodes_of(cluster_id)
            self.apply_cluster_plan(cluster_reconcile.reconcile_cluster(cluster, mine, now), now)

    def apply_cluster_plan(self, plan: ClusterPlan, now: Timestamp) -> None:
        """New nodes join the queue, pending ones leave it, ready ones are drained."""
        self.clusters[plan.cluster.id] = plan.cluster
        for node in plan.new_nodes:
            self.nodes[node.id] = node
        for ticket in plan.tickets:
            self.fleet = enqueue(self.fleet, ticket)
        held: dict[str, str | None] = {}
        for gone in plan.removed:
            old = self.nodes[gone.id]
            self.nodes[gone.id] = gone
            if old.queued:
                self.fleet = dequeue(self.fleet, gone.pool, {gone.id})
            if old.allocation_id is not None:
                held[old.allocation_id] = old.host_id
        self.effects.extend(plan.effects)
        for effect in plan.effects:
            if isinstance(effect, ReleaseAllocation):
                self._release(effect.allocation_id, held.get(effect.allocation_id), now)
        for drain in plan.drains:
            self.advance_node(drain.node_id, node_lifecycle.Leave(drain.reason), now)


def _queue_pass(
    fleet: FleetSnapshot,
    now: Timestamp,
    config: SchedulerConfig,
    holds: dict[PoolKey, OnDemandHold],
    survivors: dict[PoolKey, dict[str, SurvivorHold]],
) -> Plan:
    """`queue.schedule_queue`, less the pools whose queue is empty (they have nothing to place,
    and looking at their free hosts on every call is most of a large fleet's cost)."""
    plan = Plan()
    for pool in sorted(p for p, queue in fleet.queues.items() if queue):
        plan = plan.merged(
            schedule_pool(fleet, pool, now, config, holds.get(pool), survivors.get(pool, {}))
        )
    return plan

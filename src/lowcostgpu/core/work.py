"""One input's worth of changes to the engine state: drafts of its maps and the effects so far.

`Work` is the engine's scratch space (`core.engine` explains what the steps decide). It never
copies a map: each is a `Draft` over the state's persistent map (`core.overlay`), so an input
costs what it reads and writes, and `done()` folds the changes into the next state in
O(changes · log n). Every write of an instance or a node, whoever makes it (`Work` itself,
`core.cluster_engine`), goes through the draft's watch (`_instance_written`, `_node_written`),
which keeps the state's indexes (`engine_state.StateIndex`) in line; the ids written are the
step's `touched`, reported only where the value really changed.
"""

from __future__ import annotations

from itertools import takewhile

from immutables import Map

from lowcostgpu.core import cluster_reconcile, lifecycle, node_lifecycle
from lowcostgpu.core.clusters import ClusterPlan, ClusterState
from lowcostgpu.core.effects import Effect, ReleaseAllocation
from lowcostgpu.core.engine_state import (
    EngineState,
    EngineStep,
    StateIndex,
    Touched,
    instance_deadline,
    next_wake,
    node_deadline,
    survivor_hold,
)
from lowcostgpu.core.fleet_sync import follow_instance, follow_node
from lowcostgpu.core.holds import OnDemandHold, active
from lowcostgpu.core.instance_state import InstanceState
from lowcostgpu.core.lifecycle import LifecycleEvent
from lowcostgpu.core.node_lifecycle import NodeEvent
from lowcostgpu.core.nodes import NodeState
from lowcostgpu.core.overlay import Draft, K, V
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
from lowcostgpu.core.sorted_chunks import SortedChunks
from lowcostgpu.core.state import Plan, SurvivorHold
from lowcostgpu.domain.capacity import PoolKey, Timestamp
from lowcostgpu.domain.errors import NotFound


class Work:
    """One input's worth of changes: drafts over the state's maps and the effects so far."""

    def __init__(self, state: EngineState) -> None:
        self.base = state
        self.fleet = state.fleet
        self._index = state.index
        # The index drafts are made on first use: most inputs touch no deadline and no cluster.
        self._instance_deadlines: Draft[str, Timestamp] | None = None
        self._node_deadlines: Draft[str, Timestamp] | None = None
        self._cluster_nodes: Draft[str, frozenset[str]] | None = None
        self._deadline_order: SortedChunks[tuple[Timestamp, str]] | None = None
        self._survivor_holds: Draft[str, SurvivorHold] | None = None
        self.instances: Draft[str, InstanceState] = Draft(state.instances, self._instance_written)
        self.clusters: Draft[str, ClusterState] = Draft(state.clusters)
        self.nodes: Draft[str, NodeState] = Draft(state.nodes, self._node_written)
        self.holds: dict[PoolKey, OnDemandHold] = dict(state.holds)  # one per pool at most
        self.effects: list[Effect] = []

    @property
    def instance_deadlines(self) -> Draft[str, Timestamp]:
        if self._instance_deadlines is None:
            self._instance_deadlines = Draft(self._index.instance_deadlines)
        return self._instance_deadlines

    @property
    def node_deadlines(self) -> Draft[str, Timestamp]:
        if self._node_deadlines is None:
            self._node_deadlines = Draft(self._index.node_deadlines)
        return self._node_deadlines

    @property
    def cluster_nodes(self) -> Draft[str, frozenset[str]]:
        if self._cluster_nodes is None:
            self._cluster_nodes = Draft(self._index.cluster_nodes)
        return self._cluster_nodes

    def instances_due(self, now: Timestamp) -> list[str]:
        """The instances whose grace deadline has come, by id: the front of the (deadline, id)
        order as this work has it. Cost: O(due · log due), not O(draining)."""
        order = self._deadline_order
        if order is None:
            order = self._index.instance_deadline_order
        return sorted(i for _, i in takewhile(lambda entry: entry[0] <= now, order))

    @property
    def survivor_holds(self) -> Draft[str, SurvivorHold]:
        if self._survivor_holds is None:
            self._survivor_holds = Draft(self._index.survivor_holds)
        return self._survivor_holds

    def _instance_written(self, instance_id: str, inst: InstanceState | None) -> None:
        hold = None if inst is None else survivor_hold(inst)
        holds = self._survivor_holds
        known = instance_id in (self._index.survivor_holds if holds is None else holds)
        if hold is not None or known:  # most writes: neither, and no draft is made
            if hold is None:
                del self.survivor_holds[instance_id]
            elif self.survivor_holds.get(instance_id) != hold:
                self.survivor_holds[instance_id] = hold
        deadline = None if inst is None else instance_deadline(inst)
        drafted = self._instance_deadlines
        if (
            deadline is None
            and drafted is None
            and instance_id not in self._index.instance_deadlines
        ):
            return  # no deadline before or after: nothing to draft
        old = self.instance_deadlines.get(instance_id)
        if old != deadline:  # the sorted copy follows the map
            order = self._deadline_order
            if order is None:
                order = self._index.instance_deadline_order
            if old is not None:
                order = order.removed((old, instance_id))
            if deadline is not None:
                order = order.inserted((deadline, instance_id))
            self._deadline_order = order
        _keep(self.instance_deadlines, instance_id, deadline)

    def _node_written(self, node_id: str, node: NodeState | None) -> None:
        deadline = None if node is None else node_deadline(node)
        if (
            deadline is not None
            or self._node_deadlines is not None
            or (node_id in self._index.node_deadlines)
        ):
            _keep(self.node_deadlines, node_id, deadline)
        if node is not None:
            ids = self.cluster_nodes.get(node.cluster_id, frozenset())
            if node_id not in ids:  # a node never changes cluster: only new ones are added
                self.cluster_nodes[node.cluster_id] = ids | {node_id}

    def nodes_of(self, cluster_id: str) -> list[NodeState]:
        """The cluster's nodes (removed ones included), by id: O(its nodes), from the index."""
        return [self.nodes[n] for n in sorted(self.cluster_nodes.get(cluster_id, ()))]

    def done(self) -> EngineStep:
        """The next state from the drafts, O(changes · log n), and what the step touched."""
        instances, nodes_, index = self.instances.finish(), self.nodes.finish(), self._index
        index = StateIndex(
            instances,
            nodes_,
            _finished(self._instance_deadlines, index.instance_deadlines),
            _finished(self._node_deadlines, index.node_deadlines),
            _finished(self._cluster_nodes, index.cluster_nodes),
            index.instance_deadline_order if self._deadline_order is None else self._deadline_order,
            _finished(self._survivor_holds, index.survivor_holds),
        )
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
        plan = _queue_pass(self.fleet, now, config, self.holds, self._live_survivor_holds(now))
        if plan:  # an empty plan changes nothing
            self.carry_out(plan, now)
        if self.clusters:
            self.reconcile(now)

    def _live_survivor_holds(self, now: Timestamp) -> dict[PoolKey, dict[str, SurvivorHold]]:
        """The survivor holds in force, by pool: O(holds), few."""
        drafted = self._survivor_holds
        source = drafted if drafted is not None else self._index.survivor_holds
        by_pool: dict[PoolKey, dict[str, SurvivorHold]] = {}
        for instance_id, hold in source.items():
            if hold.until > now:
                by_pool.setdefault(hold.pool, {})[instance_id] = hold
        return by_pool

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


def _finished(draft: Draft[K, V] | None, base: Map[K, V]) -> Map[K, V]:
    return base if draft is None else draft.finish()


def _keep(index: Draft[str, Timestamp], key: str, value: Timestamp | None) -> None:
    """Set or clear one index entry, writing only when it changes."""
    if value is None:
        if key in index:
            del index[key]
    elif index.get(key) != value:
        index[key] = value


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

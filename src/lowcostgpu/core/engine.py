"""The engine: instances and the fleet, moved together by one pure function per input.

The scheduler decides placements and reclaims on the fleet snapshot; the lifecycle moves each
instance through its statuses. The engine keeps the two consistent — a placement becomes an
allocation *and* a `Placed` instance, a reclaim marks the victim's allocation draining *and* sends
it `Reclaimed`, an exit releases the allocation *and* wakes the on-demand request that waited for
it, a requeue puts the ticket back at its original place — so that the app layer (which adds the
store and the outbox) and the simulator (which adds a virtual clock) run the very same decisions.

Cluster nodes are subjects like instances (`core.nodes`): a preemptible node is a ticket in the
same pool queue and then an allocation the scheduler may reclaim, a standard node an on-demand
placement. When clusters exist, every input ends with `Work.schedule`: reconcile the clusters
toward their targets (a reclaimed node is replaced at T+0), a queue pass, and a second reconcile
that reports TargetMet/TargetUnmet on what the pass placed. Cluster requests are in
`core.cluster_engine`. How an instance or a node shows in the fleet (its ticket, its allocation)
is `core.fleet_sync`, shared by the rebuild and by `Work`.

Every function returns an `EngineStep`: the new state, the effects in the order they must be
carried out, and the earliest time the shell must call `tick` again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from lowcostgpu.core import cluster_reconcile, lifecycle, nodes
from lowcostgpu.core.clusters import ClusterPlan, ClusterState
from lowcostgpu.core.drain import DEFAULT_GRACE_PERIOD_S
from lowcostgpu.core.effects import Effect, ReleaseAllocation
from lowcostgpu.core.fleet_sync import fleet_of, follow_instance, follow_node
from lowcostgpu.core.holds import OnDemandHold, active, with_refusal
from lowcostgpu.core.instance_state import DRAINING
from lowcostgpu.core.lifecycle import InstanceState, LifecycleEvent
from lowcostgpu.core.nodes import NodeEvent, NodeState
from lowcostgpu.core.queue import schedule_pool
from lowcostgpu.core.scheduler import DEFAULT_CONFIG, SchedulerConfig, place_on_demand
from lowcostgpu.core.snapshot import (
    FleetSnapshot,
    allocation_id_for,
    apply_plan,
    dequeue,
    enqueue,
    release,
)
from lowcostgpu.core.state import Plan, Request, Ticket
from lowcostgpu.domain.capacity import CapacityClass, Host, PoolKey, Timestamp
from lowcostgpu.domain.errors import Conflict, NotFound
from lowcostgpu.domain.status import ClusterStatus, NodeStatus

_N = NodeStatus


@dataclass(frozen=True, slots=True)
class LaunchSpec:
    instance_id: str
    pool: PoolKey
    gpus: int
    capacity_class: CapacityClass
    account_id: str = ""
    auto_requeue: bool = True
    grace_period_s: int = DEFAULT_GRACE_PERIOD_S


@dataclass(frozen=True, slots=True)
class EngineState:
    """The fleet and what holds or waits for it. `nodes` and `clusters` keep removed nodes and
    deleted clusters (so the shell writes them); `state_from_instances` leaves them out, and a
    long-running pure driver may drop them with `forget_history`."""

    fleet: FleetSnapshot
    instances: Mapping[str, InstanceState] = field(default_factory=dict)
    clusters: Mapping[str, ClusterState] = field(default_factory=dict)
    nodes: Mapping[str, NodeState] = field(default_factory=dict)
    # On-demand holds (`core.holds`): soft, so not stored; the shell keeps them between calls.
    holds: Mapping[PoolKey, OnDemandHold] = field(default_factory=dict)

    def instance(self, instance_id: str) -> InstanceState:
        try:
            return self.instances[instance_id]
        except KeyError:
            raise NotFound(f"no instance {instance_id}") from None

    def cluster(self, cluster_id: str) -> ClusterState:
        found = self.clusters.get(cluster_id)
        if found is None or found.status is ClusterStatus.DELETED:
            raise NotFound(f"no cluster {cluster_id}", hint="list clusters to see their ids")
        return found

    def node(self, node_id: str) -> NodeState:
        try:
            return self.nodes[node_id]
        except KeyError:
            raise NotFound(f"no node {node_id}") from None


@dataclass(frozen=True, slots=True)
class EngineStep:
    state: EngineState
    effects: tuple[Effect, ...] = ()
    wake_at: Timestamp | None = None


class Work:
    """One input's worth of changes: a scratch copy of the state and the effects so far."""

    def __init__(self, state: EngineState) -> None:
        self.fleet = state.fleet
        self.instances = dict(state.instances)
        self.clusters = dict(state.clusters)
        self.nodes = dict(state.nodes)
        self.holds = dict(state.holds)
        self.effects: list[Effect] = []

    def done(self) -> EngineStep:
        state = EngineState(
            self.fleet,
            MappingProxyType(self.instances),
            MappingProxyType(self.clusters),
            MappingProxyType(self.nodes),
            MappingProxyType(self.holds),
        )
        return EngineStep(state, tuple(self.effects), next_wake(state))

    def advance(self, instance_id: str, event: LifecycleEvent, now: Timestamp) -> None:
        """Step one instance and keep the fleet in line with what its step decided."""
        old = self.instances[instance_id]
        result = lifecycle.step(old, event, now)
        new = self.instances[instance_id] = result.state
        self.effects.extend(result.effects)
        self.fleet = follow_instance(self.fleet, old, new)
        for effect in result.effects:
            if isinstance(effect, ReleaseAllocation):
                self._release(effect.allocation_id, old.host_id, now)

    def advance_node(self, node_id: str, event: NodeEvent, now: Timestamp) -> None:
        """Step one node and keep the fleet in line: its ticket, its allocation, its release."""
        old = self.nodes[node_id]
        result = nodes.node_step(old, event, now)
        self._node_stepped(old, result.state, result.effects, now)

    def _node_stepped(
        self, old: NodeState, new: NodeState, effects: tuple[Effect, ...], now: Timestamp
    ) -> None:
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
            reclaimed = lifecycle.Reclaimed(pre.for_subject, pre.lost_gpu_s, pre.reason)
            if pre.subject_id in self.instances:
                self.advance(pre.subject_id, reclaimed, now)
            elif pre.subject_id in self.nodes:
                self.advance_node(pre.subject_id, reclaimed, now)
        for placement in plan.placements:
            allocation_id = allocation_ids[placement.subject_id]
            placed = lifecycle.Placed(
                allocation_id, placement.host_id, placement.gpu_indices, placement.waits_for
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
        self.carry_out(_queue_pass(self.fleet, now, config, self.holds), now)
        if self.clusters:
            self.reconcile(now)

    def reconcile(self, now: Timestamp) -> None:
        for cluster_id in sorted(self.clusters):
            cluster = self.clusters[cluster_id]
            mine = [n for n in self.nodes.values() if n.cluster_id == cluster_id]
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
            self.advance_node(drain.node_id, nodes.Leave(drain.reason), now)


def state_from_instances(
    hosts: Iterable[Host],
    instances: Iterable[InstanceState],
    *,
    clusters: Iterable[ClusterState] = (),
    nodes: Iterable[NodeState] = (),
) -> EngineState:
    """Rebuild the engine state from stored instances, clusters and nodes: the fleet snapshot is
    derived, not stored.

    Allocations and tickets come from `fleet_sync.fleet_of`. Removed nodes and deleted clusters
    are history: left out.
    """
    by_id = {i.id: i for i in instances}
    live_nodes = {n.id: n for n in nodes if n.status is not _N.REMOVED}
    fleet = fleet_of(hosts, by_id.values(), live_nodes.values())
    live_clusters = {c.id: c for c in clusters if c.status is not ClusterStatus.DELETED}
    return EngineState(
        fleet,
        MappingProxyType(by_id),
        MappingProxyType(live_clusters),
        MappingProxyType(live_nodes),
    )


def forget_history(state: EngineState) -> EngineState:
    """The state without removed nodes and deleted clusters: they hold and owe nothing."""
    return replace(
        state,
        clusters=MappingProxyType(
            {k: c for k, c in state.clusters.items() if c.status is not ClusterStatus.DELETED}
        ),
        nodes=MappingProxyType(
            {k: n for k, n in state.nodes.items() if n.status is not _N.REMOVED}
        ),
    )


def _queue_pass(
    fleet: FleetSnapshot,
    now: Timestamp,
    config: SchedulerConfig,
    holds: Mapping[PoolKey, OnDemandHold],
) -> Plan:
    """`queue.schedule_queue`, less the pools whose queue is empty (they have nothing to place,
    and looking at their free hosts on every call is most of a large fleet's cost)."""
    plan = Plan()
    for pool in sorted(p for p, queue in fleet.queues.items() if queue):
        plan = plan.merged(schedule_pool(fleet, pool, now, config, holds.get(pool)))
    return plan


def launch(
    state: EngineState,
    spec: LaunchSpec,
    now: Timestamp,
    config: SchedulerConfig = DEFAULT_CONFIG,
) -> EngineStep:
    """Launch an instance: on-demand is placed now (or refused), interruptible is queued."""
    if spec.instance_id in state.instances:
        raise Conflict(f"instance {spec.instance_id} already exists")
    inst = InstanceState(
        id=spec.instance_id,
        account_id=spec.account_id,
        pool=spec.pool,
        gpus=spec.gpus,
        capacity_class=spec.capacity_class,
        auto_requeue=spec.auto_requeue,
        grace_period_s=spec.grace_period_s,
    )
    work = Work(state)
    if spec.capacity_class is CapacityClass.ON_DEMAND:
        request = Request(spec.instance_id, spec.pool, spec.gpus, spec.account_id)
        plan = place_on_demand(state.fleet, request, now, config)  # raises when impossible
        first = lifecycle.new_instance(inst, now)
        work.instances[inst.id] = first.state
        work.effects.extend(first.effects)
        work.carry_out(plan, now)
        # The customer the pool was held for has GPUs now: what the hold kept from the queue
        # goes back to it at once.
        held = work.holds.pop(spec.pool, None) is not None
        if work.clusters or held:
            work.schedule(now, config)
        return work.done()
    work.fleet = enqueue(work.fleet, Ticket(inst.id, inst.pool, inst.gpus, now, inst.account_id))
    first = lifecycle.new_instance(inst, now)
    work.instances[inst.id] = first.state
    work.effects.extend(first.effects)
    work.schedule(now, config)
    return work.done()


def report(
    state: EngineState,
    instance_id: str,
    event: LifecycleEvent,
    now: Timestamp,
    config: SchedulerConfig = DEFAULT_CONFIG,
) -> EngineStep:
    """A report from the runtime or a request from the user, then a queue pass: an exit or a
    stop may have freed GPUs, a resume may have queued a ticket that fits at once."""
    state.instance(instance_id)
    work = Work(state)
    work.advance(instance_id, event, now)
    work.schedule(now, config)
    return work.done()


def tick(
    state: EngineState, now: Timestamp, config: SchedulerConfig = DEFAULT_CONFIG
) -> EngineStep:
    """Deadlines that are due (SIGKILL at the end of grace), then a queue pass."""
    work = Work(state)
    for inst in sorted(state.instances.values(), key=lambda i: i.id):
        if inst.deadline is not None and inst.deadline <= now:
            work.advance(inst.id, lifecycle.DeadlineCheck(), now)
    for node in sorted(work.nodes.values(), key=lambda n: n.id):
        if node.status is _N.CORDONED and node.deadline is not None and node.deadline <= now:
            work.advance_node(node.id, lifecycle.DeadlineCheck(), now)
    work.schedule(now, config)
    return work.done()


def refused(
    state: EngineState,
    pool: PoolKey,
    gpus: int,
    now: Timestamp,
    config: SchedulerConfig = DEFAULT_CONFIG,
) -> EngineStep:
    """An on-demand request for `gpus` in `pool` was refused (`launch` raised
    InsufficientCapacity): hold the pool for the customer's retry (`core.holds`)."""
    holds = with_refusal(state.holds, pool, gpus, now, config.on_demand_hold_s)
    new = replace(state, holds=MappingProxyType(holds))
    return EngineStep(new, (), next_wake(new))


def next_wake(state: EngineState) -> Timestamp | None:
    """The earliest grace deadline still open, or the end of a hold (its GPUs go back to the
    queue then): when `tick` must run at the latest."""
    deadlines = [
        i.deadline
        for i in state.instances.values()
        if i.deadline is not None and i.status in DRAINING
    ]
    deadlines += [
        n.deadline
        for n in state.nodes.values()
        if n.deadline is not None and n.status is _N.CORDONED
    ]
    deadlines += [hold.until for hold in state.holds.values()]
    return min(deadlines, default=None)

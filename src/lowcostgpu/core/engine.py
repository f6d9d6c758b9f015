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

The server keeps one state in memory across decisions, so each function costs O(what it
touches), not O(live instances): `Work` (`core.work`) drafts over the state's persistent maps,
`tick` and `next_wake` read the deadline index (`core.engine_state`), and every step says which
ids it changed (`EngineStep.touched`) so that the shell writes only those. Finished instances
leave the state with `forget_instances` and come back with `adopt`.

Every function returns an `EngineStep`: the new state, the effects in the order they must be
carried out, and the earliest time the shell must call `tick` again.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

from immutables import Map

from lowcostgpu.core import lifecycle
from lowcostgpu.core.clusters import ClusterState
from lowcostgpu.core.drain import DEFAULT_GRACE_PERIOD_S
from lowcostgpu.core.engine_state import (
    NOTHING,
    EngineState,
    EngineStep,
    Touched,
    next_wake,
)
from lowcostgpu.core.fleet_sync import fleet_of
from lowcostgpu.core.holds import after_placement, with_refusal
from lowcostgpu.core.instance_state import LIVE
from lowcostgpu.core.lifecycle import InstanceState, LifecycleEvent
from lowcostgpu.core.nodes import NodeState
from lowcostgpu.core.overlay import as_map
from lowcostgpu.core.risk import assess, with_arrival
from lowcostgpu.core.scheduler import DEFAULT_CONFIG, SchedulerConfig, place_on_demand
from lowcostgpu.core.snapshot import enqueue
from lowcostgpu.core.state import Request, Ticket
from lowcostgpu.core.work import Work
from lowcostgpu.domain.capacity import CapacityClass, Host, PoolKey, Timestamp
from lowcostgpu.domain.errors import Conflict, InvalidRequest
from lowcostgpu.domain.status import ClusterStatus, NodeStatus

__all__ = [
    "NOTHING",
    "EngineState",
    "EngineStep",
    "LaunchSpec",
    "Touched",
    "Work",
    "adopt",
    "forget_history",
    "forget_instances",
    "launch",
    "next_wake",
    "refused",
    "report",
    "report_many",
    "signals_sent",
    "state_from_instances",
    "tick",
]

_N = NodeStatus
_V = TypeVar("_V")


@dataclass(frozen=True, slots=True)
class LaunchSpec:
    instance_id: str
    pool: PoolKey
    gpus: int
    capacity_class: CapacityClass
    account_id: str = ""
    auto_requeue: bool = True
    grace_period_s: int = DEFAULT_GRACE_PERIOD_S
    nodes: int = 1  # a multi-node instance: `nodes` hosts with `gpus` GPUs each (interruptible)
    hold_survivors_s: int = 0  # a reclaimed gang keeps its other hosts this long (0: off)


def state_from_instances(
    hosts: Iterable[Host],
    instances: Iterable[InstanceState],
    *,
    clusters: Iterable[ClusterState] = (),
    nodes: Iterable[NodeState] = (),
) -> EngineState:
    """Rebuild the engine state from stored instances, clusters and nodes: the fleet snapshot is
    derived, not stored, and so is the index (deadlines, the nodes of each cluster). O(n): the
    leader pays it once, when it gains the lead.

    Allocations and tickets come from `fleet_sync.fleet_of`. Removed nodes and deleted clusters
    are history: left out.
    """
    by_id = {i.id: i for i in instances}
    live_nodes = {n.id: n for n in nodes if n.status is not _N.REMOVED}
    fleet = fleet_of(hosts, by_id.values(), live_nodes.values())
    live_clusters = {c.id: c for c in clusters if c.status is not ClusterStatus.DELETED}
    return EngineState(fleet, Map(by_id), Map(live_clusters), Map(live_nodes))


def forget_history(state: EngineState) -> EngineState:
    """The state without removed nodes and deleted clusters: they hold and owe nothing.
    O(nodes + clusters): it looks at every one (the shell calls it only when some went)."""
    gone_nodes = [k for k, n in state.nodes.items() if n.status is _N.REMOVED]
    gone_clusters = [k for k, c in state.clusters.items() if c.status is ClusterStatus.DELETED]
    if not gone_nodes and not gone_clusters:
        return state
    nodes = _without(as_map(state.nodes), gone_nodes)
    by_cluster = state.index.cluster_nodes
    m = by_cluster.mutate()
    for node_id in gone_nodes:
        cluster_id = state.nodes[node_id].cluster_id
        left = m[cluster_id] - {node_id}
        if left:
            m[cluster_id] = left
        else:
            del m[cluster_id]
    by_cluster = m.finish()
    index = replace(state.index, nodes=nodes, cluster_nodes=by_cluster)  # removed: no deadline
    clusters = _without(as_map(state.clusters), gone_clusters)
    return replace(state, clusters=clusters, nodes=nodes, index=index)


def forget_instances(state: EngineState, instance_ids: Iterable[str]) -> EngineState:
    """The state without these instances, which must have left `LIVE` (stopped, succeeded,
    failed, deleted; a live one raises Conflict): such an instance holds no GPUs, no ticket and
    no open deadline, so it is only a map entry. Ids not in the state are skipped. O(k · log n).
    (INTERRUPTED counts as live: within a step it is on its way to QUEUED or STOPPED; one left
    INTERRUPTED, without auto-requeue, holds nothing either but stays, as the store loads it.)

    The leader calls it after committing a step, so that finished work leaves the live state
    and no decision costs more as history grows; `adopt` brings one back."""
    gone = [i for i in dict.fromkeys(instance_ids) if i in state.instances]
    live = [i for i in gone if state.instances[i].status in LIVE]
    if live:
        raise Conflict(f"instances still live cannot be forgotten: {', '.join(sorted(live))}")
    if not gone:
        return state
    instances = _without(as_map(state.instances), gone)
    return replace(state, instances=instances, index=replace(state.index, instances=instances))


def adopt(state: EngineState, instance: InstanceState) -> EngineState:
    """The state with one instance loaded from the store that is not live (a stopped one the
    user resumes, a finished one the user deletes): it holds no GPUs and no ticket, so it is
    only a map insert, O(log n). A live instance must come with the rebuild
    (`state_from_instances`), which derives its allocation or ticket."""
    if instance.id in state.instances:
        raise Conflict(f"instance {instance.id} already exists")
    if instance.status in LIVE:
        raise InvalidRequest(
            f"instance {instance.id} is {instance.status}: only an instance that is not live "
            "can be adopted (a live one is part of the rebuild)"
        )
    instances = as_map(state.instances).set(instance.id, instance)
    return replace(state, instances=instances, index=replace(state.index, instances=instances))


def _without(m: Map[str, _V], keys: Iterable[str]) -> Map[str, _V]:
    draft = m.mutate()
    for key in keys:
        draft.pop(key, None)
    return draft.finish()


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
        nodes=spec.nodes,
        hold_survivors_s=spec.hold_survivors_s,
    )
    work = Work(state)
    if spec.capacity_class is CapacityClass.ON_DEMAND:
        if spec.nodes > 1:
            raise InvalidRequest(
                f"on-demand instances run on one host: {spec.nodes} nodes were asked",
                hint="launch multi-node work as --type interruptible, or one host per instance",
            )
        request = Request(spec.instance_id, spec.pool, spec.gpus, spec.account_id)
        plan = place_on_demand(state.fleet, request, now, config)  # raises when impossible
        first = lifecycle.new_instance(inst, now)
        work.instances[inst.id] = first.state
        work.effects.extend(first.effects)
        work.carry_out(plan, now)
        # A customer the pool was held for has GPUs now: the hold goes on for the others
        # refused (`core.holds`); what it keeps from the queue no more goes back to it at once.
        before = work.holds.get(spec.pool)
        after = after_placement(before, (spec.account_id, spec.instance_id), spec.gpus)
        if after is None:
            work.holds.pop(spec.pool, None)
        else:
            work.holds[spec.pool] = after
        held = after is not before
        if work.clusters or held:
            work.schedule(now, config)
        return _risk_assessed(work.done(), state, now, config, (spec.pool, spec.gpus))
    ticket = Ticket(inst.id, inst.pool, inst.gpus, now, inst.account_id, nodes=inst.nodes)
    work.fleet = enqueue(work.fleet, ticket)
    first = lifecycle.new_instance(inst, now)
    work.instances[inst.id] = first.state
    work.effects.extend(first.effects)
    work.schedule(now, config)
    return _risk_assessed(work.done(), state, now, config)


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
    return _risk_assessed(work.done(), state, now, config)


def report_many(
    state: EngineState,
    events: Sequence[tuple[str, LifecycleEvent]],
    now: Timestamp,
    config: SchedulerConfig = DEFAULT_CONFIG,
) -> EngineStep:
    """Several reports at the same `now` (a poll of the runtime), then one queue pass.

    The result is that of `report` called for each in turn, except for the queue passes in
    between: GPUs freed by one report are placed once, at the end, not after each report (with
    an empty queue, and no clusters, the two are the same); so is the preemption risk assessed
    once, at the end (`core.risk`). Ids not in the state are skipped
    (a report about an instance that left, not an error). Cost: the reports' own, plus one pass.
    """
    work = Work(state)
    for instance_id, event in events:
        if instance_id in work.instances:
            work.advance(instance_id, event, now)
    work.schedule(now, config)
    return _risk_assessed(work.done(), state, now, config)


def tick(
    state: EngineState,
    now: Timestamp,
    config: SchedulerConfig = DEFAULT_CONFIG,
    reports: Sequence[tuple[str, LifecycleEvent]] = (),
) -> EngineStep:
    """What the runtime reported (as `report_many`), deadlines that are due (SIGKILL at the
    end of grace), then one queue pass: a server's tick is one Work and one pass.

    Only the due entries of the index are looked at: O(due) to find the instances (the front of
    the deadline order), O(cordoned nodes) for the nodes, not O(live).
    The order is fixed (reports as given, instances due by id, then nodes by id), so that a run
    reproduces exactly."""
    work = Work(state)
    for instance_id, event in reports:
        if instance_id in work.instances:
            work.advance(instance_id, event, now)
    for instance_id in work.indexes.instances_due(now):
        work.advance(instance_id, lifecycle.DeadlineCheck(), now)
    nodes_due = sorted(n for n, at in work.indexes.node_deadlines.items() if at <= now)
    for node_id in nodes_due:
        work.advance_node(node_id, lifecycle.DeadlineCheck(), now)
    work.schedule(now, config)
    return _risk_assessed(work.done(), state, now, config)


def refused(
    state: EngineState,
    pool: PoolKey,
    gpus: int,
    now: Timestamp,
    config: SchedulerConfig = DEFAULT_CONFIG,
    requester: str = "",
) -> EngineStep:
    """An on-demand request for `gpus` in `pool` was refused (`launch` raised
    InsufficientCapacity): hold the pool for the retry of `requester` (its account, or its id
    where a retry keeps it: `core.holds`). It touches no record: holds are not stored."""
    holds = with_refusal(state.holds, pool, gpus, now, config.on_demand_hold_s, requester)
    new = replace(state, holds=Map(holds))
    return _risk_assessed(EngineStep(new, (), next_wake(new), NOTHING), state, now, config)


def _risk_assessed(
    step: EngineStep,
    before: EngineState,
    now: Timestamp,
    config: SchedulerConfig,
    arrival: tuple[PoolKey, int] | None = None,
) -> EngineStep:
    """The step with its preemption risk brought up to date (`core.risk`): a placed on-demand
    `arrival` joins its pool's window, and the pools the step changed are assessed again; the
    `PreemptionRisk` events of instances newly at risk follow the step's own effects. Only the
    pools whose free GPUs or demand may have moved are looked at (`_changed_pools`), so the cost
    does not grow with the pools the step left alone. `risk_window_s` 0: nothing to do."""
    if config.risk_window_s <= 0:
        return step
    state, risk = step.state, step.state.risk
    pools = _changed_pools(step, before)
    pools.update(risk.expired(now))
    if arrival is not None:
        pool, gpus = arrival
        risk = risk.with_pool(pool, with_arrival(risk.pool(pool), gpus, now, config.risk_window_s))
        pools.add(pool)
    events = []
    for pool in sorted(pools, key=str):
        hold = state.holds.get(pool)
        new, emitted = assess(
            risk.pool(pool), pool, state.fleet, state.instances, state.nodes, hold, now, config
        )
        risk = risk.with_pool(pool, new)
        events.extend(emitted)
    if risk is state.risk:
        return step
    assessed = replace(state, risk=risk)
    return replace(
        step, state=assessed, effects=(*step.effects, *events), wake_at=next_wake(assessed)
    )


def _changed_pools(step: EngineStep, before: EngineState) -> set[PoolKey]:
    """The pools whose free or reclaimable GPUs `step` changed (among those of the instances
    and nodes it touched: a checkpoint report or a queued launch changes neither, and costs no
    assessment), and those whose hold is not the one last assessed: O(touched + holds + pools
    remembered by the risk state)."""
    state, risk = step.state, step.state.risk
    touched: set[PoolKey] = set()
    for instance_id in step.touched.instances:
        inst = state.instances.get(instance_id) or before.instances.get(instance_id)
        if inst is not None:
            touched.add(inst.pool)
    for node_id in step.touched.nodes:
        node = state.nodes.get(node_id) or before.nodes.get(node_id)
        if node is not None:
            touched.add(node.pool)
    old, new = before.fleet.pool_totals, state.fleet.pool_totals
    pools = {p for p in touched if old.get(p) != new.get(p)}
    pools.update(p for p, hold in state.holds.items() if risk.pool(p).hold is not hold)
    pools.update(
        p for p, r in risk.pools.items() if r.hold is not None and state.holds.get(p) is not r.hold
    )
    return pools


def signals_sent(
    state: EngineState, sent: Sequence[tuple[str, lifecycle.SignalSent]], now: Timestamp
) -> EngineStep:
    """The shell has sent these drains' SIGTERMs (subject id, when): each draining instance or
    node counts its grace from its own (`drain.signal_stamp`: a deadline only ever moves later,
    once per allocation). Subjects that left, or moved on, are skipped. No queue pass: nothing
    is freed. Cost: O(len(sent) · log n)."""
    work = Work(state)
    for subject_id, event in sent:
        if subject_id in work.instances:
            work.advance(subject_id, event, now)
        elif subject_id in work.nodes:
            work.advance_node(subject_id, event, now)
    return work.done()

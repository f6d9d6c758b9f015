"""How instances and nodes show in the fleet snapshot: their tickets and their allocations.

The fleet (`core.snapshot`) is derived, never stored: a queued instance or preemptible node is a
ticket in its pool's queue, one that holds GPUs is an allocation. The engine derives it from the
records when it rebuilds its state (`engine.state_from_instances`) and, within an input, keeps it
in line after every lifecycle step (`engine.Work`). Both go through the functions here, so that a
rebuilt fleet and a followed one cannot disagree about a ticket or about the allocation fields
(draining, checkpoint and interruption history) that the queue and victim choice read.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import replace

from lowcostgpu.core.instance_state import DRAINING, InstanceState
from lowcostgpu.core.nodes import NodeState, allocation_of_node, ticket_for_node
from lowcostgpu.core.snapshot import (
    FleetSnapshot,
    dequeue_tickets,
    enqueue,
    placed_at,
    update_allocation,
)
from lowcostgpu.core.state import Ticket
from lowcostgpu.domain.capacity import Allocation, Host
from lowcostgpu.domain.status import InstanceStatus, NodeStatus

_I = InstanceStatus


def fleet_of(
    hosts: Iterable[Host], instances: Collection[InstanceState], nodes: Collection[NodeState]
) -> FleetSnapshot:
    """The fleet the records imply: an instance or a node holding GPUs becomes its allocation
    (draining while it drains, waiting for the victims it waits for); a queued instance or
    preemptible node becomes its ticket at its original enqueue time."""
    allocations = [a for i in instances if i.allocation_id is not None for a in allocations_of(i)]
    allocations += [allocation_of_node(n) for n in nodes if n.allocation_id is not None]
    tickets = [ticket_for(i) for i in instances if i.status is _I.QUEUED]
    tickets += [ticket_for_node(n) for n in nodes if n.queued]
    return FleetSnapshot.build(hosts, allocations, tickets)


def follow_instance(fleet: FleetSnapshot, old: InstanceState, new: InstanceState) -> FleetSnapshot:
    """The fleet after one lifecycle step of an instance (its releases aside: freeing GPUs wakes
    whoever waited for them, which is the engine's to do). A requeued instance is queued again, a
    stopped or deleted queued one leaves the queue; its allocation follows its drain, checkpoint
    and interruption history."""
    if new.status is _I.QUEUED and old.status is not _I.QUEUED:
        fleet = enqueue(fleet, ticket_for(new))
    elif old.status is _I.QUEUED and new.status in (_I.STOPPED, _I.DELETED):
        fleet = dequeue_tickets(fleet, [ticket_for(old)])
    elif old.status is _I.QUEUED and new.status is _I.QUEUED and old is not new:
        ticket = ticket_for(new)
        if ticket != ticket_for(old):  # a checkpoint reported while queued: its history moved
            fleet = enqueue(dequeue_tickets(fleet, [ticket_for(old)]), ticket)
    if new.allocation_id is not None:
        fleet = _follow_allocation(fleet, new, new.allocation_id, new.host_id)
        for member in new.members:
            fleet = _follow_allocation(fleet, new, member.allocation_id, member.host_id)
    return fleet


def _follow_allocation(
    fleet: FleetSnapshot, inst: InstanceState, allocation_id: str, host_id: str | None
) -> FleetSnapshot:
    """Keep one of the instance's allocations in step with it: a draining instance (reclaimed
    or stopped) is never a victim again, a checkpoint lowers what a reclaim would cost, and the
    interruption history feeds victim choice."""
    alloc = fleet.allocation(allocation_id, host_id)
    draining = alloc.draining or inst.status in DRAINING
    earlier = earlier_run_s(inst)
    if (  # most steps change none of them: no copy to compare (`replace` showed in profiles)
        alloc.capacity_class is inst.capacity_class
        and alloc.draining == draining
        and alloc.last_checkpoint_at == inst.last_checkpoint_at
        and alloc.last_interrupted_at == inst.last_interrupted_at
        and alloc.interruption_count == inst.interruption_count
        and alloc.earlier_run_s == earlier
        and alloc.saves_on_notice == inst.saves_on_notice
        and alloc.save_s == save_s_of(inst)
        and alloc.grace_period_s == inst.grace_period_s
    ):
        return fleet
    wanted = replace(
        alloc,
        capacity_class=inst.capacity_class,  # a queue placement is made as interruptible
        draining=draining,
        last_checkpoint_at=inst.last_checkpoint_at,
        last_interrupted_at=inst.last_interrupted_at,
        interruption_count=inst.interruption_count,
        earlier_run_s=earlier,
        save_s=save_s_of(inst),
        saves_on_notice=inst.saves_on_notice,
        grace_period_s=inst.grace_period_s,
    )
    return update_allocation(fleet, wanted)


def follow_node(fleet: FleetSnapshot, old: NodeState, new: NodeState) -> FleetSnapshot:
    """The fleet after one step of a node (its releases aside): a node placed or gone leaves the
    queue; its allocation drains once it is cordoned and keeps its interruption time."""
    if old.queued and not new.queued and new.allocation_id is None:
        fleet = dequeue_tickets(fleet, [ticket_for_node(old)])
    if new.allocation_id is not None:
        alloc = fleet.allocation(new.allocation_id, new.host_id)
        wanted = replace(
            alloc,
            draining=alloc.draining or new.status is NodeStatus.CORDONED,
            last_interrupted_at=new.last_interrupted_at,
        )
        if wanted != alloc:
            fleet = update_allocation(fleet, wanted)
    return fleet


def ticket_for(inst: InstanceState) -> Ticket:
    """The queue ticket of a queued instance: its first enqueue time and its history."""
    assert inst.enqueued_at is not None
    return Ticket(
        subject_id=inst.id,
        pool=inst.pool,
        gpus=inst.gpus,
        enqueued_at=inst.enqueued_at,
        account_id=inst.account_id,
        last_checkpoint_at=inst.last_checkpoint_at,
        last_interrupted_at=inst.last_interrupted_at,
        interruption_count=inst.interruption_count,
        nodes=inst.nodes,
    )


def allocations_of(inst: InstanceState) -> list[Allocation]:
    """The allocations of an instance that holds GPUs, as the scheduler sees them: one, or a
    gang's, one per member (each priced at the gang's GPUs, `Allocation.gang_gpus`)."""
    assert inst.allocation_id is not None and inst.host_id is not None
    first = allocation_of(inst)
    if not inst.members:
        return [first]
    gang = replace(first, gang_gpus=inst.total_gpus)
    members = [
        replace(
            gang,
            id=m.allocation_id,
            host_id=m.host_id,
            gpu_indices=frozenset(m.gpu_indices),
            waits_for=frozenset(),
        )
        for m in inst.members
    ]
    return [gang, *members]


def allocation_of(inst: InstanceState) -> Allocation:
    """The rank-0 allocation of an instance that holds GPUs, as the scheduler sees it."""
    assert inst.allocation_id is not None and inst.host_id is not None
    return Allocation(
        id=inst.allocation_id,
        subject_id=inst.id,
        host_id=inst.host_id,
        pool=inst.pool,
        gpu_indices=frozenset(inst.gpu_indices),
        capacity_class=inst.capacity_class,
        started_at=placed_at(inst.allocation_id),
        account_id=inst.account_id,
        last_checkpoint_at=inst.last_checkpoint_at,
        last_interrupted_at=inst.last_interrupted_at,
        interruption_count=inst.interruption_count,
        earlier_run_s=earlier_run_s(inst),
        draining=inst.status in DRAINING,
        waits_for=inst.waiting_for,
        save_s=save_s_of(inst),
        saves_on_notice=inst.saves_on_notice,
        grace_period_s=inst.grace_period_s,
    )


def save_s_of(inst: InstanceState) -> int | None:
    """The save time its allocation carries: the largest of its recent reports
    (a safety margin against one lucky fast save), None when it reported none."""
    return max(inst.save_s_reports) if inst.save_s_reports else None


def earlier_run_s(inst: InstanceState) -> int:
    """Seconds on GPUs of the instance's finished runs (not the current allocation's run)."""
    return sum(
        run.billed_until - run.started_at
        for run in inst.runs
        if run.billed_until is not None and run.allocation_id != inst.allocation_id
    )

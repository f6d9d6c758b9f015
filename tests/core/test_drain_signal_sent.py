"""The grace counts from the SIGTERM really sent (`SignalSent`), never from a late effect's
decision alone: the deadline moves to sent + grace when that is later, once per allocation."""

from __future__ import annotations

import pytest
from test_lifecycle_support import T0, at_status, of_type

from lowcostgpu.core.drain import DeadlineCheck, Placed, Reclaimed, SignalSent, StopRequested
from lowcostgpu.core.effects import KillWorkload
from lowcostgpu.core.lifecycle import InstanceState, WorkloadStarted, step
from lowcostgpu.core.node_lifecycle import node_step
from lowcostgpu.core.nodes import NodeState
from lowcostgpu.domain.capacity import CapacityClass, PoolKey
from lowcostgpu.domain.status import InstanceStatus, NodeStatus

NOTICE = T0 + 1000
GRACE = 30


def draining(grace_s: int = GRACE) -> InstanceState:
    running = at_status(InstanceStatus.RUNNING, grace_period_s=grace_s)
    return step(running, Reclaimed("od-9"), NOTICE).state


@pytest.mark.parametrize("late_s", [0, 1, 7, 60])
@pytest.mark.parametrize(("offset_s", "killed"), [(-1, False), (0, True)])
def test_a_sigterm_sent_late_moves_the_sigkill_to_sent_plus_grace_and_not_a_second_before(
    late_s: int, offset_s: int, killed: bool
) -> None:
    sent = step(draining(), SignalSent("alloc-1", NOTICE + late_s), NOTICE + late_s).state
    assert sent.deadline == NOTICE + late_s + GRACE
    result = step(sent, DeadlineCheck(), NOTICE + late_s + GRACE + offset_s)
    assert bool(of_type(result, KillWorkload)) is killed
    assert result.wake_at == (None if killed else NOTICE + late_s + GRACE)


def test_a_sigterm_on_time_changes_nothing_and_a_deadline_is_never_brought_forward() -> None:
    s = draining()
    for at in (NOTICE, NOTICE - 5):
        assert step(s, SignalSent("alloc-1", at), at).state is s


def test_a_replayed_signal_does_not_extend_the_deadline_again() -> None:
    first = step(draining(), SignalSent("alloc-1", NOTICE + 4), NOTICE + 4).state
    again = step(first, SignalSent("alloc-1", NOTICE + 50), NOTICE + 50).state
    assert (first.deadline, first.signal_sent_at) == (NOTICE + 4 + GRACE, NOTICE + 4)
    assert again is first


@pytest.mark.parametrize(
    ("state", "event"),
    [
        (draining(), SignalSent("alloc-other", NOTICE + 9)),  # another allocation's signal
        (at_status(InstanceStatus.RUNNING), SignalSent("alloc-1", NOTICE + 9)),  # no drain
    ],
)
def test_a_signal_of_another_allocation_or_outside_a_drain_is_stale(
    state: InstanceState, event: SignalSent
) -> None:
    assert step(state, event, NOTICE + 9).state is state


def test_a_stop_drain_counts_from_its_sigterm_too() -> None:
    running = at_status(InstanceStatus.RUNNING, grace_period_s=GRACE)
    stopping = step(running, StopRequested(), NOTICE).state
    assert step(stopping, SignalSent("alloc-1", NOTICE + 3), NOTICE + 3).state.deadline == (
        NOTICE + 3 + GRACE
    )


def test_a_new_placement_clears_the_stamp_of_the_last_drain() -> None:
    stamped = step(draining(), SignalSent("alloc-1", NOTICE + 4), NOTICE + 4).state
    ended = step(stamped, DeadlineCheck(), NOTICE + 4 + GRACE).state
    assert ended.status is InstanceStatus.QUEUED
    placed = step(ended, Placed("alloc-2", "host-h", (0,)), NOTICE + 100).state
    assert placed.signal_sent_at is None and placed.deadline is None
    running = step(placed, WorkloadStarted(), NOTICE + 101).state
    again = step(running, Reclaimed("od-10"), NOTICE + 200).state
    assert step(again, SignalSent("alloc-2", NOTICE + 202), NOTICE + 202).state.deadline == (
        NOTICE + 202 + GRACE
    )


def _cordoned_node() -> NodeState:
    pool = PoolKey("eu-west", "h100-sxm")
    pending = NodeState(
        "node-1", "clu-1", "acct-1", pool, 8, CapacityClass.INTERRUPTIBLE, grace_period_s=GRACE
    )
    ready = node_step(pending, Placed("alloc-n1", "host-h", range(8)), T0).state
    return node_step(ready, Reclaimed("od-1"), NOTICE).state


@pytest.mark.parametrize(("offset_s", "removed"), [(-1, False), (0, True)])
def test_a_node_drain_counts_from_its_pods_sigterm(offset_s: int, removed: bool) -> None:
    sent = node_step(_cordoned_node(), SignalSent("alloc-n1", NOTICE + 6), NOTICE + 6).state
    assert (sent.deadline, sent.signal_sent_at) == (NOTICE + 6 + GRACE, NOTICE + 6)
    again = node_step(sent, SignalSent("alloc-n1", NOTICE + 20), NOTICE + 20).state
    assert again is sent  # once per allocation
    result = node_step(sent, DeadlineCheck(), NOTICE + 6 + GRACE + offset_s)
    assert (result.state.status is NodeStatus.REMOVED) is removed

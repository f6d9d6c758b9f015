"""The drain sequence: T+0 notice, T+grace SIGKILL, requeue, restart count; instances and nodes."""

from __future__ import annotations

import pytest
from test_lifecycle_support import T0, at_status, of_type, placed, reasons, run

from lowcostgpu.core.drain import (
    DeadlineCheck,
    Placed,
    Reclaimed,
    StopRequested,
    VictimReleased,
    WorkloadExited,
    interruption_notice,
)
from lowcostgpu.core.effects import (
    AddNode,
    CordonNode,
    EmitEvent,
    KillWorkload,
    ReleaseAllocation,
    RemoveNode,
    SignalWorkload,
    StartWorkload,
)
from lowcostgpu.core.lifecycle import (
    CheckpointReported,
    CompletionReported,
    InstanceState,
    WorkloadStarted,
    new_instance,
    step,
)
from lowcostgpu.core.node_lifecycle import Leave, node_step
from lowcostgpu.core.nodes import NodeState
from lowcostgpu.domain.capacity import CapacityClass, PoolKey
from lowcostgpu.domain.errors import Conflict
from lowcostgpu.domain.events import EventType, Reason
from lowcostgpu.domain.status import InstanceStatus, NodeStatus

I = InstanceStatus  # noqa: E741
NOTICE = T0 + 1000


def _running_with_checkpoint(**kwargs: object) -> InstanceState:
    state = at_status(I.RUNNING, **kwargs)
    return step(state, CheckpointReported(4200), NOTICE - 60).state


def test_t0_notice_interrupts_warns_and_sends_sigterm_with_the_deadline() -> None:
    owner = _running_with_checkpoint().account_id
    reclaim = Reclaimed("od-9", 1200, "least work lost", for_account_id=owner)
    result = step(_running_with_checkpoint(), reclaim, NOTICE)
    s = result.state
    assert s.status is I.INTERRUPTING
    assert (s.notice_at, s.deadline, result.wake_at) == (NOTICE, NOTICE + 300, NOTICE + 300)
    preempted, sigterm = result.effects
    assert isinstance(preempted, EmitEvent) and preempted.reason is Reason.PREEMPTED
    assert preempted.event_type is EventType.WARNING
    assert preempted.data == {
        "notice_at": NOTICE,
        "deadline": NOTICE + 300,
        "grace_period_s": 300,
        "for_subject": "od-9",
        "lost_gpu_s": 1200,
        "reason": "least work lost",
        "last_checkpoint_step": 4200,
        "restart_count": 0,
        "gpu_type": _running_with_checkpoint().pool.gpu_type,
        "run_s": NOTICE - _running_with_checkpoint().started_at,
        "auto_requeue": True,
    }
    # The message says what happens to the customer, not why (the reasoning is the data's).
    assert preempted.message.startswith("reclaimed for on-demand work: SIGTERM now, 5:00 to ")
    assert "od-9" not in preempted.message and "least work lost" not in preempted.message
    assert sigterm == SignalWorkload("inst-1", "alloc-1", "SIGTERM")
    assert (s.interruption_count, s.last_interrupted_at, s.preempted_for) == (1, NOTICE, "od-9")
    assert interruption_notice(s.notice_at, s.deadline) == {
        "action": "stop",
        "notice_at": NOTICE,
        "deadline": NOTICE + 300,
    }


def test_gpu_billing_of_the_run_stops_at_the_notice() -> None:
    s = step(_running_with_checkpoint(), Reclaimed("od-9"), NOTICE).state
    s = step(s, WorkloadExited(143), NOTICE + 40).state
    assert [(r.started_at, r.billed_until) for r in s.runs] == [(T0 + 20, NOTICE)]


def test_exit_in_grace_frees_gpus_then_requeues_at_the_original_time() -> None:
    s = step(_running_with_checkpoint(), Reclaimed("od-9"), NOTICE).state
    result = step(s, WorkloadExited(0), NOTICE + 42)
    assert result.state.status is I.QUEUED
    assert result.state.enqueued_at == T0
    assert result.wake_at is None
    assert isinstance(result.effects[0], ReleaseAllocation)
    assert reasons(result) == [Reason.INTERRUPTED, Reason.REQUEUED]
    assert result.effects[1].message == "interrupted — checkpoint step 4200 on volume"  # type: ignore[union-attr]


def test_an_exit_after_a_notice_is_never_a_success_even_after_a_completion_report() -> None:
    s = step(_running_with_checkpoint(), CompletionReported(9000), NOTICE - 5).state
    s = step(s, Reclaimed("od-9"), NOTICE).state
    result = step(s, WorkloadExited(0), NOTICE + 1)
    assert Reason.SUCCEEDED not in reasons(result)
    assert Reason.INTERRUPTED in reasons(result)


@pytest.mark.parametrize("grace_s", [1, 30, 300])
@pytest.mark.parametrize(("offset_s", "killed"), [(-1, False), (0, True), (1, True)])
def test_deadline_check_kills_at_the_deadline_and_not_a_second_before(
    grace_s: int, offset_s: int, killed: bool
) -> None:
    s = step(_running_with_checkpoint(grace_period_s=grace_s), Reclaimed("od-9"), NOTICE).state
    deadline = NOTICE + grace_s
    result = step(s, DeadlineCheck(), deadline + offset_s)
    if not killed:
        assert result.state == s and result.effects == ()
        assert result.wake_at == deadline
        return
    assert of_type(result, KillWorkload) == [KillWorkload("inst-1", "alloc-1")]
    assert reasons(result) == [Reason.KILLED, Reason.INTERRUPTED, Reason.REQUEUED]
    assert of_type(result, ReleaseAllocation) == [ReleaseAllocation("alloc-1")]
    assert result.state.status is I.QUEUED and result.wake_at is None


def test_sigkill_is_final_a_later_exit_report_is_a_no_op() -> None:
    s = step(_running_with_checkpoint(), Reclaimed("od-9"), NOTICE).state
    s = step(s, DeadlineCheck(), NOTICE + 300).state
    late = step(s, WorkloadExited(137), NOTICE + 302)
    assert late.state == s and late.effects == ()


def test_grace_zero_sends_sigterm_and_sigkill_in_the_same_step() -> None:
    result = step(_running_with_checkpoint(grace_period_s=0), Reclaimed("od-9"), NOTICE)
    kinds = [type(e).__name__ for e in result.effects]
    assert kinds.index("SignalWorkload") < kinds.index("KillWorkload")
    assert result.state.status is I.QUEUED


def test_the_second_run_sees_restart_count_one_and_a_restarted_event() -> None:
    s = step(_running_with_checkpoint(), Reclaimed("od-9"), NOTICE).state
    s = step(s, WorkloadExited(143), NOTICE + 30).state
    second = step(s, placed(2), NOTICE + 600)
    starts = of_type(second, StartWorkload)
    assert starts == [StartWorkload("inst-1", "alloc-2", "host-a", (0, 1), 1)]
    started = step(second.state, WorkloadStarted(), NOTICE + 610)
    assert reasons(started) == [Reason.RESTARTED]
    assert "restart 1" in started.effects[0].message  # type: ignore[union-attr]
    assert "checkpoint step 4200" in started.effects[0].message  # type: ignore[union-attr]
    assert started.state.enqueued_at == T0
    assert [r.allocation_id for r in started.state.runs] == ["alloc-1", "alloc-2"]


def test_the_first_run_has_restart_count_zero() -> None:
    result = step(at_status(I.QUEUED), placed(), T0 + 10)
    assert of_type(result, StartWorkload)[0].restart_count == 0  # type: ignore[union-attr]


def test_without_auto_requeue_it_stays_interrupted() -> None:
    s = step(_running_with_checkpoint(auto_requeue=False), Reclaimed("od-9"), NOTICE).state
    result = step(s, WorkloadExited(143), NOTICE + 10)
    assert result.state.status is I.INTERRUPTED
    assert reasons(result) == [Reason.INTERRUPTED]


@pytest.mark.parametrize(("exit_first", "expected_kill"), [(True, False), (False, True)])
def test_user_stop_drains_the_same_way_and_ends_stopped_without_requeue(
    exit_first: bool, expected_kill: bool
) -> None:
    start = step(_running_with_checkpoint(), StopRequested(), NOTICE)
    assert start.state.status is I.STOPPING and start.wake_at == NOTICE + 300
    assert SignalWorkload("inst-1", "alloc-1", "SIGTERM") in start.effects
    end = (
        step(start.state, WorkloadExited(0), NOTICE + 5)
        if exit_first
        else step(start.state, DeadlineCheck(), NOTICE + 300)
    )
    assert end.state.status is I.STOPPED
    assert bool(of_type(end, KillWorkload)) is expected_kill
    assert Reason.REQUEUED not in reasons(end)
    assert end.state.interruption_count == 0


def test_stop_during_an_interruption_ends_stopped_not_requeued() -> None:
    s = step(_running_with_checkpoint(), Reclaimed("od-9"), NOTICE).state
    stopping = step(s, StopRequested(), NOTICE + 3)
    assert stopping.state.status is I.INTERRUPTING and stopping.wake_at == NOTICE + 300
    end = step(stopping.state, WorkloadExited(143), NOTICE + 9)
    assert end.state.status is I.STOPPED
    assert reasons(end) == [Reason.INTERRUPTED, Reason.STOPPED]


def test_reclaim_of_a_placement_still_waiting_for_its_victims_ends_at_once() -> None:
    waiting = Placed("alloc-7", "host-b", (0, 1), frozenset({"victim"}))
    s = run(at_status(I.QUEUED), [(waiting, T0 + 5)])
    result = step(s, Reclaimed("od-4"), T0 + 8)
    assert of_type(result, SignalWorkload) == []
    assert reasons(result) == [Reason.PREEMPTED, Reason.INTERRUPTED, Reason.REQUEUED]
    assert of_type(result, ReleaseAllocation) == [ReleaseAllocation("alloc-7")]


# --- nodes ------------------------------------------------------------------------------------

POOL = PoolKey("eu-west", "h100-sxm")


def _node(
    capacity_class: CapacityClass = CapacityClass.INTERRUPTIBLE, grace_s: int = 120
) -> NodeState:
    pending = NodeState(
        "node-1", "clu-1", "acct-1", POOL, 8, capacity_class, grace_period_s=grace_s
    )
    return node_step(pending, Placed("alloc-n1", "host-h", range(8)), T0).state


def test_a_placed_node_is_added_with_its_compute_class_label() -> None:
    pending = NodeState("node-1", "clu-1", "acct-1", POOL, 8, CapacityClass.INTERRUPTIBLE)
    result = node_step(pending, Placed("alloc-n1", "host-h", range(8)), T0)
    assert result.state.status is NodeStatus.READY and result.state.started_at == T0
    add = result.effects[0]
    assert add == AddNode("node-1", "clu-1", "alloc-n1", "host-h", tuple(range(8)), "preemptible")


def test_a_node_placement_waits_for_its_victims() -> None:
    pending = NodeState("node-2", "clu-1", "acct-1", POOL, 8, CapacityClass.ON_DEMAND)
    first = node_step(pending, Placed("alloc-n2", "host-h", range(8), frozenset({"v"})), T0)
    assert first.state.status is NodeStatus.PENDING and first.effects == ()
    second = node_step(first.state, VictimReleased("v"), T0 + 30)
    assert second.state.status is NodeStatus.READY and second.state.started_at == T0 + 30


def test_node_reclaim_cordons_first_then_warns_then_signals_its_pods() -> None:
    result = node_step(_node(), Reclaimed("od-1", 500, "fewest victims"), NOTICE)
    cordon, preempted, signal = result.effects
    assert cordon == CordonNode("node-1")
    assert isinstance(preempted, EmitEvent) and preempted.reason is Reason.PREEMPTED
    assert preempted.object_kind == "node" and preempted.data["deadline"] == NOTICE + 120
    assert signal == SignalWorkload("node-1", "alloc-n1", "SIGTERM")
    assert result.state.status is NodeStatus.CORDONED
    assert (result.state.billed_until, result.wake_at) == (NOTICE, NOTICE + 120)


@pytest.mark.parametrize(("offset_s", "removed"), [(-1, False), (0, True)])
def test_node_deadline_boundary_removes_the_node_at_the_deadline(
    offset_s: int, removed: bool
) -> None:
    s = node_step(_node(), Reclaimed("od-1"), NOTICE).state
    result = node_step(s, DeadlineCheck(), NOTICE + 120 + offset_s)
    if not removed:
        assert result.effects == () and result.wake_at == NOTICE + 120
        return
    assert [type(e) for e in result.effects] == [
        KillWorkload,
        EmitEvent,
        RemoveNode,
        ReleaseAllocation,
        EmitEvent,
    ]
    assert result.state.status is NodeStatus.REMOVED and result.wake_at is None


def test_node_whose_pods_leave_early_is_removed_then() -> None:
    s = node_step(_node(), Reclaimed("od-1"), NOTICE).state
    result = node_step(s, WorkloadExited(), NOTICE + 12)
    assert result.effects[:2] == (RemoveNode("node-1"), ReleaseAllocation("alloc-n1"))
    assert result.effects[2].reason is Reason.NODE_REMOVED  # type: ignore[union-attr]
    assert node_step(result.state, DeadlineCheck(), NOTICE + 120).effects == ()


def test_a_standard_node_is_never_preempted() -> None:
    with pytest.raises(Conflict, match="standard nodes are never preempted"):
        node_step(_node(CapacityClass.ON_DEMAND), Reclaimed("od-1"), NOTICE)


def test_scale_down_cordons_with_a_normal_event_and_a_pending_node_goes_at_once() -> None:
    result = node_step(_node(), StopRequested(), NOTICE)
    assert [getattr(e, "reason", None) for e in result.effects][1] is Reason.CORDONED
    assert result.state.drain_reason == "scale-down"
    deleting = node_step(_node(), Leave("cluster-delete"), NOTICE)
    assert deleting.state.drain_reason == "cluster-delete"
    pending = NodeState("node-3", "clu-1", "acct-1", POOL, 8, CapacityClass.INTERRUPTIBLE)
    gone = node_step(pending, StopRequested(), NOTICE)
    assert gone.state.status is NodeStatus.REMOVED
    assert [type(e) for e in gone.effects] == [EmitEvent]  # it was never added: nothing to remove


@pytest.mark.parametrize("grace_s", [0, 45, 300])
def test_instances_and_nodes_share_one_deadline_rule(grace_s: int) -> None:
    inst = step(_running_with_checkpoint(grace_period_s=grace_s), Reclaimed("od"), NOTICE)
    node = node_step(_node(grace_s=grace_s), Reclaimed("od"), NOTICE)
    if grace_s == 0:
        assert inst.wake_at is None and node.wake_at is None  # both killed at once
    else:
        assert inst.wake_at == node.wake_at == NOTICE + grace_s


def test_the_whole_story_records_one_event_per_change_in_order() -> None:
    fresh = InstanceState("inst-1", "acct-1", POOL, 2, CapacityClass.INTERRUPTIBLE)
    story = [new_instance(fresh, T0)]
    s = story[0].state
    for event, at in [
        (placed(1), T0 + 10),
        (WorkloadStarted(), T0 + 20),
        (CheckpointReported(4200), T0 + 500),
        (Reclaimed("od-9", 800, "least work lost"), T0 + 900),
        (WorkloadExited(143), T0 + 930),
        (placed(2), T0 + 2000),
        (WorkloadStarted(), T0 + 2010),
        (WorkloadExited(0), T0 + 5000),
    ]:
        story.append(step(s, event, at))
        s = story[-1].state
    assert [r for result in story for r in reasons(result)] == [
        Reason.QUEUED,
        Reason.SCHEDULED,
        Reason.STARTED,
        Reason.CHECKPOINT_REPORTED,
        Reason.PREEMPTED,
        Reason.INTERRUPTED,
        Reason.REQUEUED,
        Reason.SCHEDULED,
        Reason.RESTARTED,
        Reason.SUCCEEDED,
    ]
    assert s.status is I.SUCCEEDED and s.restart_count == 1 and s.interruption_count == 1


@pytest.mark.parametrize(
    ("for_account", "named"),
    [
        ("same", True),  # the account's own on-demand work: named, as the owner may see it
        ("acct-other", False),  # another account's: its id never reaches this account
        ("", False),  # an owner not known counts as another
    ],
)
def test_a_preempted_event_names_the_work_it_was_for_only_to_the_same_account(
    for_account: str, named: bool
) -> None:
    inst, node = _running_with_checkpoint(), _node()

    def reclaim(owner: str) -> Reclaimed:
        return Reclaimed("od-secret-7", 10, "why", owner if for_account == "same" else for_account)

    results = [
        step(inst, reclaim(inst.account_id), NOTICE).effects,
        node_step(node, reclaim(node.account_id), NOTICE).effects,
    ]
    for effects in results:
        (preempted,) = [e for e in effects if isinstance(e, EmitEvent)]
        assert "od-secret-7" not in preempted.message  # "on-demand work", whoever's it is
        assert preempted.data["for_subject"] == ("od-secret-7" if named else None)
        assert "reclaimed for on-demand work" in preempted.message

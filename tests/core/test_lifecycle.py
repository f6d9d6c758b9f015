"""The instance state machine, edge by edge, against the transition table."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_lifecycle_support import T0, at_status, instance, of_type, placed, reasons, run

from lowcostgpu.core.effects import ReleaseAllocation, StartWorkload
from lowcostgpu.core.lifecycle import (
    CheckpointReported,
    CompletionReported,
    DeadlineCheck,
    DeleteRequested,
    Enqueued,
    InstanceState,
    LifecycleEvent,
    Placed,
    Reclaimed,
    ResumeRequested,
    StartFailed,
    StopRequested,
    VictimReleased,
    WorkloadExited,
    WorkloadStarted,
    step,
)
from lowcostgpu.domain.capacity import CapacityClass
from lowcostgpu.domain.errors import (
    Conflict,
    IllegalTransition,
    InvalidRequest,
    LowcostgpuError,
)
from lowcostgpu.domain.events import EventType, Reason
from lowcostgpu.domain.status import INSTANCE_HOLDS_GPUS, INSTANCE_TRANSITIONS, InstanceStatus

I = InstanceStatus  # noqa: E741
NOW = T0 + 1000

# (from, event, to, the event reason that records the change)
EDGES: list[tuple[InstanceStatus, LifecycleEvent, InstanceStatus, Reason]] = [
    (I.QUEUED, placed(2), I.STARTING, Reason.SCHEDULED),
    (I.QUEUED, StopRequested(), I.STOPPED, Reason.STOPPED),
    (I.QUEUED, DeleteRequested(), I.DELETED, Reason.DELETED),
    (I.STARTING, WorkloadStarted(), I.RUNNING, Reason.STARTED),
    (I.STARTING, StartFailed("image not found"), I.FAILED, Reason.FAILED),
    (I.STARTING, Reclaimed("od-1"), I.INTERRUPTING, Reason.PREEMPTED),
    (I.STARTING, StopRequested(), I.STOPPING, Reason.STOPPING),
    (I.RUNNING, Reclaimed("od-1"), I.INTERRUPTING, Reason.PREEMPTED),
    (I.RUNNING, WorkloadExited(0), I.SUCCEEDED, Reason.SUCCEEDED),
    (I.RUNNING, WorkloadExited(1), I.FAILED, Reason.FAILED),
    (I.RUNNING, StopRequested(), I.STOPPING, Reason.STOPPING),
    (I.INTERRUPTING, WorkloadExited(143), I.INTERRUPTED, Reason.INTERRUPTED),
    (I.INTERRUPTED, ResumeRequested(), I.QUEUED, Reason.QUEUED),
    (I.INTERRUPTED, StopRequested(), I.STOPPED, Reason.STOPPED),
    (I.INTERRUPTED, DeleteRequested(), I.DELETED, Reason.DELETED),
    (I.STOPPING, WorkloadExited(0), I.STOPPED, Reason.STOPPED),
    (I.STOPPED, ResumeRequested(), I.QUEUED, Reason.QUEUED),
    (I.STOPPED, DeleteRequested(), I.DELETED, Reason.DELETED),
    (I.SUCCEEDED, DeleteRequested(), I.DELETED, Reason.DELETED),
    (I.FAILED, ResumeRequested(), I.QUEUED, Reason.QUEUED),
    (I.FAILED, DeleteRequested(), I.DELETED, Reason.DELETED),
]


def test_every_edge_of_the_transition_table_is_exercised() -> None:
    table_edges = {(src, dst) for src, targets in INSTANCE_TRANSITIONS.items() for dst in targets}
    assert {(src, dst) for src, _, dst, _ in EDGES} == table_edges


@pytest.mark.parametrize(("source", "event", "target", "reason"), EDGES)
def test_each_edge_moves_to_its_status_and_records_an_event(
    source: InstanceStatus, event: LifecycleEvent, target: InstanceStatus, reason: Reason
) -> None:
    result = step(at_status(source, auto_requeue=False), event, NOW)
    assert result.state.status is target
    assert reason in reasons(result)


ILLEGAL: list[tuple[InstanceStatus, LifecycleEvent]] = [
    (I.QUEUED, Reclaimed("od-1")),
    (I.RUNNING, placed(2)),
    (I.INTERRUPTING, Reclaimed("od-1")),
    (I.STOPPING, Reclaimed("od-1")),
    (I.INTERRUPTED, placed(2)),
    (I.RUNNING, ResumeRequested()),
    (I.SUCCEEDED, ResumeRequested()),
    (I.SUCCEEDED, StopRequested()),
    (I.FAILED, StopRequested()),
    (I.DELETED, ResumeRequested()),
    (I.DELETED, placed(2)),
]


@pytest.mark.parametrize(("source", "event"), ILLEGAL)
def test_requests_outside_the_table_raise_illegal_transition_with_a_hint(
    source: InstanceStatus, event: LifecycleEvent
) -> None:
    with pytest.raises(IllegalTransition) as err:
        step(at_status(source), event, NOW)
    assert f"from {source}" in err.value.message
    assert err.value.hint is not None and "it can go to" in err.value.hint


STALE: list[tuple[InstanceStatus, LifecycleEvent]] = [
    (I.QUEUED, WorkloadStarted()),
    (I.QUEUED, WorkloadExited(0)),
    (I.QUEUED, Enqueued()),
    (I.QUEUED, ResumeRequested()),
    (I.RUNNING, WorkloadStarted()),
    (I.RUNNING, VictimReleased("alloc-x")),
    (I.RUNNING, DeadlineCheck()),
    (I.SUCCEEDED, WorkloadExited(0)),
    (I.FAILED, StartFailed("late")),
    (I.INTERRUPTED, DeadlineCheck()),
    (I.STOPPING, StopRequested()),
    (I.STOPPED, StopRequested()),
    (I.DELETED, DeleteRequested()),
    (I.DELETED, CheckpointReported(5)),
    (I.SUCCEEDED, CompletionReported(9)),
]


@pytest.mark.parametrize(("source", "event"), STALE)
def test_late_duplicate_or_stale_reports_change_nothing(
    source: InstanceStatus, event: LifecycleEvent
) -> None:
    state = at_status(source)
    result = step(state, event, NOW)
    assert result.state == state
    assert result.effects == ()


@pytest.mark.parametrize("status", [I.STARTING, I.RUNNING, I.INTERRUPTING, I.STOPPING])
def test_an_instance_holding_gpus_cannot_be_deleted_stop_it_first(status: InstanceStatus) -> None:
    with pytest.raises(Conflict) as err:
        step(at_status(status), DeleteRequested(), NOW)
    assert not isinstance(err.value, IllegalTransition)
    assert "stop it first" in str(err.value)


@pytest.mark.parametrize("status", [I.STARTING, I.RUNNING])
def test_an_on_demand_instance_is_never_preempted(status: InstanceStatus) -> None:
    state = at_status(status, capacity_class=CapacityClass.ON_DEMAND)
    with pytest.raises(Conflict, match="never preempted"):
        step(state, Reclaimed("od-2"), NOW)


@pytest.mark.parametrize(("grace_s", "ok"), [(-1, False), (0, True), (300, True), (301, False)])
def test_grace_period_is_between_0_and_300_seconds(grace_s: int, ok: bool) -> None:
    if ok:
        assert instance(grace_period_s=grace_s).grace_period_s == grace_s
    else:
        with pytest.raises(InvalidRequest, match="between 0 and 300"):
            instance(grace_period_s=grace_s)


def test_new_instance_is_queued_once_with_its_enqueue_time() -> None:
    state = instance()
    assert (state.status, state.enqueued_at) == (I.QUEUED, T0)
    again = step(state, Enqueued(), T0 + 5)
    assert again.state.enqueued_at == T0 and again.effects == ()


def test_start_failure_fails_with_its_reason_and_frees_the_gpus() -> None:
    result = step(at_status(I.STARTING), StartFailed("template axolotl not found"), NOW)
    assert result.state.status is I.FAILED
    assert result.state.failure_reason == "template axolotl not found"
    assert of_type(result, ReleaseAllocation) == [ReleaseAllocation("alloc-1")]
    assert result.state.allocation_id is None


@pytest.mark.parametrize(
    ("completed", "exit_code", "expected"),
    [
        (False, 0, I.SUCCEEDED),
        (False, 1, I.FAILED),
        (False, None, I.FAILED),
        (True, 1, I.SUCCEEDED),  # it said it was done; a crash on the way out is not a failure
    ],
)
def test_without_a_notice_completion_or_exit_zero_is_success(
    completed: bool, exit_code: int | None, expected: InstanceStatus
) -> None:
    state = at_status(I.RUNNING)
    if completed:
        state = step(state, CompletionReported(100), NOW).state
    result = step(state, WorkloadExited(exit_code), NOW + 1)
    assert result.state.status is expected
    assert of_type(result, ReleaseAllocation) == [ReleaseAllocation("alloc-1")]


def test_failed_reason_says_the_exit_code() -> None:
    result = step(at_status(I.RUNNING), WorkloadExited(137), NOW)
    assert result.state.failure_reason == "exited 137"
    failed = [e for e in result.effects if getattr(e, "reason", None) is Reason.FAILED]
    assert failed and failed[0].event_type is EventType.WARNING  # type: ignore[union-attr]


def test_an_exit_seen_before_its_start_counts_as_started_then_exited() -> None:
    result = step(at_status(I.STARTING), WorkloadExited(0), NOW)
    assert result.state.status is I.SUCCEEDED
    assert reasons(result) == [Reason.STARTED, Reason.SUCCEEDED]
    assert result.state.runs[-1].started_at == NOW


def test_placement_waiting_for_victims_starts_only_when_all_have_left() -> None:
    state = instance(capacity_class=CapacityClass.ON_DEMAND)
    waiting = placed(3).__class__("alloc-3", "host-a", (2, 3), frozenset({"v1", "v2"}))
    first = step(state, waiting, NOW)
    assert of_type(first, StartWorkload) == []
    assert "2 reclaimed allocation(s)" in first.effects[0].message  # type: ignore[union-attr]
    second = step(first.state, VictimReleased("v1"), NOW + 5)
    assert second.effects == ()
    assert step(second.state, WorkloadStarted(), NOW + 6).state.status is I.STARTING  # not launched
    third = step(second.state, VictimReleased("v2"), NOW + 9)
    assert of_type(third, StartWorkload) == [
        StartWorkload("inst-1", "alloc-3", "host-a", (2, 3), 0)
    ]


def test_stop_of_a_queued_instance_leaves_the_queue_and_resume_keeps_its_place() -> None:
    state = run(instance(), [(StopRequested(), T0 + 50), (ResumeRequested(), T0 + 9000)])
    assert state.status is I.QUEUED
    assert state.enqueued_at == T0


def test_checkpoint_report_is_recorded_with_a_human_message() -> None:
    result = step(at_status(I.RUNNING), CheckpointReported(4200), NOW)
    assert (result.state.last_checkpoint_step, result.state.last_checkpoint_at) == (4200, NOW)
    assert result.effects[0].message == "checkpoint step 4200 on volume"  # type: ignore[union-attr]


def test_delete_message_says_the_volume_is_kept() -> None:
    result = step(at_status(I.STOPPED), DeleteRequested(), NOW)
    assert "volume is kept" in result.effects[0].message  # type: ignore[union-attr]


def test_every_instance_is_frozen() -> None:
    state: InstanceState = instance()
    with pytest.raises(AttributeError):
        state.status = I.RUNNING  # type: ignore[misc]


# --- property: any sequence of events keeps the instance consistent ------------------------------

# Weighted so that random walks reach every status often (delete is terminal: rare).
_EVENTS = st.sampled_from(
    [
        *[placed(5)] * 4,
        Placed("alloc-w", "host-b", (0, 1), frozenset({"victim"})),
        VictimReleased("victim"),
        *[WorkloadStarted()] * 5,
        StartFailed("boom"),
        *[WorkloadExited(0), WorkloadExited(143)] * 2,
        WorkloadExited(1),
        WorkloadExited(None),
        CompletionReported(7),
        CheckpointReported(42),
        *[Reclaimed("od-1", 10, "least work lost")] * 4,
        StopRequested(),
        *[ResumeRequested()] * 2,
        DeleteRequested(),
        *[DeadlineCheck()] * 2,
        Enqueued(),
    ]
)


@settings(max_examples=300, deadline=None)
@given(
    events=st.lists(st.tuples(_EVENTS, st.integers(0, 400)), max_size=30),
    grace_s=st.integers(0, 300),
    auto_requeue=st.booleans(),
)
def test_any_event_sequence_keeps_the_instance_consistent(
    events: list[tuple[LifecycleEvent, int]], grace_s: int, auto_requeue: bool
) -> None:
    state = instance(grace_period_s=grace_s, auto_requeue=auto_requeue)
    now = T0
    for event, gap in events:
        now += gap
        try:
            result = step(state, event, now)
        except LowcostgpuError:
            continue  # refused requests change nothing (the state is immutable)
        new = result.state
        if new.status is not state.status:
            assert reasons(result), f"{state.status} → {new.status} recorded no event"
        released = of_type(result, ReleaseAllocation)
        assert released in ([], [ReleaseAllocation(state.allocation_id)])  # type: ignore[arg-type]
        assert (new.status in INSTANCE_HOLDS_GPUS) == (new.allocation_id is not None)
        if new.status is I.RUNNING or of_type(result, StartWorkload):
            assert not new.waiting_for, "started before its victims left"
        draining = new.status in (I.INTERRUPTING, I.STOPPING)
        assert (result.wake_at is not None) == draining
        assert new.enqueued_at == T0
        assert new.restart_count == max(0, new.placement_count - 1)
        open_runs = [r for r in new.runs if r.billed_until is None]
        assert len(open_runs) == (1 if new.status is I.RUNNING else 0)
        assert all(r.started_at <= (r.billed_until or now) for r in new.runs)
        state = new

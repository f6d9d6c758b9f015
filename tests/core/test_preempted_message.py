"""The `Preempted` event reads as a message to the customer: what happens to them, when, what is
kept and what comes next — never why this victim, never whose on-demand work it was for."""

from __future__ import annotations

import pytest
from test_lifecycle_support import T0, at_status

from lowcostgpu.core.drain import Placed, Reclaimed
from lowcostgpu.core.effects import EmitEvent
from lowcostgpu.core.lifecycle import CheckpointReported, step
from lowcostgpu.core.node_lifecycle import node_step
from lowcostgpu.core.nodes import NodeState
from lowcostgpu.domain.capacity import CapacityClass, PoolKey
from lowcostgpu.domain.events import Reason, elapsed_words, iso_utc
from lowcostgpu.domain.status import InstanceStatus

NOTICE = T0 + 1000
POLICY = {"name": "fair-least-work-lost", "cost_gpu_s": 420, "victim_terms": {"lost_gpu_s": 300}}
RECLAIM = Reclaimed("i-other", 300, "chosen by fair-least-work-lost: …", "acct-9", POLICY)


def _preempted(effects: tuple[object, ...] | list[object]) -> EmitEvent:
    (event,) = [e for e in effects if isinstance(e, EmitEvent) and e.reason is Reason.PREEMPTED]
    return event


@pytest.mark.parametrize(
    ("kwargs", "checkpoint", "expected"),
    [
        (
            {},
            4200,
            f"reclaimed for on-demand work: SIGTERM now, 5:00 to checkpoint (until "
            f"{iso_utc(NOTICE + 300)}), then stopped; your volume is kept (last checkpoint: step "
            "4200); then it is requeued at its original place and resumes from its last checkpoint",
        ),
        (
            {"grace_period_s": 0},
            None,
            "reclaimed for on-demand work: stopped now (grace period 0 s); your volume is kept "
            "(no checkpoint reported yet); then it is requeued at its original place and resumes "
            "from its last checkpoint",
        ),
        (
            {"auto_requeue": False, "grace_period_s": 30},
            7,
            f"reclaimed for on-demand work: SIGTERM now, 30 s to checkpoint (until "
            f"{iso_utc(NOTICE + 30)}), then stopped; your volume is kept (last checkpoint: step "
            "7); auto-requeue is off: `lowcostgpu resume inst-1` queues it again",
        ),
    ],
)
def test_an_instance_is_told_what_happens_to_it_and_what_comes_next(
    kwargs: dict[str, object], checkpoint: int | None, expected: str
) -> None:
    s = at_status(InstanceStatus.RUNNING, **kwargs)
    if checkpoint is not None:
        s = step(s, CheckpointReported(checkpoint), NOTICE - 60).state
    event = _preempted(step(s, RECLAIM, NOTICE).effects)
    assert event.message == expected


def test_the_policys_reasoning_is_in_the_data_not_in_the_message() -> None:
    event = _preempted(step(at_status(InstanceStatus.RUNNING), RECLAIM, NOTICE).effects)
    assert event.data["policy"] == POLICY and event.data["reason"] == RECLAIM.reason
    assert event.data["for_subject"] is None  # another account's work: not even in the data
    for secret in ("i-other", "acct-9", "fair-least-work-lost", "GPU-s"):
        assert secret not in event.message


def test_a_node_is_told_its_pods_get_sigterm_and_a_replacement_is_queued() -> None:
    pool = PoolKey("eu-west", "h100-sxm")
    pending = NodeState(
        "node-1", "clu-1", "acct-1", pool, 8, CapacityClass.INTERRUPTIBLE, grace_period_s=120
    )
    node = node_step(pending, Placed("alloc-n1", "host-h", range(8)), T0).state
    event = _preempted(node_step(node, RECLAIM, NOTICE).effects)
    assert event.message.startswith(
        "reclaimed for on-demand work: its pods get SIGTERM now, 2:00 to finish (until "
        f"{iso_utc(NOTICE + 120)}), then the node is removed;"
    )
    assert "i-other" not in event.message and event.data["policy"] == POLICY


@pytest.mark.parametrize(
    ("seconds", "words"),
    [
        (0, "0 s"),
        (59, "59 s"),
        (60, "1:00"),
        (3599, "59:59"),
        (3600, "1:00:00"),
        (90061, "25:01:01"),
    ],
)
def test_elapsed_time_is_h_mm_ss_from_an_hour_on(seconds: int, words: str) -> None:
    assert elapsed_words(seconds) == words


@pytest.mark.parametrize(
    ("at", "iso"),
    [
        (0, "1970-01-01T00:00:00Z"),
        (951_782_400, "2000-02-29T00:00:00Z"),
        (1_764_614_400, "2025-12-01T18:40:00Z"),
        (4_102_444_799, "2099-12-31T23:59:59Z"),
    ],
)
def test_absolute_times_in_messages_are_iso_utc(at: int, iso: str) -> None:
    assert iso_utc(at) == iso

"""The lost-work credit rule (`core.credits`): the work since the last reported checkpoint at the
notice, within the billed run, nothing without a report; priced at the interruptible rate."""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

import pytest

from lowcostgpu.adapters.files import load_catalog
from lowcostgpu.core import engine
from lowcostgpu.core.credits import (
    LostWorkCredit,
    lost_work_credit_gpu_s,
    reclaim_credit,
    reclaim_credits,
)
from lowcostgpu.core.engine import EngineState, LaunchSpec
from lowcostgpu.core.lifecycle import CheckpointReported, WorkloadStarted
from lowcostgpu.core.scheduler import SchedulerConfig
from lowcostgpu.core.snapshot import FleetSnapshot
from lowcostgpu.domain.capacity import CapacityClass, Host, PoolKey
from lowcostgpu.domain.events import Reason

POOL = PoolKey("eu-west", "a100-sxm4")
CONFIG = SchedulerConfig(min_runtime_s=0)
T0 = 1_000_000


@pytest.mark.parametrize(
    ("lost_gpu_s", "gpus", "billed_run_s", "reported", "credited"),
    [
        (1680, 2, 840, True, 1680),  # a checkpoint reported in the run: all the loss
        (2, 2, 840, True, 2),  # a checkpoint 1 s before the notice: 1 s per GPU
        (0, 2, 840, True, 0),  # a checkpoint at the notice: nothing lost
        (1680, 2, 840, False, 0),  # never reported one: nothing, whatever the policy estimated
        (2000, 2, 840, True, 1680),  # the loss counts from the placement: the run caps it
        (1682, 2, 841, True, 1682),  # one second more of run, one more of credit
        (1680, 2, 0, True, 0),  # reclaimed in the second it started: nothing billed
        (1680, 2, -5, True, 0),  # a run that ends before it starts is never negative
    ],
)
def test_credit_rule(
    lost_gpu_s: int, gpus: int, billed_run_s: int, reported: bool, credited: int
) -> None:
    got = lost_work_credit_gpu_s(
        lost_gpu_s=lost_gpu_s, gpus=gpus, billed_run_s=billed_run_s, reported=reported
    )
    assert got == credited


def _running(gpus: int = 2, checkpoint_at: int | None = None) -> EngineState:
    """One interruptible instance `i` started at T0 (placed at T0 - 30), optionally with a
    checkpoint reported at `checkpoint_at`."""
    state = EngineState(FleetSnapshot.build([Host("h1", POOL, 8)]))
    spec = LaunchSpec("i", POOL, gpus, CapacityClass.INTERRUPTIBLE, "acme", True, 300)
    state = engine.launch(state, spec, T0 - 30, CONFIG).state
    state = engine.report(state, "i", WorkloadStarted(), T0, CONFIG).state
    if checkpoint_at is not None:
        state = engine.report(state, "i", CheckpointReported(7), checkpoint_at, CONFIG).state
    return state


def _reclaim(state: EngineState, at: int) -> list[LostWorkCredit]:
    od = LaunchSpec("od", POOL, 8, CapacityClass.ON_DEMAND, "other", True, 300)
    step = engine.launch(state, od, at, CONFIG)
    return reclaim_credits(step.effects, step.state.instances)


@pytest.mark.parametrize(
    ("checkpoint_at", "notice_at", "gpu_s", "since_checkpoint"),
    [
        (T0 + 60, T0 + 900, 2 * 840, True),  # 14 min since the checkpoint, on 2 GPUs
        (T0 + 899, T0 + 900, 2 * 1, True),  # a checkpoint just before the notice
        (T0 + 900, T0 + 900, None, False),  # a checkpoint at the notice: nothing to credit
        (None, T0 + 900, None, False),  # none reported: no credit
    ],
)
def test_reclaim_through_the_engine_credits_the_work_since_the_reported_checkpoint(
    checkpoint_at: int | None, notice_at: int, gpu_s: int | None, since_checkpoint: bool
) -> None:
    credits = _reclaim(_running(checkpoint_at=checkpoint_at), notice_at)
    if gpu_s is None:
        assert credits == []
        return
    (credit,) = credits
    assert (credit.instance_id, credit.account_id, credit.gpus) == ("i", "acme", 2)
    assert (credit.gpu_s, credit.notice_at, credit.since_checkpoint) == (
        gpu_s,
        notice_at,
        since_checkpoint,
    )
    assert credit.key == f"credit:lost-work:i:{credit.allocation_id}"


def test_a_checkpoint_from_before_the_run_credits_the_run_not_the_wait_before_it() -> None:
    state = _running(checkpoint_at=T0 - 10)  # reported while it was starting (placed T0 - 30)
    (credit,) = _reclaim(state, T0 + 600)
    assert credit.gpu_s == 2 * 600  # from the run's start, not from the checkpoint
    assert not credit.since_checkpoint
    assert "2 GPU × 0:10:00 since the run's start" in credit.memo


def test_a_reclaim_before_the_workload_started_credits_nothing() -> None:
    state = EngineState(FleetSnapshot.build([Host("h1", POOL, 8)]))
    spec = LaunchSpec("i", POOL, 8, CapacityClass.INTERRUPTIBLE, "acme", True, 300)
    state = engine.launch(state, spec, T0, CONFIG).state
    state = engine.report(state, "i", CheckpointReported(1), T0 + 5, CONFIG).state
    assert _reclaim(state, T0 + 60) == []


def test_the_credit_is_priced_at_the_interruptible_rate_and_says_why() -> None:
    (credit,) = _reclaim(_running(checkpoint_at=T0 + 60), T0 + 900)
    catalog = load_catalog()
    rate = Fraction(catalog.gpu("a100-sxm4").interruptible_per_gpu_hour.amount)
    assert credit.exact_usd(catalog) == rate * 2 * 840 / 3600
    assert credit.memo == (
        "credit: work lost at reclaim of i (2 GPU × 0:14:00 since last checkpoint)"
    )


def test_only_an_instance_reclaim_is_credited() -> None:
    state = _running(checkpoint_at=T0 + 60)
    od = LaunchSpec("od", POOL, 8, CapacityClass.ON_DEMAND, "other", True, 300)
    step = engine.launch(state, od, T0 + 900, CONFIG)
    (notice,) = [e for e in step.effects if getattr(e, "reason", None) is Reason.PREEMPTED]
    inst = step.state.instances["i"]
    assert reclaim_credit(notice, inst) is not None
    assert reclaim_credit(replace(notice, object_kind="node"), inst) is None
    assert reclaim_credit(replace(notice, reason=Reason.STOPPING), inst) is None

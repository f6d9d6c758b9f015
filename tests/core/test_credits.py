"""The lost-work credit rule (`core.credits`): decided when the drained run ends, the billed
GPU-time from the last reported checkpoint to the notice, nothing when it saved in its grace or
never reported, within the billed run; priced at the interruptible rate."""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

import pytest

from lowcostgpu.adapters.files import load_catalog
from lowcostgpu.core import engine
from lowcostgpu.core.credits import (
    LostWorkCredit,
    drain_credit,
    drain_credits,
    lost_work_credit_gpu_s,
)
from lowcostgpu.core.engine import EngineState, EngineStep, LaunchSpec
from lowcostgpu.core.lifecycle import CheckpointReported, WorkloadExited, WorkloadStarted
from lowcostgpu.core.scheduler import SchedulerConfig
from lowcostgpu.core.snapshot import FleetSnapshot
from lowcostgpu.domain.capacity import CapacityClass, Host, PoolKey
from lowcostgpu.domain.events import Reason

POOL = PoolKey("eu-west", "a100-sxm4")
CONFIG = SchedulerConfig(min_runtime_s=0)
T0 = 1_000_000
NOTICE = T0 + 900
GRACE_S = 300


@pytest.mark.parametrize(
    ("checkpoint_at", "credited"),
    [
        (T0 + 60, 2 * 840),  # a checkpoint in the run: the GPU-time since it
        (NOTICE - 1, 2 * 1),  # a checkpoint 1 s before the notice: 1 s per GPU
        (NOTICE, 0),  # a checkpoint at the notice: nothing lost
        (NOTICE + 30, 0),  # saved in its grace: nothing lost
        (None, 0),  # never reported one: nothing, whatever the policy estimated
        (T0, 2 * 900),  # a checkpoint at the run's start: the whole run
        (T0 - 1, 2 * 900),  # one before the run's start: the run caps it
        (T0 - 5000, 2 * 900),  # one from an earlier run: still the run, never the wait before it
    ],
)
def test_credit_rule(checkpoint_at: int | None, credited: int) -> None:
    got = lost_work_credit_gpu_s(
        gpus=2, run_started_at=T0, notice_at=NOTICE, last_checkpoint_at=checkpoint_at
    )
    assert got == credited


def test_a_run_that_ends_before_it_starts_is_never_credited_a_negative_amount() -> None:
    got = lost_work_credit_gpu_s(
        gpus=2, run_started_at=NOTICE + 5, notice_at=NOTICE, last_checkpoint_at=T0
    )
    assert got == 0


def _running(gpus: int = 2, checkpoint_at: int | None = None) -> EngineState:
    """One interruptible instance `i` started at T0 (placed at T0 - 30), optionally with a
    checkpoint reported at `checkpoint_at`."""
    state = EngineState(FleetSnapshot.build([Host("h1", POOL, 8)]))
    spec = LaunchSpec("i", POOL, gpus, CapacityClass.INTERRUPTIBLE, "acme", True, GRACE_S)
    state = engine.launch(state, spec, T0 - 30, CONFIG).state
    state = engine.report(state, "i", WorkloadStarted(), T0, CONFIG).state
    if checkpoint_at is not None:
        state = engine.report(state, "i", CheckpointReported(7), checkpoint_at, CONFIG).state
    return state


def _reclaim(state: EngineState, at: int) -> EngineStep:
    od = LaunchSpec("od", POOL, 8, CapacityClass.ON_DEMAND, "other", True, 300)
    return engine.launch(state, od, at, CONFIG)


def _credits(step: EngineStep) -> list[LostWorkCredit]:
    return drain_credits(step.effects, step.state.instances)


def _drained(
    checkpoint_at: int | None, *, saved_in_grace_at: int | None = None, exit_at: int | None = None
) -> tuple[EngineStep, EngineStep]:
    """Reclaim `i` at NOTICE, optionally report a save in the grace, then end its run: by its
    exit at `exit_at`, or by the kill at the deadline. Returns (the reclaim's step, the end's)."""
    reclaimed = _reclaim(_running(checkpoint_at=checkpoint_at), NOTICE)
    state = reclaimed.state
    if saved_in_grace_at is not None:
        state = engine.report(state, "i", CheckpointReported(8), saved_in_grace_at, CONFIG).state
    if exit_at is not None:
        return reclaimed, engine.report(state, "i", WorkloadExited(143), exit_at, CONFIG)
    return reclaimed, engine.tick(state, NOTICE + GRACE_S, CONFIG)


@pytest.mark.parametrize(
    ("checkpoint_at", "saved_in_grace_at", "exit_at", "gpu_s"),
    [
        (T0 + 60, None, None, 2 * 840),  # killed at the deadline without a save: 14 min lost
        (T0 + 60, NOTICE + 20, NOTICE + 25, None),  # saved in its grace and left: nothing lost
        (T0 + 60, NOTICE + 20, None, None),  # saved in its grace, then killed: nothing lost
        (T0 + 60, NOTICE, NOTICE + 1, None),  # saved in the notice's second: nothing lost
        (NOTICE - 1, None, None, 2 * 1),  # a checkpoint 1 s before the notice, then killed
        (NOTICE - 1, None, NOTICE + 5, 2 * 1),  # ... or left without saving
        (None, None, None, None),  # none reported, killed: no credit
        (None, NOTICE + 20, NOTICE + 25, None),  # its first report in the grace: nothing lost
    ],
)
def test_the_credit_is_decided_when_the_drained_run_ends_from_what_was_reported(
    checkpoint_at: int | None, saved_in_grace_at: int | None, exit_at: int | None, gpu_s: int | None
) -> None:
    reclaimed, ended = _drained(checkpoint_at, saved_in_grace_at=saved_in_grace_at, exit_at=exit_at)
    assert _credits(reclaimed) == []  # nothing is decided at the notice
    assert Reason.INTERRUPTED in [getattr(e, "reason", None) for e in ended.effects]
    credits = _credits(ended)
    if gpu_s is None:
        assert credits == []
        return
    (credit,) = credits
    assert (credit.instance_id, credit.account_id, credit.gpus) == ("i", "acme", 2)
    end_at = NOTICE + GRACE_S if exit_at is None else exit_at
    assert (credit.gpu_s, credit.notice_at, credit.decided_at) == (gpu_s, NOTICE, end_at)
    assert credit.since_checkpoint
    assert credit.key == f"credit:lost-work:i:{credit.allocation_id}"
    assert credit.allocation_id == reclaimed.state.instances["i"].runs[-1].allocation_id


def test_a_checkpoint_from_before_the_run_credits_the_run_not_the_wait_before_it() -> None:
    state = _running(checkpoint_at=T0 - 10)  # reported while it was starting (placed T0 - 30)
    step = engine.tick(_reclaim(state, T0 + 600).state, T0 + 600 + GRACE_S, CONFIG)
    (credit,) = _credits(step)
    assert credit.gpu_s == 2 * 600  # from the run's start, not from the checkpoint
    assert not credit.since_checkpoint
    assert "2 GPU × 0:10:00 since the run's start" in credit.memo


def test_a_reclaim_before_the_workload_started_credits_nothing() -> None:
    state = EngineState(FleetSnapshot.build([Host("h1", POOL, 8)]))
    spec = LaunchSpec("i", POOL, 8, CapacityClass.INTERRUPTIBLE, "acme", True, GRACE_S)
    state = engine.launch(state, spec, T0, CONFIG).state
    state = engine.report(state, "i", CheckpointReported(1), T0 + 5, CONFIG).state
    reclaimed = _reclaim(state, T0 + 60)
    ended = engine.report(reclaimed.state, "i", WorkloadExited(143), T0 + 70, CONFIG)
    assert Reason.INTERRUPTED in [getattr(e, "reason", None) for e in ended.effects]
    assert _credits(reclaimed) == [] and _credits(ended) == []


def test_the_credit_is_priced_at_the_interruptible_rate_and_says_why() -> None:
    _, ended = _drained(T0 + 60)
    (credit,) = _credits(ended)
    catalog = load_catalog()
    rate = Fraction(catalog.gpu("a100-sxm4").interruptible_per_gpu_hour.amount)
    assert credit.exact_usd(catalog) == rate * 2 * 840 / 3600
    assert credit.memo == (
        "credit: work lost at reclaim of i (2 GPU × 0:14:00 since last checkpoint)"
    )


def test_only_the_end_of_an_instance_drain_is_credited() -> None:
    _, ended = _drained(T0 + 60)
    (end,) = [e for e in ended.effects if getattr(e, "reason", None) is Reason.INTERRUPTED]
    inst = ended.state.instances["i"]
    assert drain_credit(end, inst) is not None
    assert drain_credit(replace(end, object_kind="node"), inst) is None
    assert drain_credit(replace(end, reason=Reason.STOPPED), inst) is None
    assert drain_credit(replace(end, reason=Reason.PREEMPTED), inst) is None


def test_a_drain_of_another_allocation_never_credits_the_last_billed_run_again() -> None:
    # A later placement reclaimed before its workload started ends a drain of a new allocation,
    # the last billed run being an earlier one: that run was credited at its own end.
    _, ended = _drained(T0 + 60)
    (end,) = [e for e in ended.effects if getattr(e, "reason", None) is Reason.INTERRUPTED]
    inst = ended.state.instances["i"]
    later = {**end.data, "allocation_id": "i@later", "notice_at": NOTICE + 999}
    assert drain_credit(replace(end, data=later), inst) is None
    assert drain_credit(replace(end, data={**end.data, "notice_at": NOTICE + 999}), inst) is None
    assert drain_credit(replace(end, data={**end.data, "notice_at": None}), inst) is None

"""The simulated workload's progress arithmetic."""

from __future__ import annotations

import pytest
from sim_builders import job, run

from lowcostgpu.domain.capacity import CapacityClass
from lowcostgpu.sim.workload import Next, Workload


@pytest.mark.parametrize(
    ("now", "done", "saved"),
    [(0, 0, 0), (99, 99, 0), (100, 100, 0), (105, 100, 0), (110, 100, 100), (150, 140, 100)],
)
def test_progress_alternates_work_and_saves(now: int, done: int, saved: int) -> None:
    wl = Workload(job("j", 0, 1000, interval=100, cost=10))
    wl.start("j@0", 0)
    assert wl.progress_at(now) == (done, saved)


def test_the_next_event_is_a_save_until_the_last_stretch_then_the_finish() -> None:
    wl = Workload(job("j", 0, 250, interval=100, cost=10))
    wl.start("j@0", 0)
    assert wl.next_event() == (110, Next.CHECKPOINT)
    wl.save_periodic()
    assert wl.next_event() == (220, Next.CHECKPOINT)
    wl.save_periodic()
    assert wl.next_event() == (250 + 20, Next.FINISH)  # no save at the very end


def test_a_job_that_never_checkpoints_finishes_after_its_work() -> None:
    wl = Workload(job("j", 0, 250))
    wl.start("j@5", 5)
    assert wl.next_event() == (255, Next.FINISH)


# --- What a SIGTERM does, per habit ---------------------------------------------------------------

GRACE = 300


@pytest.mark.parametrize(
    ("interval", "cost", "exits_at", "saved_after", "lost_after"),
    [
        (None, 0, 500, 0, 500),  # never saves: exits at once, restarts from zero
        (None, 30, 530, 500, 0),  # saves only at a notice: one save of all it did, in 30 s
        (None, 300, 800, 500, 0),  # a save that takes the whole grace still fits
        (None, 301, None, 0, 500),  # 1 s too slow: SIGKILLed at the deadline, loses its run
        (100, 10, 510, 460, 0),  # periodic saver (4 saves by 440 s): a last save at the notice
        (150, 310, None, 150, 40),  # periodic, save too slow: keeps its last periodic save
    ],
)
def test_a_sigterm_saves_what_the_habit_saves_and_loses_the_rest(
    interval: int | None,
    cost: int,
    exits_at: int | None,
    saved_after: int,
    lost_after: int,
) -> None:
    wl = Workload(job("j", 0, 5000, interval=interval, cost=cost))
    wl.start("j@0", 0)
    if interval is not None:
        for _ in range(500 // (interval + cost)):
            wl.save_periodic()
    assert wl.lost_if_noticed_s(500, GRACE) == lost_after  # what the clairvoyant yardstick sees
    assert wl.notice(500, GRACE) == exits_at
    wl.end_run(exits_at if exits_at is not None else 500 + GRACE)
    assert (wl.saved_s, wl.lost_s) == (saved_after, lost_after)


def test_a_notice_saver_never_saves_while_it_runs_and_resumes_from_its_notice_save() -> None:
    wl = Workload(job("j", 0, 2000, cost=30))
    wl.start("j@0", 0)
    assert wl.next_event() == (2000, Next.FINISH)  # no periodic save on the way
    assert wl.progress_at(1200) == (1200, 0)
    assert wl.notice(1200, GRACE) == 1230
    wl.end_run(1230)
    wl.start("j@5000", 5000)  # requeued, placed again
    assert wl.progress_at(5000) == (1200, 1200)
    assert wl.next_event() == (5800, Next.FINISH)  # only the 800 s left


def test_a_notice_saver_reports_its_save_with_its_time_and_claim() -> None:
    """On one GPU, an on-demand job reclaims it; it saves in 30 s, reports the checkpoint with
    save_s 30 and saves_on_notice, resumes from it and loses nothing."""
    saver = job("saver", 0, 4000, cost=30)
    result = run([saver, job("od", 1000, 600, cls=CapacityClass.ON_DEMAND)], host_gpus=(1,))
    wl, inst = result.workloads["saver"], result.instances["saver"]
    assert wl.interruptions == [1000] and wl.lost_s == 0 and wl.finished_at is not None
    assert (inst.last_checkpoint_step, inst.save_s_reports, inst.saves_on_notice) == (
        1000,
        (30,),
        True,
    )


@pytest.mark.parametrize(("interval", "cost", "claim"), [(600, 30, True), (3600, 400, False)])
def test_a_periodic_saver_claims_a_notice_save_only_when_its_save_fits_the_grace(
    interval: int, cost: int, claim: bool
) -> None:
    result = run([job("p", 0, 2 * interval, interval=interval, cost=cost)], host_gpus=(1,))
    inst = result.instances["p"]
    assert (inst.save_s_reports, inst.saves_on_notice) == ((cost,), claim)

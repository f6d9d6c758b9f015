"""The simulated workload's progress arithmetic."""

from __future__ import annotations

import pytest
from sim_builders import job

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

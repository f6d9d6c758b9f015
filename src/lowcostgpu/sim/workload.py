"""A simulated workload: it works, checkpoints, exits — and loses work when it is interrupted.

Progress is measured in seconds of useful work. A run that starts with `base_s` seconds already
saved alternates `checkpoint_interval_s` seconds of work with a save of `checkpoint_cost_s`
seconds (no progress while saving); the save is reported to the engine when it is written. No
save is made at the very end: the job simply exits 0 once its work is done.

After SIGTERM a workload stops working and exits at its own pace within the grace period:

- one that checkpoints writes a last checkpoint (it takes `checkpoint_cost_s`), reports it and
  exits — if that fits in the grace period; if it does not, it is SIGKILLed at the deadline and
  keeps only its last periodic checkpoint;
- one that saves only at a notice (`checkpoint_interval_s` None, `checkpoint_cost_s` > 0) never
  saves while it runs; at SIGTERM it writes one checkpoint of everything done (it takes
  `checkpoint_cost_s`), reports it and exits — if that fits in the grace period, and its restart
  resumes from there; if it does not, it is SIGKILLed at the deadline and loses its whole run;
- one that never checkpoints (interval None, cost 0) exits at once: it has nothing to save, and
  restarts from zero.

Every checkpoint it reports says what the SDK would (`CheckpointReported`): `save_s` is
`checkpoint_cost_s`, and `saves_on_notice` whether its save at a notice fits in the grace period
(true for the 10-min/30 s habit and for a notice saver whose save fits, false for the hourly/400 s
habit).

Whatever was done since the last saved checkpoint is lost; a requeued job redoes it, so its
total running time grows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from lowcostgpu.sim.jobs import Job


class Next(Enum):
    CHECKPOINT = "checkpoint"
    FINISH = "finish"


@dataclass(slots=True)
class RunState:
    allocation_id: str
    started_at: int
    base_s: int  # work saved when this run started (or at its last early save)
    # When the checkpoint cycle of `base_s` began: the start, or the end of an early save.
    cycle_from: int | None = None

    @property
    def cycle_start(self) -> int:
        return self.started_at if self.cycle_from is None else self.cycle_from


@dataclass(slots=True)
class Workload:
    job: Job
    saved_s: int = 0  # work saved by the last checkpoint (what a restart resumes from)
    run: RunState | None = None
    noticed_at: int | None = None
    # What happened to it, for the report.
    submitted_at: int = 0
    first_start: int | None = None
    launched_at: int | None = None  # on-demand: when the request was accepted
    finished_at: int | None = None
    run_s: int = 0  # seconds on GPUs, all runs together (redone work included)
    interruptions: list[int] = field(default_factory=list)  # notice times
    # Per interruption followed by a restart: seconds from the notice to the next start (the
    # drain and the wait in the queue, during which the job makes no progress).
    waits_after_interruption_s: list[int] = field(default_factory=list)
    run_before_interruption_s: list[int] = field(default_factory=list)
    lost_s: int = 0  # seconds of work lost by interruptions
    checkpoints_written: int = 0

    @property
    def cycle_s(self) -> int | None:
        interval = self.job.checkpoint_interval_s
        return None if interval is None else interval + self.job.checkpoint_cost_s

    def start(self, allocation_id: str, now: int) -> None:
        self.run = RunState(allocation_id, now, self.saved_s)
        self.noticed_at = None
        if len(self.waits_after_interruption_s) < len(self.interruptions):
            self.waits_after_interruption_s.append(now - self.interruptions[-1])
        if self.first_start is None:
            self.first_start = now

    def is_current(self, allocation_id: str) -> bool:
        return self.run is not None and self.run.allocation_id == allocation_id

    def progress_at(self, now: int) -> tuple[int, int]:
        """(work done, work saved) of the current run at `now`."""
        assert self.run is not None
        elapsed = max(0, now - self.run.cycle_start)
        base, interval, cycle = self.run.base_s, self.job.checkpoint_interval_s, self.cycle_s
        if interval is None or cycle is None:
            done, saved = base + elapsed, base
        else:
            full, rest = divmod(elapsed, cycle)
            done, saved = base + full * interval + min(rest, interval), base + full * interval
        return min(done, self.job.work_s), min(saved, self.job.work_s)

    def next_event(self) -> tuple[int, Next]:
        """When the current run next saves a checkpoint or finishes, whichever comes first."""
        assert self.run is not None
        remaining = self.job.work_s - self.run.base_s
        interval, cycle = self.job.checkpoint_interval_s, self.cycle_s
        start = self.run.cycle_start
        if interval is None or cycle is None:
            return start + remaining, Next.FINISH
        saves = (remaining - 1) // interval  # saves made before the work is done
        finish = start + remaining + saves * self.job.checkpoint_cost_s
        written = self.checkpoints_in_run()
        if written < saves:
            return start + (written + 1) * cycle, Next.CHECKPOINT
        return finish, Next.FINISH

    def checkpoints_in_run(self) -> int:
        assert self.run is not None and self.job.checkpoint_interval_s is not None
        return (self.saved_s - self.run.base_s) // self.job.checkpoint_interval_s

    def save_periodic(self) -> None:
        assert self.run is not None and self.job.checkpoint_interval_s is not None
        self.saved_s += self.job.checkpoint_interval_s
        self.checkpoints_written += 1

    @property
    def saves(self) -> bool:
        """It writes checkpoints at all: periodically, or only at a notice (a save has a cost)."""
        return self.job.checkpoints or self.job.checkpoint_cost_s > 0

    def save_early(self, now: int) -> int | None:
        """A preemption-risk warning (`core.risk`, `sim.risk_figures`): save everything done so
        far, once, now. The save takes `checkpoint_cost_s` (no progress meanwhile) and the
        checkpoint cycle starts again after it. Returns when the save is written (to report it
        then); None when nothing is saved: a job that never checkpoints, one noticed already,
        or one with nothing new since its last save. A notice during the save finds it done."""
        if self.run is None or self.noticed_at is not None or not self.job.checkpoints:
            return None
        done, saved = self.progress_at(now)
        if done <= max(saved, self.saved_s):
            return None
        written_at = now + self.job.checkpoint_cost_s
        self.run.base_s, self.run.cycle_from = done, written_at
        self.saved_s = done
        self.checkpoints_written += 1
        return written_at

    def saves_at_notice(self, grace_s: int) -> bool:
        """Whether a SIGTERM makes it write a checkpoint of everything done, within the grace."""
        return self.saves and self.job.checkpoint_cost_s <= grace_s

    def lost_if_noticed_s(self, now: int, grace_s: int) -> int:
        """The work a SIGTERM at `now` would lose (per GPU): what `notice` and `end_run` would
        count. Only the simulator knows it; `sim.clairvoyant` chooses victims by it."""
        if self.run is None or self.noticed_at is not None:
            return 0
        if self.saves_at_notice(grace_s):
            return 0
        done, saved = self.progress_at(now)
        return max(0, done - max(self.saved_s, saved))

    def notice(self, now: int, grace_s: int) -> int | None:
        """SIGTERM: stop working. Returns when it exits by itself (None: it will be killed)."""
        assert self.run is not None
        self.noticed_at = now
        self.interruptions.append(now)
        self.run_before_interruption_s.append(now - self.run.started_at)
        done, saved = self.progress_at(now)
        self.saved_s = max(self.saved_s, saved)
        if not self.saves:
            return now
        if self.saves_at_notice(grace_s):
            self.saved_s = done  # the last checkpoint holds everything done so far
            return now + self.job.checkpoint_cost_s
        return None  # its save does not fit: SIGKILL at the deadline

    def end_run(self, now: int) -> None:
        """The run is over (exit or SIGKILL): account its time and the work it lost."""
        assert self.run is not None
        stopped = self.noticed_at if self.noticed_at is not None else now
        done, _ = self.progress_at(stopped)
        self.lost_s += max(0, done - self.saved_s)
        self.run_s += now - self.run.started_at
        self.run = None

    def finish(self, now: int) -> None:
        assert self.run is not None
        self.saved_s = self.job.work_s
        self.run_s += now - self.run.started_at
        self.run = None
        self.finished_at = now

    def useful_s(self, now: int) -> int:
        """Work done that is kept: saved, plus what the current run has done so far."""
        if self.run is None or self.noticed_at is not None:
            return self.saved_s
        done, _ = self.progress_at(now)
        return max(done, self.saved_s)

"""Preemption-risk warnings in the simulator: what a warned workload does, and how good the
warnings were.

The engine warns the instances a replay of the recent on-demand demand would reclaim
(`core.risk`, a `PreemptionRisk` event). A simulated workload that checkpoints saves once at the
warning (`Workload.save_early`: everything done so far, in `checkpoint_cost_s`), as the SDK's
`StopNotice.early_save_due` makes a real one do, when the save is worth it
(`worth_saving_early`: not for a job that saves at the notice anyway, nor for one whose unsaved
work is small against the save's cost); `save_when_warned=False` keeps the warnings but
not the saves (to measure the warnings alone).

The figures (`risk_figures`), over the run:

- `precision_within_{5,15,60}_min`: of the warnings, the share whose instance was reclaimed
  (had its notice) within N minutes after the warning. Advice, not a promise: a warned instance
  that the pool's recovery spared counts against it.
- `recall`: of the interruptions, the share whose run had been warned before its notice;
  `lead_time_p50_s`/`_p10_s`: notice − the run's latest warning before it, over those warned.
- `early_saves`, `early_save_gpu_hours`: the saves the warnings caused and the GPU time they
  took (`checkpoint_cost_s` × GPUs each): what the warnings cost the workloads.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from lowcostgpu.sim.workload import Workload

PRECISION_WINDOWS_MIN = (5, 15, 60)
HOUR = 3600
# A warned workload saves early only when what a reclaim would cost it now is at least this many
# times the save's own cost (one that saves at the notice loses nothing anyway, and does not).
# Most warnings do not come true within the hour (precision_within_60_min 0.2–0.3), so saving at
# every warning costs more GPU time than it protects; measured (docs/simulation.md, "Warnings"),
# 1, 2 and 3 all beat saving always, and 2 lost least on both traces.
EARLY_SAVE_PAYBACK = 2


@dataclass(slots=True)
class WarningLog:
    """The warnings a run gave, in order, and the early saves they caused."""

    save_when_warned: bool = True
    given: list[tuple[str, int]] = field(default_factory=list)  # (job id, at)
    early_saves: int = 0
    early_save_gpu_s: int = 0

    def warned(self, wl: Workload, now: int, grace_s: int) -> int | None:
        """`wl` was warned at `now`: log it and, if warned workloads save and the save is worth
        it (`worth_saving_early`), save early. Returns when that save is written (the runner
        reports the checkpoint then), else None."""
        self.given.append((wl.job.id, now))
        if not self.save_when_warned or not worth_saving_early(wl, now, grace_s):
            return None
        written_at = wl.save_early(now)
        if written_at is not None:
            self.early_saves += 1
            self.early_save_gpu_s += wl.job.checkpoint_cost_s * wl.job.total_gpus
        return written_at


def worth_saving_early(wl: Workload, now: int, grace_s: int) -> bool:
    """Whether an early save protects at least `EARLY_SAVE_PAYBACK` times what it costs: the
    work a notice now would lose (0 for a job that saves within the grace period) against the
    save's time. A job that never checkpoints has no save to make."""
    cost_s = max(1, wl.job.checkpoint_cost_s)
    return wl.job.checkpoints and wl.lost_if_noticed_s(now, grace_s) >= EARLY_SAVE_PAYBACK * cost_s


def risk_figures(
    log: WarningLog,
    workloads: Mapping[str, Workload],
    percentile: Callable[[list[int], float], int | None],
) -> dict[str, Any]:
    """Precision, recall and lead time of the warnings (the module's docstring defines them).
    O((warnings + interruptions) · log warnings per job)."""
    by_job: dict[str, list[int]] = defaultdict(list)
    for job_id, at in log.given:
        by_job[job_id].append(at)
    notices = {j: sorted(w.interruptions) for j, w in workloads.items() if w.interruptions}
    figures: dict[str, Any] = {"warnings": len(log.given), "warned_jobs": len(by_job)}
    for minutes in PRECISION_WINDOWS_MIN:
        hits = sum(
            _reclaimed_within(notices.get(job_id, []), at, minutes * 60) for job_id, at in log.given
        )
        figures[f"precision_within_{minutes}_min"] = _share(hits, len(log.given))
    leads: list[int] = []
    interruptions = 0
    for job_id, times in notices.items():
        runs = workloads[job_id].run_before_interruption_s
        warned = sorted(by_job.get(job_id, []))
        for notice_at, ran_s in zip(times, runs, strict=False):
            interruptions += 1
            k = bisect_left(warned, notice_at)  # the warnings before the notice
            if k and warned[k - 1] >= notice_at - ran_s:  # ... in this run
                leads.append(notice_at - warned[k - 1])
    figures["recall"] = _share(len(leads), interruptions)
    figures["lead_time_p50_s"] = percentile(leads, 50)
    figures["lead_time_p10_s"] = percentile(leads, 10)
    figures["early_saves"] = log.early_saves
    figures["early_save_gpu_hours"] = round(log.early_save_gpu_s / HOUR, 3)
    return figures


def _reclaimed_within(notices: list[int], at: int, window_s: int) -> bool:
    k = bisect_right(notices, at - 1)  # the first notice at or after the warning
    return k < len(notices) and notices[k] <= at + window_s


def _share(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None

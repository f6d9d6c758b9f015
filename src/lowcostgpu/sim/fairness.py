"""Fairness figures of one run (issue 8): who gets interrupted, per hour of running.

- `interruptions_per_job_running_hour_mean/p99/max`: per interruptible job that ran, its
  interruptions divided by its hours on GPUs (all runs together).
- `jain_index_interruptions_per_running_hour`: Jain's fairness index (Σx)² / (n·Σx²) of those
  rates: 1 when every job is interrupted at the same rate, 1/n when one job takes them all.
- `checkpointer_penalty`: interruptions per running hour (summed over the group) of jobs that
  checkpoint every 10 minutes or more often, divided by that of jobs that never checkpoint. 1 is
  fair; above 1 checkpointing is punished. None when the second group was never interrupted.
- `reinterrupted_within_min_runtime`: interruptions of a restarted run (one that follows an
  interruption) before it had run `min_runtime_s` — the minimum runtime between interruptions.
- The hiding experiment (`hiding_gain`) compares two runs and lives in `sim.command`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from lowcostgpu.sim.workload import Workload

HOUR = 3600
FREQUENT_CHECKPOINT_S = 600


def group_rate(wls: Iterable[Workload]) -> float | None:
    """Interruptions per running hour of a group, summed (long runs weigh more)."""
    group = list(wls)
    hours = sum(w.run_s for w in group) / HOUR
    return sum(len(w.interruptions) for w in group) / hours if hours else None


def jain_index(values: list[float]) -> float | None:
    """(Σx)² / (n·Σx²); 1.0 when all are equal (all zero included), None for no values."""
    if not values:
        return None
    squares = sum(v * v for v in values)
    return 1.0 if squares == 0 else sum(values) ** 2 / (len(values) * squares)


def _nearest_rank(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[int(max(1, -(-len(ordered) * q // 100))) - 1]


def frequent_checkpointers(wls: Iterable[Workload]) -> list[Workload]:
    return [
        w
        for w in wls
        if w.job.checkpoint_interval_s is not None
        and w.job.checkpoint_interval_s <= FREQUENT_CHECKPOINT_S
    ]


def fairness_figures(ir: list[Workload], min_runtime_s: int) -> dict[str, Any]:
    ran = [w for w in ir if w.run_s > 0]
    rates = [len(w.interruptions) * HOUR / w.run_s for w in ran]
    frequent = group_rate(frequent_checkpointers(ran))
    never = group_rate(w for w in ran if w.job.checkpoint_interval_s is None)
    penalty = None if frequent is None or not never else frequent / never
    again = sum(1 for w in ir for gap in w.run_before_interruption_s[1:] if gap < min_runtime_s)
    return {
        "interruptions_per_job_running_hour_mean": _round(sum(rates) / len(rates))
        if rates
        else None,
        "interruptions_per_job_running_hour_p99": _round(_nearest_rank(rates, 99)),
        "interruptions_per_job_running_hour_max": _round(max(rates, default=None)),
        "jain_index_interruptions_per_running_hour": _round(jain_index(rates)),
        "interruptions_per_running_hour_frequent_checkpointers": _round(frequent),
        "interruptions_per_running_hour_never_checkpoint": _round(never),
        "checkpointer_penalty": _round(penalty),
        "reinterrupted_within_min_runtime": again,
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 5)

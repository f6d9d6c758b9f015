"""Fairness figures of one run (issue 8): who gets interrupted, per hour of running.

- `interruptions_per_job_running_hour_mean/p99/max`: per interruptible job that ran, its
  interruptions divided by its hours on GPUs (all runs together).
- `jain_index_interruptions_per_running_hour`: Jain's fairness index (Σx)² / (n·Σx²) of those
  rates: 1 when every job is interrupted at the same rate, 1/n when one job takes them all.
- `checkpointer_penalty`: interruptions per running hour (summed over the group) of jobs that
  checkpoint every 10 minutes or more often, divided by that of jobs that never checkpoint. 1 is
  fair; above 1 checkpointing is punished. None when the second group was never interrupted.
- `checkpointer_cost_ratio` (issue 21): what interruptions *cost* frequent checkpointers per
  hour of running — work lost and redone plus the time from each notice to the restart (drain and
  queue) — divided by the same for jobs that never checkpoint. The penalty above counts an
  interruption the same whether it costs a job nothing (a checkpointer that saves at the notice
  and restarts at once) or its whole run; this measure asks what users care about: does
  checkpointing ever cost a job more than not checkpointing? 1 is parity; ≤ 1.2 is the goal. None
  when the second group's interruptions cost nothing. Waits of jobs not restarted by the end of
  the run are not counted.
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


def group_cost_rate(wls: Iterable[Workload]) -> float | None:
    """Seconds that interruptions cost a group (work lost + notice-to-restart waits) per hour of
    running, summed over the group."""
    group = list(wls)
    hours = sum(w.run_s for w in group) / HOUR
    cost = sum(w.lost_s + sum(w.waits_after_interruption_s) for w in group)
    return cost / hours if hours else None


def never_checkpoint(wls: Iterable[Workload]) -> list[Workload]:
    """Jobs that never save (not even at a notice)."""
    return [w for w in wls if w.job.checkpoint_interval_s is None and w.job.checkpoint_cost_s == 0]


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
    never = group_rate(never_checkpoint(ran))
    penalty = None if frequent is None or not never else frequent / never
    frequent_cost = group_cost_rate(frequent_checkpointers(ran))
    never_cost = group_cost_rate(never_checkpoint(ran))
    cost_ratio = None if frequent_cost is None or not never_cost else frequent_cost / never_cost
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
        "interruption_cost_s_per_running_hour_frequent_checkpointers": _round(frequent_cost),
        "interruption_cost_s_per_running_hour_never_checkpoint": _round(never_cost),
        "checkpointer_cost_ratio": _round(cost_ratio),
        "reinterrupted_within_min_runtime": again,
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 5)

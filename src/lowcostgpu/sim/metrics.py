"""The figures of one run: lost work, goodput, interruptions, on-demand waits, revenue.

Definitions (docs/simulation.md repeats them with the results):

- `lost_gpu_hours`: work done since the last saved checkpoint when a run was interrupted, times
  its GPUs — work that a restart must redo.
- `clairvoyant_lost_gpu_hours_at_the_same_reclaims`, `avoidable_lost_share`: at each reclaim, what
  the victims the clairvoyant yardstick would have chosen then would have lost (`sim.reclaims`),
  and the share of the policy's loss at reclaims (`lost_gpu_hours_at_reclaims`) that choice saves.
- `preemptible_goodput`: useful GPU-hours of interruptible jobs (work kept, redone work not
  counted twice) / GPU-hours they were billed for (from the meter: start to notice).
- `median_time_between_interruptions_s`: over all interruptions, how long the interrupted run
  had been running since its (re)start — what a user sees between two interruptions of a job.
  `interrupted_in_the_second_they_started` counts the runs reclaimed in the very second they
  started (a 0 here): on the Alibaba trace at `--fleet-scale 0.02` they are most of the
  interruptions — the pool's on-demand hold ends at the first on-demand placement although more
  refused requests wait, the queue pass starts preemptible work on what the hold kept, and the
  next waiting request reclaims it at once (docs/simulation.md, "Reading the figures").
- `on_demand_p99_wait_s`: submit → workload start of on-demand jobs: the time refused requests
  waited plus the reclaim latency (waiting for victims to leave, at most the grace period). A
  request is refused only when no reclaim can free enough GPUs (they are held by on-demand work,
  or by restarts shielded for their minimum runtime): `on_demand_refused_at_first` counts them,
  `on_demand_refused_wait_p50_s`/`_max_s` say how long they waited, and a p99 of days means they
  are more than 1 % of the on-demand requests. `on_demand_never_started` waited to the end.
- `queue_eta`: how far the ETA a queued interruptible job was given is from its real start
  (`sim.eta`): |ETA − start| p50/p90 over those given one, and the share told "unknown".
- `risk_warnings`: the preemption-risk warnings' precision within 5/15/60 min, recall, lead
  time and the early saves they caused (`sim.risk_figures`).
- `revenue_usd`: metered usage rated from the catalog (`core.metering`, `core.rating`):
  on-demand at full price, interruptible at half price.
- `lost_work_credit_usd`, `lost_work_credit_share_of_interruptible_revenue`: what the operator's
  `--credit-lost-work` would have credited when each reclaimed run ended (`core.credits`, the
  server's rule: the billed GPU-time from the last *reported* checkpoint to the notice, within
  the billed run; nothing for a job that reported none or saved in its grace), in dollars and as
  a share of the interruptible revenue.

Percentiles are nearest-rank (an observed value, never interpolated), so reports are exact.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from fractions import Fraction
from typing import Any

from lowcostgpu.core.credits import LostWorkCredit
from lowcostgpu.core.metering import UsageRecord, UsageSpan, instance_gpu_spans, meter
from lowcostgpu.core.rating import InvoiceLine, invoice_lines, to_money
from lowcostgpu.domain.capacity import CapacityClass
from lowcostgpu.domain.catalog import Catalog
from lowcostgpu.sim.eta import eta_figures
from lowcostgpu.sim.fairness import fairness_figures
from lowcostgpu.sim.result import SimResult
from lowcostgpu.sim.risk_figures import risk_figures
from lowcostgpu.sim.workload import Workload

HOUR = 3600
METER_INTERVAL_S = 60
_OD, _IR = CapacityClass.ON_DEMAND, CapacityClass.INTERRUPTIBLE


def percentile(values: list[int], q: float) -> int | None:
    """Nearest-rank percentile (q in 0..100) of whole numbers; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))
    return ordered[int(rank) - 1]


def _hours(gpu_s: int | Fraction) -> float:
    return round(float(gpu_s) / HOUR, 3)


def summarise(result: SimResult, catalog: Catalog) -> dict[str, Any]:
    wls = list(result.workloads.values())
    od = [w for w in wls if w.job.capacity_class is _OD]
    ir = [w for w in wls if w.job.capacity_class is _IR]
    lines = rated_lines(result, catalog)
    billed_ir = sum(line.quantity_s for line in lines if line.capacity_class is _IR)
    useful_ir = sum(w.useful_s(result.end_s) * w.job.total_gpus for w in ir)
    capacity_gpu_s = sum(h.gpu_count for h in result.trace.hosts) * result.end_s
    return {
        "policy": result.policy,
        "jobs": _jobs(od, ir, result),
        **_interruptions(ir),
        **_avoidable(result),
        **fairness_figures(ir, result.min_runtime_s),
        "preemptible_goodput": round(useful_ir / billed_ir, 4) if billed_ir else None,
        "useful_preemptible_gpu_hours": _hours(useful_ir),
        "billed_preemptible_gpu_hours": _hours(billed_ir),
        **_on_demand_waits(od),
        "preemptible_wait_p50_s": percentile(_waits(ir), 50),
        "preemptible_wait_p99_s": percentile(_waits(ir), 99),
        **_utilisation(result, capacity_gpu_s),
        **_revenue(lines),
        **lost_work_credit_figures(result, lines, catalog),
        "gangs": _gangs(ir, result),
        "queue_eta": eta_figures(result.etas, result.workloads, percentile),
        "risk_warnings": risk_figures(result.warnings, result.workloads, percentile),
        "events": result.events,
        "engine_calls": result.engine_calls,
    }


def _gangs(ir: list[Workload], result: SimResult) -> dict[str, Any] | None:
    """Multi-node jobs apart (None when the trace has none): how long they waited to start and
    to restart after an interruption, how often they were interrupted, the work they lost on
    all their hosts, and the GPU-hours their surviving hosts were held for them, idle."""
    gangs = [w for w in ir if w.job.nodes > 1]
    if not gangs:
        return None
    interruptions = [len(w.interruptions) for w in gangs]
    restarts = [s for w in gangs for s in w.waits_after_interruption_s]
    held_gpu_s = sum(
        run.gpus * (min(run.billed_until or result.end_s, result.end_s) - run.started_at)
        for w in gangs
        if (inst := result.instances.get(w.job.id)) is not None
        for run in inst.held_runs
        if run.gpus
    )
    return {
        "restart_wait_p50_s": percentile(restarts, 50),
        "restart_wait_p99_s": percentile(restarts, 99),
        "held_idle_gpu_hours": _hours(held_gpu_s),
        "jobs": len(gangs),
        "nodes_max": max(w.job.nodes for w in gangs),
        "never_started": sum(w.first_start is None for w in gangs),
        "wait_to_start_p50_s": percentile(_waits(gangs), 50),
        "wait_to_start_p99_s": percentile(_waits(gangs), 99),
        "interruptions": sum(interruptions),
        "interruptions_per_gang_max": max(interruptions),
        "lost_gpu_hours": _hours(sum(w.lost_s * w.job.total_gpus for w in gangs)),
    }


def _jobs(od: list[Workload], ir: list[Workload], result: SimResult) -> dict[str, int]:
    return {
        "on_demand": len(od),
        "interruptible": len(ir),
        "on_demand_done": sum(w.finished_at is not None for w in od),
        "interruptible_done": sum(w.finished_at is not None for w in ir),
        "on_demand_never_started": sum(w.first_start is None for w in od),
        "interruptible_never_started": sum(w.first_start is None for w in ir),
        "rejected": len(result.rejected),
    }


def _interruptions(ir: list[Workload]) -> dict[str, Any]:
    per_job = [len(w.interruptions) for w in ir]
    gaps = [gap for w in ir for gap in w.run_before_interruption_s]
    by_type: dict[str, list[int]] = defaultdict(list)
    for w in ir:
        by_type[w.job.pool.gpu_type] += w.run_before_interruption_s
    running_h = sum(w.run_s for w in ir) / HOUR
    histogram: dict[str, int] = defaultdict(int)
    for count in per_job:
        histogram[str(min(count, 10)) if count < 10 else "10+"] += 1
    return {
        "lost_gpu_hours": _hours(sum(w.lost_s * w.job.total_gpus for w in ir)),
        "interruptions": sum(per_job),
        "interrupted_jobs": sum(1 for c in per_job if c),
        "interruptions_per_job_max": max(per_job, default=0),
        "interruptions_per_job_p99": percentile(per_job, 99),
        "interruptions_per_running_hour": round(sum(per_job) / running_h, 5) if running_h else None,
        "interruptions_per_job_histogram": dict(sorted(histogram.items(), key=_hist_key)),
        "median_time_between_interruptions_s": percentile(gaps, 50),
        "interrupted_in_the_second_they_started": sum(1 for gap in gaps if gap == 0),
        "median_time_between_interruptions_s_by_gpu_type": {
            t: percentile(v, 50) for t, v in sorted(by_type.items()) if v
        },
        "interruptions_by_gpu_type": {t: len(v) for t, v in sorted(by_type.items()) if v},
    }


def _avoidable(result: SimResult) -> dict[str, Any]:
    """The policy's reclaims against the clairvoyant choice at each of them (`sim.reclaims`)."""
    actual, best = result.reclaims.actual_gpu_s, result.reclaims.clairvoyant_gpu_s
    return {
        "lost_gpu_hours_at_reclaims": _hours(actual),
        "clairvoyant_lost_gpu_hours_at_the_same_reclaims": _hours(best),
        "avoidable_lost_share": round(1 - best / actual, 4) if actual else None,
    }


def _hist_key(item: tuple[str, int]) -> int:
    return 10 if item[0] == "10+" else int(item[0])


def _waits(wls: list[Workload]) -> list[int]:
    return [w.first_start - w.submitted_at for w in wls if w.first_start is not None]


def _on_demand_waits(od: list[Workload]) -> dict[str, Any]:
    waits = _waits(od)
    refused = [
        w.launched_at - w.submitted_at
        for w in od
        if w.launched_at is not None and w.launched_at > w.submitted_at
    ]
    reclaim = [
        w.first_start - w.launched_at
        for w in od
        if w.first_start is not None and w.launched_at is not None
    ]
    return {
        "on_demand_p50_wait_s": percentile(waits, 50),
        "on_demand_p99_wait_s": percentile(waits, 99),
        "on_demand_max_wait_s": max(waits, default=None),
        "on_demand_refused_at_first": len(refused),
        "on_demand_refused_wait_p50_s": percentile(refused, 50),
        "on_demand_refused_wait_max_s": max(refused, default=None),
        "on_demand_reclaim_latency_p50_s": percentile([r for r in reclaim if r > 0], 50),
        "on_demand_reclaim_latency_p99_s": percentile([r for r in reclaim if r > 0], 99),
        "on_demand_waits_s": sorted(waits),
    }


def _utilisation(result: SimResult, capacity_gpu_s: int) -> dict[str, Any]:
    od, ir = result.busy_gpu_s[_OD], result.busy_gpu_s[_IR]
    share = (lambda x: round(x / capacity_gpu_s, 5)) if capacity_gpu_s else (lambda x: None)
    return {
        "capacity_gpu_hours": _hours(capacity_gpu_s),
        "on_demand_gpu_hours": _hours(od),
        "preemptible_gpu_hours": _hours(ir),
        "utilisation_on_demand": share(od),
        "utilisation_preemptible": share(ir),
        "utilisation_gained": share(ir),
    }


def rated_lines(
    result: SimResult, catalog: Catalog, *, per_interval: bool = False
) -> list[InvoiceLine]:
    """GPU usage of every run, rated from the catalog: one line per (GPU type, class).

    The spans come from the instances' runs (`core.metering.instance_gpu_spans`: start to
    notice, or to exit). The meter cuts them into 60 s records whose GPU-seconds add up, to the
    second, to the spans' own; a 149-day run makes millions of such records, so by default each
    (GPU type, class) gets one record holding the spans' total. `per_interval=True` meters them
    in 60 s records with `core.metering.meter` instead (the tests check that both agree).
    """
    end = result.end_s
    spans = [
        _cut(s, end)
        for inst in result.instances.values()
        for s in instance_gpu_spans(inst)
        if s.start < end
    ]
    if per_interval:
        records = meter(spans, {}, end + METER_INTERVAL_S, METER_INTERVAL_S)
    else:
        records = _total_records(spans, end)
    return invoice_lines(records, catalog, 0, end + METER_INTERVAL_S)


def _total_records(spans: list[UsageSpan], end: int) -> list[UsageRecord]:
    totals: dict[tuple[str, str, CapacityClass | None], list[int]] = defaultdict(lambda: [0, 0])
    for span in spans:
        assert span.end is not None
        total = totals[(span.account_id, span.resource, span.capacity_class)]
        total[0] += span.end - span.start
        total[1] += (span.end - span.start) * span.quantity
    return [
        UsageRecord(
            subject_id=f"{resource}/{cls}",
            account_id=account,
            kind="gpu",
            resource=resource,
            capacity_class=cls,
            interval_start=0,
            interval_end=end,
            seconds=seconds,
            quantity=0,
            quantity_s=quantity_s,
        )
        for (account, resource, cls), (seconds, quantity_s) in sorted(totals.items(), key=str)
    ]


def _cut(span: UsageSpan, end: int) -> UsageSpan:
    """A span still open (or ending later) stops at the end of the simulation."""
    return span if span.end is not None and span.end <= end else replace(span, end=end)


def _revenue(lines: list[InvoiceLine]) -> dict[str, Any]:
    by_class: dict[CapacityClass | None, Fraction] = defaultdict(Fraction)
    full_price = Fraction(0)
    for line in lines:
        by_class[line.capacity_class] += line.exact
        full_price += line.on_demand_exact
    total = sum(by_class.values(), Fraction(0))
    return {
        "revenue_usd": str(to_money(total).amount),
        "revenue_on_demand_usd": str(to_money(by_class[_OD]).amount),
        "revenue_interruptible_usd": str(to_money(by_class[_IR]).amount),
        "revenue_if_interruptible_paid_full_price_usd": str(to_money(full_price).amount),
        "revenue_by_gpu_type_usd": {
            f"{line.resource}/{line.capacity_class}": str(line.amount_exact.amount)
            for line in lines
        },
    }


def lost_work_credit_figures(
    result: SimResult, lines: list[InvoiceLine], catalog: Catalog
) -> dict[str, Any]:
    """What crediting lost work would cost the operator: credited GPU-hours and dollars, and
    their share of the interruptible revenue (`None` without any); and what the credited victims
    truly lost (the work since their last save: the credit also counts the GPU-time of a save
    cut short by the deadline, which the customer paid for and lost)."""
    credits: list[LostWorkCredit] = result.lost_work_credits
    credited = sum((c.exact_usd(catalog) for c in credits), Fraction(0))
    revenue = sum((line.exact for line in lines if line.capacity_class is _IR), Fraction(0))
    return {
        "lost_work_credits": len(credits),
        "lost_work_credit_gpu_hours": _hours(sum(c.gpu_s for c in credits)),
        "lost_work_credit_true_loss_gpu_hours": _hours(result.credited_true_loss_gpu_s),
        "lost_work_credit_usd": str(to_money(credited).amount),
        "lost_work_credit_share_of_interruptible_revenue": (
            round(float(credited / revenue), 4) if revenue else None
        ),
    }

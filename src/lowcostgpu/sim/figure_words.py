"""The simulation's figures in words: what each one means, and the summary `lowcostgpu sim` prints.

`FIGURES` defines every figure (its unit, what it is, what an extreme value means); report.json
carries the definitions and report.html prints them under its table (`sim.report`, which writes
those files and draws the plots). `shown` is how a person reads a figure, in the terminal and in
the HTML table alike; `summary_lines` and `credit_lines` are what the command prints for each
policy. They are apart from the report's files so that the words a person reads are in one place,
whichever of the terminal, the JSON and the HTML shows them.
"""

from __future__ import annotations

from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any

# Every figure of the table and the summary: (unit, what it is and what an extreme value means).
# report.json carries them (`figures_explained`), report.html prints them under the table.
FIGURES: dict[str, tuple[str, str]] = {
    "lost_gpu_hours": (
        "GPU-h",
        "work done since the last saved checkpoint when a run was interrupted, times its GPUs: "
        "what restarts must redo; 0 = every interrupted run had just saved (or just started)",
    ),
    "avoidable_lost_share": (
        "share 0–1",
        "of the loss at the policy's reclaims, what the clairvoyant choice at the same moments "
        "would have saved; 0 = it chose as well as perfect knowledge; — when nothing was lost",
    ),
    "preemptible_goodput": (
        "share 0–1",
        "useful GPU-h of interruptible jobs ÷ the GPU-h they were billed for; 1 = nothing redone",
    ),
    "interruptions": ("count", "reclaims of interruptible runs (SIGTERM notices)"),
    "interrupted_jobs": ("count", "interruptible jobs interrupted at least once"),
    "median_time_between_interruptions_s": (
        "s",
        "how long an interrupted run had run since its (re)start, median over the interruptions; "
        "0 = most were reclaimed in the second they started (see "
        "interrupted_in_the_second_they_started); — when nothing was interrupted",
    ),
    "interrupted_in_the_second_they_started": (
        "count",
        "runs reclaimed in the very second they started: started on GPUs that a waiting "
        "on-demand request took at once (they lose nothing but a start)",
    ),
    "interruptions_per_job_running_hour_mean": (
        "per running hour",
        "per interruptible job that ran: interruptions ÷ its hours on GPUs, averaged",
    ),
    "interruptions_per_job_running_hour_p99": ("per running hour", "the same, 99th percentile"),
    "interruptions_per_job_running_hour_max": (
        "per running hour",
        "the same, the worst job (a short job interrupted once makes it large)",
    ),
    "jain_index_interruptions_per_running_hour": (
        "index 0–1",
        "Jain's fairness index of those rates: 1 = every job interrupted as often per hour",
    ),
    "checkpointer_penalty": (
        "ratio",
        "interruptions per running hour of jobs that checkpoint every ≤10 min ÷ that of jobs that "
        "never checkpoint; 1 = fair, > 1 punishes checkpointing; — when a group had none",
    ),
    "checkpointer_cost_ratio": (
        "ratio",
        "what interruptions cost jobs that checkpoint every ≤10 min (work lost + notice-to-restart "
        "wait, s per running hour) ÷ the same for jobs that never checkpoint; ≤ 1 = checkpointing "
        "never costs a job more; — when a group lost nothing",
    ),
    "interruption_cost_s_per_running_hour_frequent_checkpointers": (
        "s per running hour",
        "work lost + notice-to-restart wait of jobs that checkpoint every ≤10 min, per hour run",
    ),
    "interruption_cost_s_per_running_hour_never_checkpoint": (
        "s per running hour",
        "the same for jobs that never checkpoint",
    ),
    "hiding_gain": (
        "share",
        "what hiding checkpoints gains the hiders (1 − their rate hiding ÷ reporting); ≤ 0 = "
        "hiding does not pay; — for a yardstick or when the hiders were never interrupted",
    ),
    "reinterrupted_within_min_runtime": (
        "count",
        "interruptions of a restarted run before its minimum runtime: 0 is the promise",
    ),
    "on_demand_p50_wait_s": ("s", "on-demand submit → start, median"),
    "on_demand_p99_wait_s": (
        "s",
        "on-demand submit → start, 99th percentile: the reclaim latency (≤ the grace period) "
        "unless more than 1 % of requests were refused — refused when no reclaim can free the "
        "GPUs (held by on-demand work or shielded restarts) — and waited for on-demand work to end",
    ),
    "on_demand_refused_at_first": (
        "count",
        "on-demand requests refused at first (no reclaim could free enough GPUs) that later ran",
    ),
    "utilisation_gained": (
        "share 0–1",
        "preemptible GPU-h ÷ the fleet's GPU-h: capacity sold that would have stood idle",
    ),
    "revenue_usd": ("$", "metered usage rated from the catalog; interruptible at half price"),
    "lost_work_credit_usd": (
        "$",
        "what `serve --credit-lost-work` would credit: when each reclaimed run ends, the billed "
        "GPU-time from the victim's last reported checkpoint to the notice (within its billed "
        "run; 0 for a job that reported none or saved in its grace) at its interruptible rate — "
        "what the policy's victim choices cost the operator",
    ),
    "lost_work_credit_share_of_interruptible_revenue": (
        "share 0–1",
        "lost_work_credit_usd ÷ the interruptible revenue; 0 = reclaims destroyed no reported "
        "work; — without interruptible revenue",
    ),
    "lost_work_credit_true_loss_gpu_hours": (
        "GPU-h",
        "what the credited victims truly lost (their work since their last save); "
        "lost_work_credit_gpu_hours is above it only by the billed GPU-time of saves cut short "
        "(a save in progress at the notice that the grace could not fit)",
    ),
    "risk_warnings": (
        "shares 0–1, s, count",
        "preemption-risk warnings (`PreemptionRisk`): precision_within_N_min = share of warnings "
        "whose instance was reclaimed within N min; recall = share of interruptions warned in "
        "their run before the notice; lead_time_p50_s = notice − warning; early_saves = saves "
        "the warnings caused; — when there were no warnings (or no interruptions)",
    ),
    "gangs": (
        "count, s, GPU-h",
        "multi-node jobs apart: how many, how long they waited to start (p50, p99), how often "
        "they were interrupted (one reclaim of one host interrupts the whole gang) and the work "
        "they lost on all their GPUs; — when the trace has none",
    ),
    "events": ("count", "simulation events handled"),
    "wall_s": ("s", "wall-clock time the run took (the only figure that differs between runs)"),
}


def shown(value: Any) -> str:
    """A figure as a person reads it: thousands separated, no `None` (an em dash: no value)."""
    if value is None:
        return "—"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:,.4f}".rstrip("0").rstrip(".") if value % 1 else f"{value:,.1f}"


def _duration(seconds: int | None) -> str:
    """`647,165 s (7 d 11:46:05)`: seconds, and from an hour on the same as d h:mm:ss."""
    if seconds is None:
        return "— (none)"
    if seconds < 3600:
        return f"{seconds:,} s"
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    clock = f"{hours}:{rest // 60:02d}:{rest % 60:02d}"
    return f"{seconds:,} s ({days} d {clock})" if days else f"{seconds:,} s ({clock})"


def _usd(amount: str) -> str:
    """An exact decimal string shown to the cent: `$22,435.02`."""
    return f"${Decimal(amount).quantize(Decimal('0.01'), rounding=ROUND_HALF_EVEN):,}"


def summary_lines(name: str, f: dict[str, Any]) -> list[str]:
    """What `lowcostgpu sim` prints for one policy: every figure with its unit and, where an
    extreme value needs it, why (`FIGURES` has the definitions; report.html the same)."""
    jobs = f["jobs"]
    at_start = f.get("interrupted_in_the_second_they_started", 0)
    median = f["median_time_between_interruptions_s"]
    refused = f.get("on_demand_refused_at_first", 0)
    never = jobs.get("on_demand_never_started", 0)
    lines = [
        f"{name}",
        f"  lost work        {shown(f['lost_gpu_hours'])} GPU-h to redo (work since the last "
        "checkpoint at each interruption; 0 = nothing redone)",
        f"  interruptions    {shown(f['interruptions'])} (SIGTERM notices) of "
        f"{shown(jobs['interruptible'])} interruptible jobs; {shown(f['interrupted_jobs'])} "
        "jobs interrupted at least once",
        f"  median run before an interruption  {_duration(median)}"
        + (
            f" — {shown(at_start)} of the {shown(f['interruptions'])} runs were reclaimed in the "
            "second they started (GPUs a waiting on-demand request took at once)"
            if at_start
            else ""
        ),
        f"  goodput          {shown(f['preemptible_goodput'])} (useful ÷ billed interruptible "
        "GPU-h; 1 = nothing redone; — = none billed)",
        f"  on-demand wait   p50 {_duration(f['on_demand_p50_wait_s'])} · p99 "
        f"{_duration(f['on_demand_p99_wait_s'])} · reclaim latency p99 "
        f"{_duration(f.get('on_demand_reclaim_latency_p99_s'))}",
        f"{' ' * 19}{shown(refused)} of {shown(jobs['on_demand'])} on-demand requests were "
        "refused at first — no reclaim could free their GPUs (held by on-demand work or shielded "
        f"restarts) — and waited up to {_duration(f.get('on_demand_refused_wait_max_s'))}"
        + (f"; {shown(never)} never started" if never else ""),
        f"  revenue          {_usd(f['revenue_usd'])} (interruptible at half price; "
        f"{_usd(f['revenue_if_interruptible_paid_full_price_usd'])} had it paid full price; "
        "exact amounts in report.json)",
        *credit_lines(f),
        f"  simulated        {shown(f['events'])} events in {shown(f['wall_s'])} s",
    ]
    gangs = f.get("gangs")
    if gangs:
        lines.insert(
            -2,
            f"  multi-node jobs  {shown(gangs['jobs'])} (up to {shown(gangs['nodes_max'])} hosts);"
            f" start wait p50 {_duration(gangs['wait_to_start_p50_s'])}, p99 "
            f"{_duration(gangs['wait_to_start_p99_s'])}; {shown(gangs['interruptions'])} "
            f"interruptions, {shown(gangs['lost_gpu_hours'])} GPU-h lost",
        )
    risk = f.get("risk_warnings")
    if risk and risk.get("warnings"):
        lines.insert(
            -2,
            f"  risk warnings    {shown(risk['warnings'])}; reclaimed within 15 min "
            f"{shown(risk['precision_within_15_min'])}, interruptions warned before "
            f"{shown(risk['recall'])} (lead p50 {_duration(risk['lead_time_p50_s'])}); "
            f"{shown(risk['early_saves'])} early saves",
        )
    return lines


def credit_lines(f: dict[str, Any]) -> list[str]:
    """What crediting lost work (`serve --credit-lost-work`) would have cost the operator."""
    if "lost_work_credit_usd" not in f:
        return []
    share = f["lost_work_credit_share_of_interruptible_revenue"]
    return [
        f"  lost-work credit {_usd(f['lost_work_credit_usd'])} "
        f"({shown(f['lost_work_credit_gpu_hours'])} GPU-h at {shown(f['lost_work_credits'])} "
        f"reclaims; {shown(share)} of interruptible revenue) had --credit-lost-work been on; "
        f"those victims truly lost {shown(f['lost_work_credit_true_loss_gpu_hours'])} GPU-h"
    ]

"""report.json (every figure) and report.html (the plots, inline SVG, works offline).

What each figure means and how a person reads it are `sim.figure_words`' (the terminal summary
shares them); this module writes the two files and lays out the HTML's table and plots.
"""

from __future__ import annotations

import json
from html import escape
from pathlib import Path
from typing import Any

from lowcostgpu.domain.errors import ConfigError
from lowcostgpu.sim.figure_words import FIGURES, shown
from lowcostgpu.sim.result import Sample
from lowcostgpu.sim.svg import bar_chart, line_chart

DAY = 86400
TABLE_KEYS = (
    "lost_gpu_hours",
    "avoidable_lost_share",
    "preemptible_goodput",
    "interruptions",
    "interrupted_jobs",
    "median_time_between_interruptions_s",
    "interrupted_in_the_second_they_started",
    "interruptions_per_job_running_hour_mean",
    "interruptions_per_job_running_hour_p99",
    "interruptions_per_job_running_hour_max",
    "jain_index_interruptions_per_running_hour",
    "checkpointer_penalty",
    "checkpointer_cost_ratio",
    "hiding_gain",
    "reinterrupted_within_min_runtime",
    "on_demand_p99_wait_s",
    "on_demand_refused_at_first",
    "utilisation_gained",
    "revenue_usd",
    "lost_work_credit_usd",
    "lost_work_credit_share_of_interruptible_revenue",
    "events",
    "wall_s",
)


def write_report(directory: Path, report: dict[str, Any], samples: dict[str, list[Sample]]) -> None:
    report = {**report, "figures_explained": {k: f"{u}: {w}" for k, (u, w) in FIGURES.items()}}
    try:
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "report.json").write_text(
            json.dumps(report, indent=2, sort_keys=True) + "\n", encoding="utf-8"
        )
        (directory / "report.html").write_text(render_html(report, samples), encoding="utf-8")
    except OSError as exc:
        raise ConfigError(
            f"cannot write the report to {directory}: {exc.strerror or exc}",
            hint="give --report a folder you can write to",
            source=str(directory),
        ) from None


def render_html(report: dict[str, Any], samples: dict[str, list[Sample]]) -> str:
    policies: dict[str, dict[str, Any]] = report["policies"]
    first = next(iter(samples.values()), [])
    xs = [s.at / DAY for s in first]
    sections = [
        _table(policies),
        _h("GPU use over time (first policy: " + escape(next(iter(samples), "")) + ")"),
        line_chart(
            "GPUs in use",
            xs,
            {
                "on-demand": [s.on_demand_gpus for s in first],
                "preemptible": [s.preemptible_gpus for s in first],
            },
            "days",
        ),
        _h("Queue depth (preemptible tickets waiting) per policy"),
        line_chart(
            "queue depth", xs, {p: [s.queued for s in v] for p, v in samples.items()}, "days"
        ),
        _h("Lost GPU-hours per policy"),
        bar_chart(
            "lost GPU-hours",
            {p: {"lost": v["lost_gpu_hours"]} for p, v in policies.items()},
            "policy",
        ),
        _h("Interruptions per job (number of jobs interrupted n times)"),
        bar_chart(
            "interruptions per job",
            {
                n: {p: v["interruptions_per_job_histogram"].get(n, 0) for p, v in policies.items()}
                for n in _hist_keys(policies)
            },
            "interruptions",
        ),
        _h("Interruptions per running hour: frequent checkpointers vs jobs that never save"),
        bar_chart(
            "interruptions per running hour",
            {
                p: {
                    "checkpoint ≤10 min": v.get(
                        "interruptions_per_running_hour_frequent_checkpointers"
                    )
                    or 0,
                    "never checkpoint": v.get("interruptions_per_running_hour_never_checkpoint")
                    or 0,
                }
                for p, v in policies.items()
            },
            "policy",
        ),
        _h("Fairness: Jain's index and checkpointer penalty (1 is fair for both)"),
        bar_chart(
            "fairness",
            {
                p: {
                    "Jain's index": v.get("jain_index_interruptions_per_running_hour") or 0,
                    "checkpointer penalty": v.get("checkpointer_penalty") or 0,
                }
                for p, v in policies.items()
            },
            "policy",
        ),
        _h("Median time between interruptions per GPU type (s)"),
        bar_chart(
            "median run before an interruption",
            {
                t: {
                    p: v["median_time_between_interruptions_s_by_gpu_type"].get(t) or 0
                    for p, v in policies.items()
                }
                for t in _types(policies)
            },
            "GPU type",
        ),
        _h("On-demand wait (submit to start), p50 and p99 (s)"),
        bar_chart(
            "on-demand wait",
            {
                p: {"p50": v["on_demand_p50_wait_s"] or 0, "p99": v["on_demand_p99_wait_s"] or 0}
                for p, v in policies.items()
            },
            "policy",
        ),
        _h("Revenue (USD): interruptible at half price vs the same usage at full price"),
        bar_chart(
            "revenue",
            {
                p: {
                    "actual": float(v["revenue_usd"]),
                    "if interruptible paid full price": float(
                        v["revenue_if_interruptible_paid_full_price_usd"]
                    ),
                }
                for p, v in policies.items()
            },
            "policy",
        ),
    ]
    head = f"<h1>lowcostgpu simulation: {escape(str(report['trace']['name']))}</h1>"
    run = {k: report[k] for k in ("trace", "fleet", "end_s", "seed")}
    meta = f"<pre>{escape(json.dumps(run, indent=1))}</pre>"
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>lowcostgpu simulation</title>"
        "<style>body{font-family:sans-serif;max-width:960px;margin:2em auto}"
        "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 6px;"
        "text-align:right}</style></head><body>"
        + head
        + "".join(sections)
        + "<h2>Run</h2>"
        + meta
        + "</body></html>\n"
    )


def _h(text: str) -> str:
    return f"<h2>{text}</h2>"


def _table(policies: dict[str, dict[str, Any]]) -> str:
    """The figures per policy, units in the header, `—` for a figure with no value, and what
    each figure means (and what its extremes mean) under the table."""
    rows = "".join(
        "<tr><th>"
        + escape(p)
        + "</th>"
        + "".join(f"<td>{escape(shown(v.get(k)))}</td>" for k in TABLE_KEYS)
        + "</tr>"
        for p, v in policies.items()
    )
    header = (
        "<tr><th>policy</th>"
        + "".join(f"<th>{k}<br><small>{escape(_unit(k))}</small></th>" for k in TABLE_KEYS)
        + "</tr>"
    )
    legend = "".join(
        f"<dt><code>{k}</code> ({escape(_unit(k))})</dt><dd>{escape(FIGURES[k][1])}</dd>"
        for k in TABLE_KEYS
        if k in FIGURES
    )
    return (
        f"<h2>Policies compared</h2><table>{header}{rows}</table>"
        f"<h3>What the figures mean</h3><dl>{legend}</dl>"
    )


def _unit(key: str) -> str:
    return FIGURES[key][0] if key in FIGURES else ""


def _hist_keys(policies: dict[str, dict[str, Any]]) -> list[str]:
    keys = {k for v in policies.values() for k in v["interruptions_per_job_histogram"] if k != "0"}
    return sorted(keys, key=lambda k: 10 if k == "10+" else int(k))


def _types(policies: dict[str, dict[str, Any]]) -> list[str]:
    return sorted(
        {t for v in policies.values() for t in v["median_time_between_interruptions_s_by_gpu_type"]}
    )

"""The simulator's summary and report explain every figure: units, what an extreme value means,
never Python's `None`."""

from __future__ import annotations

from typing import Any

import pytest

from lowcostgpu.sim.figure_words import FIGURES, shown, summary_lines
from lowcostgpu.sim.report import TABLE_KEYS, render_html


def _figures(**changes: Any) -> dict[str, Any]:
    """A policy's figures as `sim.metrics.summarise` writes them, for a quiet run by default."""
    base: dict[str, Any] = {
        "jobs": {"on_demand": 3693, "interruptible": 2510, "on_demand_never_started": 0},
        "lost_gpu_hours": 0.0,
        "interruptions": 0,
        "interrupted_jobs": 0,
        "median_time_between_interruptions_s": None,
        "interrupted_in_the_second_they_started": 0,
        "preemptible_goodput": None,
        "on_demand_p50_wait_s": None,
        "on_demand_p99_wait_s": None,
        "on_demand_reclaim_latency_p99_s": None,
        "on_demand_refused_at_first": 0,
        "on_demand_refused_wait_max_s": None,
        "revenue_usd": "0",
        "revenue_if_interruptible_paid_full_price_usd": "0",
        "events": 0,
        "wall_s": 0.5,
        "interruptions_per_job_histogram": {},
        "median_time_between_interruptions_s_by_gpu_type": {},
    }
    return {**base, **changes}


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        ({}, "median run before an interruption  — (none)"),
        (
            {
                "interruptions": 12,
                "median_time_between_interruptions_s": 0,
                "interrupted_in_the_second_they_started": 7,
            },
            "0 s — 7 of the 12 runs were reclaimed in the second they started",
        ),
        (
            {
                "on_demand_p99_wait_s": 647_165,
                "on_demand_refused_at_first": 130,
                "on_demand_refused_wait_max_s": 2_023_353,
                "jobs": {"on_demand": 3693, "interruptible": 1, "on_demand_never_started": 7},
            },
            "p99 647,165 s (7 d 11:46:05)",
        ),
        (
            {"on_demand_refused_at_first": 130, "on_demand_refused_wait_max_s": 3_700},
            "130 of 3,693 on-demand requests were refused at first — no reclaim could free",
        ),
        (
            {"revenue_usd": "22435.0165875"},
            "revenue          $22,435.02 (interruptible at half price;",
        ),
    ],
)
def test_the_summary_says_each_figure_with_its_unit_and_why_an_extreme(
    changes: dict[str, Any], says: str
) -> None:
    text = "\n".join(summary_lines("fair-least-work-lost", _figures(**changes)))
    assert says in text
    assert "None" not in text


def test_every_figure_of_the_report_table_is_explained_with_its_unit() -> None:
    assert [k for k in TABLE_KEYS if k not in FIGURES] == []
    assert all(unit and words for unit, words in FIGURES.values())


def test_the_html_report_shows_a_dash_not_none_for_a_figure_with_no_value() -> None:
    report = {
        "policies": {"p": _figures()},
        "trace": {"name": "t"},
        "fleet": {},
        "end_s": None,
        "seed": 0,
    }
    html = render_html(report, {"p": []})
    assert "None" not in html and "<td>—</td>" in html


@pytest.mark.parametrize(
    ("value", "words"),
    [(None, "—"), (0, "0"), (647165, "647,165"), (0.9541, "0.9541"), (0.0, "0.0"), ("1.5", "1.5")],
)
def test_a_figure_is_shown_as_a_person_reads_it(value: object, words: str) -> None:
    assert shown(value) == words

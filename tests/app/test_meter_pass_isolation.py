"""A metering pass bills every subject it can: one whose spans are refused stops nobody else."""

from __future__ import annotations

import logging

import pytest

from lowcostgpu.app.meter import Cut, pass_commits
from lowcostgpu.core.engine import EngineState
from lowcostgpu.core.metering import UsageRecord, UsageSpan
from lowcostgpu.core.snapshot import FleetSnapshot
from lowcostgpu.domain.capacity import CapacityClass
from lowcostgpu.ports.store import EventRecord
from lowcostgpu.ports.store_records import LedgerEntry

BASE = 1_700_000_040  # a multiple of 60


def span(subject: str, start: int, end: int) -> UsageSpan:
    return UsageSpan(
        subject, "acct", "gpu", "a100-sxm4", 1, CapacityClass.INTERRUPTIBLE, start, end
    )


def no_charge(_: list[UsageRecord]) -> tuple[list[LedgerEntry], list[EventRecord]]:
    return [], []


def cut_of(handed: list[UsageSpan]) -> Cut:
    """A pass over the spans finished instances handed over (no live subject)."""
    return Cut(EngineState(FleetSnapshot.build([])), [], handed, [], {})


@pytest.mark.parametrize("chunk", [1, 2, 250])
def test_a_subject_whose_spans_overlap_is_left_out_and_the_others_are_billed(
    chunk: int, caplog: pytest.LogCaptureFixture
) -> None:
    handed = [
        span("a", BASE, BASE + 60),
        span("bad", BASE, BASE + 120),
        span("bad", BASE + 60, BASE + 120),  # overlaps its first span: refused by `meter`
        span("c", BASE, BASE + 120),
    ]
    with caplog.at_level(logging.ERROR, logger="lowcostgpu.app.meter"):
        commits = list(pass_commits(cut_of(handed), BASE + 600, 60, no_charge, chunk))
    billed = {(r.subject_id, r.interval_start) for c in commits for r in c.usage}
    assert billed == {("a", BASE), ("c", BASE), ("c", BASE + 60)}
    assert {k for c in commits for k in c.metered_through} == {("a", "gpu"), ("c", "gpu")}
    assert "metering left out bad" in caplog.text


def test_a_pass_without_a_refused_subject_gives_meters_order() -> None:
    handed = [span("c", BASE, BASE + 60), span("a", BASE, BASE + 120)]
    (commit,) = pass_commits(cut_of(handed), BASE + 600, 60, no_charge, 250)
    assert [(r.subject_id, r.interval_start) for r in commit.usage] == [
        ("a", BASE),
        ("a", BASE + 60),
        ("c", BASE),
    ]

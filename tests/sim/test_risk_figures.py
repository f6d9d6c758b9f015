"""Preemption-risk warnings in the simulator: a warned checkpointer saves early and loses less,
and the warnings' precision and recall are measured (`sim.risk_figures`)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from sim_builders import OD, POOL, job

from lowcostgpu.adapters.files import load_catalog
from lowcostgpu.core.scheduler import SchedulerConfig
from lowcostgpu.core.victim_policy import LEAST_WORK_LOST
from lowcostgpu.domain.capacity import Host
from lowcostgpu.sim.figure_words import summary_lines
from lowcostgpu.sim.jobs import Trace, sorted_jobs
from lowcostgpu.sim.metrics import percentile, summarise
from lowcostgpu.sim.result import SimResult
from lowcostgpu.sim.risk_figures import WarningLog, risk_figures, worth_saving_early
from lowcostgpu.sim.runner import Simulation
from lowcostgpu.sim.workload import Workload

CONFIG = SchedulerConfig(policy=LEAST_WORK_LOST)
# One 3-GPU host. `a` checkpoints every 1200 s of work, each save takes 310 s (more than the
# 300 s grace: a notice kills it with its last save); `b` never checkpoints. od-1 takes the free
# GPU at 1100 (none left, one asked for: `a` is warned, with 1100 s unsaved, ≥ 2 × 310: it saves
# until 1410); od-2 reclaims `a` at 1450.
JOBS = [
    job("a", 0, 5000, interval=1200, cost=310),
    job("b", 0, 20_000),
    job("od-1", 1100, 5000, cls=OD),
    job("od-2", 1450, 5000, cls=OD),
]


def simulate(config: SchedulerConfig = CONFIG, save_when_warned: bool = True) -> SimResult:
    trace = Trace("risk", (Host("h0", POOL, 3),), sorted_jobs(JOBS), 4000)
    return Simulation(trace, config, save_when_warned=save_when_warned).run()


@pytest.mark.parametrize(
    ("config", "save_when_warned", "lost_s"),
    [
        # warned at 1100, saved 1100 s of work by 1410; reclaimed at 1450 with 1140 done
        (CONFIG, True, 40),
        # warned, but it does not save: its first save (1200 to 1510) is cut by the notice
        (CONFIG, False, 1200),
        # no warnings at all: the same
        (replace(CONFIG, risk_window_s=0), True, 1200),
    ],
)
def test_a_warned_checkpointer_saves_early_and_loses_only_what_it_did_since(
    config: SchedulerConfig, save_when_warned: bool, lost_s: int
) -> None:
    result = simulate(config, save_when_warned)
    a = result.workloads["a"]
    assert a.interruptions == [1450]
    assert a.lost_s == lost_s
    assert result.workloads["b"].interruptions == []


@pytest.mark.parametrize(
    ("interval", "cost", "at", "worth"),
    [
        (1200, 310, 620, True),  # 620 s unsaved: twice the 310 s save
        (1200, 310, 619, False),
        (1200, 30, 1000, False),  # it saves at the notice (30 s ≤ the grace): nothing to gain
        (None, 0, 1000, False),  # it never checkpoints
    ],
)
def test_an_early_save_is_made_only_when_it_protects_twice_its_cost(
    interval: int | None, cost: int, at: int, worth: bool
) -> None:
    wl = Workload(job("x", 0, 5000, interval=interval, cost=cost))
    wl.start("x@0", 0)
    assert worth_saving_early(wl, at, 300) is worth


def test_precision_and_recall_of_the_warnings() -> None:
    result = simulate()
    # a at 1100 (od-1's arrival) and b at 1450 (od-2's: the next after a), once each
    assert result.warnings.given == [("a", 1100), ("b", 1450)]
    figures = risk_figures(result.warnings, result.workloads, percentile)
    assert figures["precision_within_5_min"] == 0.0  # a was reclaimed 350 s after its warning
    assert figures["precision_within_15_min"] == 0.5  # ... within 15 min; b never
    assert figures["precision_within_60_min"] == 0.5
    assert (figures["recall"], figures["lead_time_p50_s"]) == (1.0, 350)
    assert (figures["early_saves"], figures["early_save_gpu_hours"]) == (1, round(310 / 3600, 3))


@pytest.mark.parametrize(
    ("warned_at", "ran_s", "recall"),
    [
        (900, 700, 1.0),  # the run began at 900: warned in it, before the notice
        (899, 700, 0.0),  # warned in an earlier run: not this one's warning
        (1599, 700, 1.0),
        (1600, 700, 0.0),  # the warning came with the notice: no warning at all
    ],
)
def test_recall_counts_only_warnings_in_the_interrupted_run_before_its_notice(
    warned_at: int, ran_s: int, recall: float
) -> None:
    wl = Workload(job("x", 0, 5000))
    wl.interruptions, wl.run_before_interruption_s = [1600], [ran_s]
    log = WarningLog(given=[("x", warned_at)])
    assert risk_figures(log, {"x": wl}, percentile)["recall"] == recall


def test_no_warnings_no_shares() -> None:
    figures = risk_figures(WarningLog(), {}, percentile)
    assert figures["precision_within_15_min"] is None and figures["recall"] is None


def test_the_figures_and_the_summary_carry_the_warnings() -> None:
    figures = summarise(simulate(), load_catalog())
    assert figures["risk_warnings"]["warnings"] == 2
    figures["wall_s"] = 0.1
    (line,) = [x for x in summary_lines("lwl", figures) if "risk warnings" in x]
    assert "reclaimed within 15 min 0.5" in line and "1 early saves" in line

"""The simulator's measure of the queue's ETA: what each queued job was told, against its start."""

from __future__ import annotations

from sim_builders import POOL, job, run

from lowcostgpu.sim.eta import EtaLog, eta_figures, mean_work_by_pool
from lowcostgpu.sim.metrics import percentile
from lowcostgpu.sim.workload import Workload


def test_a_job_queued_behind_a_run_of_unknown_length_is_told_unknown() -> None:
    result = run([job("a", 0, 100), job("b", 10, 50)], host_gpus=(1,))
    assert result.etas.given == {"b": None}  # a was placed at once: not queued
    assert result.workloads["b"].first_start == 100
    # The old guess: one GPU missing of one, the trace's mean job (75 s) → 10 + 75 = 85.
    assert result.etas.turnover == {"b": 85}
    figures = eta_figures(result.etas, result.workloads, percentile)
    assert figures["queued_tickets"] == 1 and figures["unknown_share"] == 1.0
    assert figures["abs_error_p50_s"] is None and figures["turnover_abs_error_p50_s"] == 15


def _workload(name: str, first_start: int | None) -> Workload:
    return Workload(job(name, 0, 10), first_start=first_start)


def test_the_figures_count_errors_unknowns_and_etas_never_reached() -> None:
    log = EtaLog(given={"early": 100, "late": 400, "unknown": None, "never": 50})
    workloads = {
        "early": _workload("early", 160),  # told 100, started 160: 60 off
        "late": _workload("late", 300),  # told 400, started 300: 100 off
        "unknown": _workload("unknown", 10),
        "never": _workload("never", None),  # told 50, never started in the run
    }
    assert eta_figures(log, workloads, percentile) == {
        "queued_tickets": 4,
        "unknown_share": 0.25,
        "abs_error_p50_s": 60,
        "abs_error_p90_s": 100,
        "measured": 2,
        "given_but_never_started": 1,
        "turnover_abs_error_p50_s": None,
        "turnover_abs_error_p90_s": None,
    }


def test_the_mean_job_length_is_per_pool() -> None:
    assert mean_work_by_pool([job("a", 0, 100), job("b", 5, 51)]) == {POOL: 76}
    assert mean_work_by_pool([]) == {}

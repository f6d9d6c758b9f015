"""Hand-made traces whose outcome is known to the second."""

from __future__ import annotations

from decimal import Decimal

from sim_builders import OD, job, run

from lowcostgpu.adapters.files import load_catalog
from lowcostgpu.sim.metrics import rated_lines, summarise


def test_a_single_reclaim_of_a_checkpointing_job_loses_nothing_and_resumes() -> None:
    # 2-GPU job, saves every 100 s of work in 10 s. At 500 it has saved 400 and done 460; the
    # notice makes it save again (10 s, inside the grace) and exit at 510.
    result = run([job("ir", 0, 1000, 2, interval=100, cost=10), job("od", 500, 100, 2, OD)])
    ir, od = result.workloads["ir"], result.workloads["od"]
    assert ir.interruptions == [500]
    assert ir.lost_s == 0
    assert (od.launched_at, od.first_start, od.finished_at) == (500, 510, 610)
    # Restarts at 610 from 460: 540 s of work and 5 saves of 10 s.
    assert ir.finished_at == 610 + 540 + 50
    figures = summarise(result, load_catalog())
    assert figures["interruptions"] == 1
    assert figures["lost_gpu_hours"] == 0
    assert figures["on_demand_p99_wait_s"] == 10
    assert figures["median_time_between_interruptions_s"] == 500


def test_a_job_that_never_checkpoints_loses_its_run_and_redoes_it() -> None:
    result = run([job("ir", 0, 1000, 2), job("od", 500, 100, 2, OD)])
    ir, od = result.workloads["ir"], result.workloads["od"]
    assert ir.lost_s == 500
    assert (od.first_start, od.finished_at) == (500, 600)  # it exits at the notice
    assert ir.finished_at == 600 + 1000
    assert ir.run_s == 500 + 1000  # its total running time grew by the lost work
    figures = summarise(result, load_catalog())
    assert figures["lost_gpu_hours"] == round(1000 / 3600, 3)
    assert figures["preemptible_goodput"] == round(2000 / 3000, 4)


def test_a_slow_checkpointer_is_killed_at_the_deadline_and_keeps_its_last_save() -> None:
    # Saves every 100 s but a save takes 400 s: more than the 300 s grace.
    result = run([job("ir", 0, 2000, 1, interval=100, cost=400), job("od", 1200, 10, 2, OD)])
    ir, od = result.workloads["ir"], result.workloads["od"]
    # At 1200: two cycles of 500 s done (saved 200), then 100 s of work (done 300).
    assert ir.lost_s == 100
    assert od.first_start == 1200 + 300


def test_the_queue_drains_in_fifo_order() -> None:
    jobs = [job(name, at, 10) for name, at in (("a", 0), ("b", 1), ("c", 2), ("d", 3))]
    result = run(jobs, host_gpus=(1,))
    starts = {name: w.first_start for name, w in result.workloads.items()}
    assert starts == {"a": 0, "b": 10, "c": 20, "d": 30}


def test_a_multi_gpu_request_does_not_starve_behind_small_ones() -> None:
    smalls = [job(f"s{i:03d}", 30 * i, 100) for i in range(100)]
    big = job("big", 10, 50, gpus=4)
    result = run([*smalls, big], host_gpus=(4,))
    start = result.workloads["big"].first_start
    assert start is not None
    # The host is reserved once it has waited 300 s; the small jobs there drain within 100 s.
    assert start <= 10 + 300 + 100
    assert any(w.first_start > start for w in result.workloads.values() if w.first_start)


def test_revenue_is_full_price_on_demand_and_half_price_interruptible() -> None:
    result = run([job("od", 0, 3600, 1, OD), job("ir", 0, 3600, 1)])
    figures = summarise(result, load_catalog())
    assert Decimal(figures["revenue_on_demand_usd"]) == Decimal("0.468")
    assert Decimal(figures["revenue_interruptible_usd"]) == Decimal("0.234")
    assert Decimal(figures["revenue_usd"]) == Decimal("0.702")


def test_metering_in_60_s_records_gives_the_same_amounts_as_the_span_totals() -> None:
    result = run(
        [job("ir", 7, 1000, 2, interval=100, cost=10), job("od", 431, 170, 2, OD)],
        host_gpus=(2,),
    )
    catalog = load_catalog()
    totals = rated_lines(result, catalog)
    records = rated_lines(result, catalog, per_interval=True)
    assert [(x.resource, x.capacity_class, x.quantity_s, x.exact) for x in totals] == [
        (x.resource, x.capacity_class, x.quantity_s, x.exact) for x in records
    ]

"""Multi-node jobs in the simulator: replayed through the same engine, placed whole, reclaimed as
one, and reported apart (`gangs` in the report)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from sim_builders import IR, OD, POOL, job, run

from lowcostgpu.adapters.files import load_catalog
from lowcostgpu.core.scheduler import SchedulerConfig
from lowcostgpu.core.victim_policy import LEAST_WORK_LOST
from lowcostgpu.domain.capacity import Host
from lowcostgpu.domain.errors import ConfigError
from lowcostgpu.sim.jobs import Job
from lowcostgpu.sim.metrics import summarise
from lowcostgpu.sim.stress import Stress, generate_stress
from lowcostgpu.sim.traces import parse_csv_rows

CONFIG = SchedulerConfig(min_runtime_s=0, policy=LEAST_WORK_LOST)


def gang(name: str, submit_s: int, work_s: int, nodes: int, interval: int | None = None) -> Job:
    return replace(job(name, submit_s, work_s, 2, IR, interval, 30 if interval else 0), nodes=nodes)


def test_a_gang_runs_on_all_its_hosts_and_counts_its_work_on_all_of_them() -> None:
    result = run([gang("g", 0, 3600, 2)], host_gpus=(2, 2), config=CONFIG)
    wl = result.workloads["g"]
    assert wl.finished_at == 3600 and wl.first_start == 0
    figures = summarise(result, load_catalog())
    assert figures["gangs"]["jobs"] == 1 and figures["gangs"]["interruptions"] == 0
    assert figures["useful_preemptible_gpu_hours"] == 4.0  # 2 hosts × 2 GPUs × 1 h


def test_a_gang_waits_for_enough_hosts_and_never_starts_a_part() -> None:
    jobs = [job("small", 0, 1800, 1), gang("g", 1, 600, 2)]
    result = run(jobs, host_gpus=(2, 2), config=CONFIG)
    assert result.workloads["g"].first_start == 1800  # when the small job's host is whole again


def test_reclaiming_one_host_interrupts_the_whole_gang_and_its_loss_is_on_all_its_gpus() -> None:
    jobs = [gang("g", 0, 7200, 2), job("od", 1000, 600, 2, OD)]
    result = run(jobs, host_gpus=(2, 2), config=CONFIG)
    wl = result.workloads["g"]
    assert len(wl.interruptions) == 1 and wl.finished_at is not None
    figures = summarise(result, load_catalog())["gangs"]
    assert figures["interruptions"] == 1
    assert figures["lost_gpu_hours"] == pytest.approx(4 * 1000 / 3600, abs=0.001)


def test_the_csv_trace_takes_an_optional_nodes_column() -> None:
    hosts = [Host(f"h{i}", POOL, 2) for i in range(3)]
    header = "submit_s,duration_s,gpus,gpu_type,class,checkpoint_interval_s,checkpoint_cost_s,nodes"
    rows = [header.split(","), ["0", "60", "2", "a100-sxm4", "interruptible", "", "", "3"]]
    rows.append(["0", "60", "1", "a100-sxm4", "interruptible", "", "", ""])
    trace = parse_csv_rows(rows, hosts, source="t.csv")
    assert [j.nodes for j in trace.jobs] == [3, 1]


def test_an_on_demand_gang_row_is_refused_naming_its_line() -> None:
    hosts = [Host(f"h{i}", POOL, 2) for i in range(3)]
    header = "submit_s,duration_s,gpus,gpu_type,class,checkpoint_interval_s,checkpoint_cost_s,nodes"
    rows = [header.split(","), ["0", "60", "2", "a100-sxm4", "on-demand", "", "", "2"]]
    with pytest.raises(ConfigError, match="line 2: 2 nodes for an on-demand job"):
        parse_csv_rows(rows, hosts, source="t.csv")


def test_the_stress_trace_makes_gangs_only_when_asked_and_keeps_the_rest_as_it_was() -> None:
    plain = generate_stress(Stress(gpus=200, days=0.2), seed=1)
    gangs = generate_stress(Stress(gpus=200, days=0.2, gangs=0.2), seed=1)
    assert all(j.nodes == 1 for j in plain.jobs)
    multi = [j for j in gangs.jobs if j.nodes > 1]
    assert multi and all(2 <= j.nodes <= 4 and j.capacity_class is IR for j in multi)
    on_demand = [j for j in plain.jobs if j.capacity_class is OD]
    assert on_demand == [j for j in gangs.jobs if j.capacity_class is OD]


@pytest.mark.parametrize("hold_s", [0, 300])
def test_a_gang_that_keeps_its_survivors_restarts_when_one_host_frees(hold_s: int) -> None:
    """h0, h1: the gang; h2: on-demand work until 1,000 s. An on-demand job at 100 s takes one
    of the gang's hosts until 300 s; a small job arriving at 200 s takes the surviving host
    unless the gang holds it (until 400 s), and then the gang waits for h2 at 1,000 s."""
    jobs = [
        replace(gang("g", 0, 7200, 2), hold_survivors_s=hold_s),
        job("od1", 0, 1000, 2, OD),
        job("od2", 100, 200, 2, OD),
        job("small", 200, 5000, 2),
    ]
    config = replace(CONFIG, head_reservation_after_s=100_000)  # the hold alone keeps hosts
    result = run(jobs, host_gpus=(2, 2, 2), config=config)
    (restart_wait,) = result.workloads["g"].waits_after_interruption_s
    figures = summarise(result, load_catalog())["gangs"]
    if hold_s:
        assert restart_wait == 200 and figures["held_idle_gpu_hours"] == round(2 * 200 / 3600, 3)
    else:
        assert restart_wait == 900 and figures["held_idle_gpu_hours"] == 0

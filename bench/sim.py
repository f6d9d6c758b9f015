"""Simulator speed: the whole 149-day Alibaba trace, and how the cost grows with the fleet.

    .venv/bin/python bench/sim.py [--fleet-scale 1.0] [--factors 1,4,16] [--policy NAME]
        [--from-day D] [--days N]
    .venv/bin/python bench/sim.py --fleet-scale 0.02 --factors 85 --job-factor 4 --from-day 116
        --days 1
    .venv/bin/python bench/sim.py --backlog 1000,4000,16000

For each replication factor (hosts and jobs copied N times, the same load per GPU) it prints the
wall time of the simulation, the events handled and events per second, also per second of the
process's own CPU time (steadier than wall time when other work shares the cores). Numbers go to
docs/performance.md ("Simulator speed"); nothing here is a timed test. `--from-day D --days N`
simulates N days of the trace starting at day D (the Alibaba trace's jobs are almost all in its
last 35 days), with the submit times shifted so that day D is time 0. `--job-factor J` copies the
jobs J times more than the hosts (J × the load per GPU), so that the queue grows: the way to have
tens of thousands of jobs alive on a large fleet. `peak_alive` is the most jobs submitted and not
yet finished (queued, running or waiting for on-demand capacity) at any moment of the run; the
load average of the machine is printed before each row (the cores may be shared).
`--no-yardstick` leaves out the clairvoyant dry run at each reclaim (`sim.reclaims`), which weighs
every host of the pool: the engine's own cost per event without that measurement.

`--backlog N,…` runs a synthetic world instead, to measure the cost per event against the number
of jobs alive with the fleet held fixed: 128 GPUs, N one-GPU interruptible jobs submitted one a
second (an hour of work each, a checkpoint every 10 minutes), so that nearly all N wait in the
queue, and an 8-GPU on-demand job every 10 minutes that reclaims some of them, for 12 hours.
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import replace
from pathlib import Path

from lowcostgpu.core.policies import policy_by_name
from lowcostgpu.core.scheduler import SchedulerConfig
from lowcostgpu.domain.capacity import CapacityClass, Host, PoolKey
from lowcostgpu.sim.alibaba import read_alibaba
from lowcostgpu.sim.jobs import Job, Trace, sorted_jobs
from lowcostgpu.sim.result import SimResult
from lowcostgpu.sim.runner import Simulation

TRACE = Path(__file__).resolve().parents[2] / "shared" / "data" / "alibaba-gpu-v2023"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trace", type=Path, default=TRACE)
    parser.add_argument("--fleet-scale", type=float, default=1.0)
    parser.add_argument("--factors", default="1,4,16")
    parser.add_argument("--policy", default="least-work-lost")
    parser.add_argument("--days", type=float, default=None)
    parser.add_argument("--from-day", type=float, default=0.0)
    parser.add_argument("--job-factor", type=int, default=1)
    parser.add_argument("--no-yardstick", action="store_true")
    parser.add_argument("--backlog", default=None)
    args = parser.parse_args()
    config = SchedulerConfig(policy=policy_by_name(args.policy))
    if args.backlog is not None:
        _header(f"synthetic backlog, policy {args.policy}")
        for n in (int(k) for k in args.backlog.split(",")):
            _run(backlog(n), config, n, args.no_yardstick)
        return
    trace = read_alibaba(args.trace, fleet_scale=args.fleet_scale)
    base = from_day(trace, args.from_day).until(args.days)
    _header(f"trace {base.name}, fleet scale {args.fleet_scale}, policy {args.policy}")
    for factor in (int(f) for f in args.factors.split(",")):
        world = base.replicated(factor * args.job_factor)
        if args.job_factor > 1:
            world = replace(world, hosts=base.replicated(factor).hosts)
        _run(world, config, factor, args.no_yardstick)


def _header(title: str) -> None:
    print(title)
    print(
        "factor  hosts   gpus    jobs  peak_alive  events  engine_calls  interruptions  wall_s"
        "  events/s   cpu_s  events/cpu_s  load_avg"
    )


def _run(trace: Trace, config: SchedulerConfig, factor: int, no_yardstick: bool = False) -> None:
    load = os.getloadavg()[0]
    started, cpu_started = time.perf_counter(), time.process_time()
    simulation = (
        Simulation(trace, config, measure_reclaims=False)
        if no_yardstick
        else Simulation(trace, config)  # as a checkout without the option runs it
    )
    result = simulation.run()
    wall = time.perf_counter() - started
    cpu = time.process_time() - cpu_started
    gpus = sum(h.gpu_count for h in trace.hosts)
    interruptions = sum(len(w.interruptions) for w in result.workloads.values())
    print(
        f"{factor:>6} {len(trace.hosts):>6} {gpus:>6} {len(trace.jobs):>7} "
        f"{peak_alive(result):>11} {result.events:>7} {result.engine_calls:>13} "
        f"{interruptions:>14} {wall:>7.1f} {result.events / wall:>9.0f} {cpu:>7.1f} "
        f"{result.events / cpu:>13.0f} {load:>9.2f}",
        flush=True,
    )


def peak_alive(result: SimResult) -> int:
    """The most jobs submitted and not yet finished at one moment (a sweep over the run)."""
    changes: list[tuple[int, int]] = []
    for wl in result.workloads.values():
        changes.append((wl.submitted_at, 1))
        if wl.finished_at is not None:
            changes.append((wl.finished_at, -1))
    alive = peak = 0
    for _, change in sorted(changes):  # at one moment, finishes (-1) before arrivals
        alive += change
        peak = max(peak, alive)
    return peak


def backlog(n: int) -> Trace:
    """The synthetic world of `--backlog`: a fixed fleet and `n` jobs alive at once."""
    pool = PoolKey("eu", "a100-sxm4")
    hosts = tuple(Host(f"h{i:02d}", pool, 8) for i in range(16))
    ir = CapacityClass.INTERRUPTIBLE
    jobs = [Job(f"b{k:06d}", k, 3600, 1, pool, ir, 600, 10) for k in range(n)]
    od = CapacityClass.ON_DEMAND
    jobs += [Job(f"od{k:04d}", 600 * (k + 1), 1800, 8, pool, od) for k in range(72)]
    return Trace(f"backlog-{n}", hosts, sorted_jobs(jobs), 12 * 3600)


def from_day(trace: Trace, day: float) -> Trace:
    """The trace from `day` on, shifted so that `day` is time 0."""
    start = int(day * 86400)
    if start <= 0:
        return trace
    jobs = tuple(replace(j, submit_s=j.submit_s - start) for j in trace.jobs if j.submit_s >= start)
    horizon = None if trace.horizon_s is None else max(1, trace.horizon_s - start)
    return replace(trace, jobs=jobs, horizon_s=horizon)


if __name__ == "__main__":
    main()

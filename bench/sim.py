"""Simulator speed: the whole 149-day Alibaba trace, and how the cost grows with the fleet.

    .venv/bin/python bench/sim.py [--fleet-scale 1.0] [--factors 1,4,16] [--policy NAME]

For each replication factor (hosts and jobs copied N times, the same load per GPU) it prints the
wall time of the simulation, the events handled and events per second. Numbers go to
docs/performance.md ("Simulator speed"); nothing here is a timed test.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from lowcostgpu.core.policies import policy_by_name
from lowcostgpu.core.scheduler import SchedulerConfig
from lowcostgpu.sim.alibaba import read_alibaba
from lowcostgpu.sim.runner import Simulation

TRACE = Path(__file__).resolve().parents[2] / "shared" / "data" / "alibaba-gpu-v2023"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trace", type=Path, default=TRACE)
    parser.add_argument("--fleet-scale", type=float, default=1.0)
    parser.add_argument("--factors", default="1,4,16")
    parser.add_argument("--policy", default="least-work-lost")
    parser.add_argument("--days", type=float, default=None)
    args = parser.parse_args()
    base = read_alibaba(args.trace, fleet_scale=args.fleet_scale).until(args.days)
    config = SchedulerConfig(policy=policy_by_name(args.policy))
    print(f"trace {base.name}, fleet scale {args.fleet_scale}, policy {args.policy}")
    print("factor  hosts   gpus    jobs  events  engine_calls  interruptions  wall_s  events/s")
    for factor in (int(f) for f in args.factors.split(",")):
        trace = base.replicated(factor)
        started = time.perf_counter()
        result = Simulation(trace, config).run()
        wall = time.perf_counter() - started
        gpus = sum(h.gpu_count for h in trace.hosts)
        interruptions = sum(len(w.interruptions) for w in result.workloads.values())
        print(
            f"{factor:>6} {len(trace.hosts):>6} {gpus:>6} {len(trace.jobs):>7} "
            f"{result.events:>7} {result.engine_calls:>13} {interruptions:>14} "
            f"{wall:>7.1f} {result.events / wall:>9.0f}",
            flush=True,
        )


if __name__ == "__main__":
    main()

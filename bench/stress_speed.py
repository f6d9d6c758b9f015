"""Simulator speed on the stress trace (docs/performance.md, issue 21): process CPU of
`Simulation.run`, events per CPU-second, lost work and the warnings' figures.

    PYTHONPATH=$PWD/src .venv/bin/python bench/stress_speed.py [--gpus 10000] [--days 0.1]
        [--seed 0] [--risk-warnings on|off]
"""

from __future__ import annotations

import argparse
import time

from lowcostgpu.core.scheduler import SchedulerConfig
from lowcostgpu.sim.command import load_trace
from lowcostgpu.sim.metrics import summarise
from lowcostgpu.sim.runner import Simulation


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--gpus", type=int, default=10_000)
    parser.add_argument("--days", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--risk-warnings", choices=("on", "off"), default="on")
    args = parser.parse_args()
    trace, catalog = load_trace(f"stress:gpus={args.gpus},days=1", None, None, seed=args.seed)
    trace = trace.until(args.days)
    on = args.risk_warnings == "on"
    config = SchedulerConfig() if on else SchedulerConfig(risk_window_s=0)
    started = time.process_time()
    result = Simulation(trace, config).run()
    cpu_s = time.process_time() - started
    figures = summarise(result, catalog)
    risk = figures["risk_warnings"]
    print(
        f"stress gpus={args.gpus} days={args.days} seed={args.seed} warnings {args.risk_warnings}: "
        f"{figures['events']:,} events in {cpu_s:.1f} CPU-s = "
        f"{figures['events'] / cpu_s:,.0f} events/CPU-s; lost {figures['lost_gpu_hours']} GPU-h; "
        f"warnings {risk['warnings']}, precision within 15 min "
        f"{risk.get('precision_within_15_min')}, recall {risk.get('recall')}"
    )


if __name__ == "__main__":
    main()

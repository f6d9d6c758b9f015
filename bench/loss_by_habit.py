"""Where the lost work is: interruptions and lost GPU-hours by checkpoint habit and job size.

    PYTHONPATH=$PWD/src .venv/bin/python bench/loss_by_habit.py [--trace stress:gpus=300,days=2]
        [--seeds 0,1,2] [--policy fair-least-work-lost] [--fleet-scale 0.005]

A victim rule can only move the loss it has a choice over. This splits a policy's lost work
(pooled over seeds, as `bench/fairness.py` does) by the interruptible jobs' habit — never saves,
saves only at a notice, saves periodically (every ≤ 10 min or longer; a save of ≤ 60 s or
longer) — and by the GPUs a job holds, so that one sees which interruptions the loss comes from.
The figures are in docs/simulation.md ("Where the loss is"). Nothing here is timed.
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path

from lowcostgpu.core.policies import DEFAULT_POLICY_NAME
from lowcostgpu.core.scheduler import SchedulerConfig
from lowcostgpu.sim.command import load_trace, sim_policy
from lowcostgpu.sim.fairness import FREQUENT_CHECKPOINT_S
from lowcostgpu.sim.jobs import Job
from lowcostgpu.sim.runner import Simulation

ALIBABA = Path(__file__).resolve().parents[2] / "shared" / "data" / "alibaba-gpu-v2023"


def habit(job: Job) -> str:
    """The job's checkpoint habit, split at the fairness figures' frequent-saver line
    (`sim.fairness.FREQUENT_CHECKPOINT_S`, 10 min)."""
    if job.checkpoint_interval_s is None:
        return "saves only at a notice" if job.checkpoint_cost_s else "never saves"
    frequent = job.checkpoint_interval_s <= FREQUENT_CHECKPOINT_S
    often = "every ≤ 10 min" if frequent else "every > 10 min"
    quick = "save ≤ 60 s" if job.checkpoint_cost_s <= 60 else "save > 60 s"
    return f"{often}, {quick}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trace", default="stress:gpus=300,days=2")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--policy", default=DEFAULT_POLICY_NAME)
    parser.add_argument("--fleet-scale", type=float, default=None)
    args = parser.parse_args()
    trace_spec = f"alibaba:{ALIBABA}" if args.trace == "alibaba" else args.trace
    scale = args.fleet_scale or (0.005 if trace_spec.startswith("alibaba:") else 1.0)
    # (habit, GPUs) -> [jobs, interruptions, lost GPU-seconds]
    groups: dict[tuple[str, int], list[int]] = defaultdict(lambda: [0, 0, 0])
    per_seed: list[str] = []
    for seed in (int(s) for s in args.seeds.split(",")):
        trace, _ = load_trace(trace_spec, None, None, seed=seed, fleet_scale=scale)
        config = SchedulerConfig(policy=sim_policy(args.policy, seed))
        result = Simulation(trace, config).run()
        seed_lost = 0
        for wl in result.workloads.values():
            job = wl.job
            if not job.capacity_class.preemptible:
                continue
            group = groups[(habit(job), job.total_gpus)]
            group[0] += 1
            group[1] += len(wl.interruptions)
            group[2] += wl.lost_s * job.total_gpus
            seed_lost += wl.lost_s * job.total_gpus
        per_seed.append(f"seed {seed}: {seed_lost / 3600:,.1f}")
    total = sum(g[2] for g in groups.values()) or 1
    print(f"{trace_spec} · {args.policy} · lost GPU-h by seed: {', '.join(per_seed)}")
    print("| habit | GPUs | jobs | interruptions | lost GPU-h | share of the loss |")
    print("|---|---|---|---|---|---|")
    for (name, gpus), (jobs, interruptions, lost) in sorted(
        groups.items(), key=lambda kv: (-kv[1][2], kv[0])
    ):
        print(
            f"| {name} | {gpus} | {jobs:,} | {interruptions:,} | {lost / 3600:,.1f} | "
            f"{lost / total:.1%} |"
        )


if __name__ == "__main__":
    main()

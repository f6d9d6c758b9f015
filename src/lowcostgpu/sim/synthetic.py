"""A synthetic trace for what-if studies: Poisson arrivals with a configurable mix.

`--trace synthetic` or `--trace synthetic:hours=72,per_hour=30,on_demand=0.3,mean_work_h=2`:
jobs arrive as a Poisson process (`per_hour` on average) for `hours`; a share `on_demand` of them
is on-demand, the rest interruptible; work is exponential with mean `mean_work_h`; GPU counts are
1, 2, 4 or 8 (60/20/12/8 %, only sizes that fit a host of the pool); the pool is drawn in
proportion to its GPUs; interruptible jobs get the checkpoint habits of `mix.CHECKPOINT_HABITS`.
The run lasts `hours` (jobs still running then are cut).
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, fields

from lowcostgpu.domain.capacity import CapacityClass, Host
from lowcostgpu.domain.errors import InvalidRequest
from lowcostgpu.domain.fleet import gpus_per_pool
from lowcostgpu.sim.jobs import Job, Trace, sorted_jobs
from lowcostgpu.sim.mix import checkpoint_habit, weighted_pool
from lowcostgpu.sim.traces import largest_host

GPU_SIZES = ((1, 60), (2, 20), (4, 12), (8, 8))


@dataclass(frozen=True, slots=True)
class Mix:
    hours: float = 72.0
    per_hour: float = 30.0
    on_demand: float = 0.3
    mean_work_h: float = 2.0

    def __post_init__(self) -> None:
        if self.hours <= 0 or self.per_hour <= 0 or self.mean_work_h <= 0:
            raise InvalidRequest("synthetic: hours, per_hour and mean_work_h must be > 0")
        if not 0 <= self.on_demand <= 1:
            raise InvalidRequest("synthetic: on_demand is a share, from 0 to 1")


def parse_mix(spec: str) -> Mix:
    """`synthetic` or `synthetic:key=value,…` (keys: hours, per_hour, on_demand, mean_work_h)."""
    _, _, options = spec.partition(":")
    known = {f.name for f in fields(Mix)}
    values: dict[str, float] = {}
    for item in filter(None, (p.strip() for p in options.split(","))):
        key, eq, text = item.partition("=")
        if not eq or key.strip() not in known:
            raise InvalidRequest(
                f"synthetic trace option {item!r} is not understood",
                hint=f"write key=value with keys {', '.join(sorted(known))}",
            )
        try:
            values[key.strip()] = float(text)
        except ValueError:
            raise InvalidRequest(f"synthetic: {key} must be a number, got {text!r}") from None
    return Mix(**values)


def generate(mix: Mix, hosts: list[Host], seed: int = 0) -> Trace:
    rng = random.Random(seed)
    pools = sorted(gpus_per_pool(hosts).items())
    largest = largest_host(hosts)
    horizon = int(mix.hours * 3600)
    jobs: list[Job] = []
    t = 0.0
    while True:
        t += rng.expovariate(mix.per_hour / 3600)
        if t >= horizon:
            break
        job_id = f"syn-{len(jobs):06d}"
        gpus = rng.choices([g for g, _ in GPU_SIZES], [w for _, w in GPU_SIZES])[0]
        fitting = [(p, w) for p, w in pools if largest[p] >= gpus] or [
            (p, w) for p, w in pools if largest[p] == max(largest.values())
        ]
        pool = weighted_pool(seed, job_id, fitting)
        assert pool is not None
        on_demand = rng.random() < mix.on_demand
        interval, cost = (None, 0) if on_demand else checkpoint_habit(seed, job_id)
        jobs.append(
            Job(
                id=job_id,
                submit_s=int(t),
                work_s=max(1, int(rng.expovariate(1 / (mix.mean_work_h * 3600)))),
                gpus=min(gpus, largest[pool]),
                pool=pool,
                capacity_class=CapacityClass.ON_DEMAND
                if on_demand
                else CapacityClass.INTERRUPTIBLE,
                checkpoint_interval_s=interval,
                checkpoint_cost_s=cost,
            )
        )
    notes: Mapping[str, object] = {"format": "synthetic", "mix": mix.__repr__(), "seed": seed}
    return Trace("synthetic", tuple(hosts), sorted_jobs(jobs), horizon, dict(notes))

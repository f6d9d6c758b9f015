"""A stress trace: what a GPU cloud sees, with its own fleet, generated from a seed.

`--trace stress` or `--trace stress:gpus=300,days=2,peak=0.9,…` (options below). The other
traces either barely contend (the Alibaba pods use at most 71 of its 6,212 GPUs at once) or run
on a 24-GPU demo fleet; this one puts about 10,000 GPUs under the load of a busy cloud, so that
victim choices, warnings and credits can be measured where they matter. docs/simulation.md, "A
stress trace", explains every choice; `bench/stress_params.py` prints what comes from the data.

Where each number comes from ("Alibaba" = cluster-trace-gpu-v2023, "openb", Weng et al., "Beware
of Fragmentation", USENIX ATC'23, `../shared/data/alibaba-gpu-v2023/`, the 6,203 GPU pods that
were scheduled; "assumption" = ours, no public figure used):

- Fleet (`FLEET_SHAPE`): ~28 % of the GPUs on 1-GPU hosts, ~34 % on 4-GPU, ~38 % on 8-GPU hosts,
  in three GPU types of the shipped catalog (h100-sxm, a100-sxm4, rtx-4090), one region. At the
  default 10,000 GPUs that is 4,125 hosts, 68 % of them 1-GPU. Assumption, shaped like the
  held-out replay of issue 21 (10,412 GPUs on 4,278 hosts, 2.43 GPUs a host, most of them
  1-GPU); the Alibaba fleet is mostly 2- and 8-GPU nodes (518 and 617 of 1,213), not a cloud's.
- GPUs per job (`JOB_GPUS`): 1, 4 or 8 (85 / 10 / 5 % of jobs, among the sizes a pool's hosts
  fit). Assumption; the Alibaba pods are even more 1-GPU: 98.8 % of them (6,129 of 6,203), 87.2 %
  of their GPU-hours; 8-GPU pods are 0.7 % of pods and 11.7 % of GPU-hours.
- Durations: lognormal, median `median_h` (1 h), sigma `sigma` (1.9), cut at `max_h` (168 h).
  Sigma from Alibaba: the standard deviation of log(lifetime) of the GPU pods is 1.91 (BE 1.84,
  LS 1.82), lifetime = deletion − scheduled, median 0.18 h, p90 2.05 h, p99 41 h. The median is
  an assumption: Alibaba's 0.18 h (many short inference and test pods) would make ~5× as many jobs
  for the same GPU-hours; a rented cloud GPU runs longer. The cut at a week is an assumption.
  Durations "heavy-tailed, from minutes to weeks" is also what the Philly study reports (Jeon et
  al., "Analysis of Large-Scale Multi-Tenant GPU Clusters for DNN Training Workloads", ATC'19);
  we take no number from it.
- Daily curve (`HOURLY_ARRIVALS`): Alibaba GPU-pod creations per hour of day (trace second mod
  86,400; hour 0 is the trace's own first hour, the trace gives no clock time), ÷ their mean,
  averaged over 3 hours (h−1, h, h+1) to remove noise: peak 1.43 (hour 18), trough 0.47 (hour 13).
- Loads, as shares of the capacity's GPU-hours: on-demand `on_demand` (0.66) on average, its
  peak hour `peak` (0.95), interruptible `interruptible` (0.32), all the issue's held-out replay
  (assumption, not measured data). The on-demand arrival rate at hour h is on_demand × m(h) ×
  (pool GPUs) ÷ (mean GPU-hours of a job), where m is the curve stretched about its mean so that
  its highest hour is peak ÷ on_demand; interruptible arrivals are steady. The mean GPU-hours
  per job is exact for the cut lognormal (`mean_hours`), so the expected load is the share asked.
  `peak` is a share of the arrivals: the GPUs held by on-demand work swing less, as long jobs
  carry over (0.54–0.78 of capacity at the defaults; docs/simulation.md).
- Checkpoint habits of interruptible jobs (`STRESS_HABITS`): every 10 min in 30 s (30 %), every
  hour in 400 s (25 %), only at a notice in 60 s (15 %), never (30 %). Assumption; the first two
  are `mix.CHECKPOINT_HABITS`' habits. "Only at a notice" is a job with no checkpoint interval and
  a cost > 0: it saves once at SIGTERM (sim/workload.py; where that is not implemented it behaves
  as a job that never saves).
- Multi-node jobs (`gangs`, default 0: none): that share of the interruptible jobs asks for
  2 to `gang_nodes` (4) hosts of its GPU count, uniformly; their arrival rate is lowered so that
  the interruptible load stays the share asked. Assumption (Alibaba's openb pods say nothing of
  workers); a gang's choice comes from its own seeded stream, so `gangs=0` is the trace as before.
  `gang_hold_s` (0: off) is every gang's `--hold-survivors-s`: how long a reclaimed gang keeps
  its other hosts (docs/simulation.md measures whether it pays).
- Warm start: the trace begins in its steady state, not on an empty fleet. Jobs are drawn from
  `max_h` before time 0; those that would still be running at 0 are submitted at 0 with the work
  they have left (on-demand first). Without it a day would never fill: with the defaults, 54 % of
  the GPU-hours are in jobs longer than a day.

Every draw comes from a `random.Random` seeded by (seed, pool, class) and the habit from
`mix.draw(seed, job id)`: the same seed and options give the same trace.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, fields
from typing import Final

from lowcostgpu.domain.capacity import CapacityClass, Host, PoolKey
from lowcostgpu.domain.catalog import Catalog
from lowcostgpu.domain.errors import ConfigError, InvalidRequest
from lowcostgpu.domain.fleet import gpus_per_pool
from lowcostgpu.sim.jobs import Job, Trace, sorted_jobs
from lowcostgpu.sim.mix import checkpoint_habit

REGION: Final = "stress"
# (GPU type, GPUs per host, share of the fleet's GPUs): 1-GPU 0.28, 4-GPU 0.34, 8-GPU 0.38.
FLEET_SHAPE: Final = (
    ("h100-sxm", 8, 0.30),
    ("a100-sxm4", 8, 0.08),
    ("a100-sxm4", 4, 0.22),
    ("a100-sxm4", 1, 0.05),
    ("rtx-4090", 4, 0.12),
    ("rtx-4090", 1, 0.23),
)
# (GPUs, weight): the sizes a job asks for (only those a host of its pool can hold).
JOB_GPUS: Final = ((1, 85), (4, 10), (8, 5))
# Alibaba GPU-pod creations per hour of day ÷ the mean, 3-hour average (bench/stress_params.py).
HOURLY_ARRIVALS: Final = (
    1.41, 1.22, 1.20, 1.20, 1.21, 1.06, 0.94, 0.84, 0.69, 0.64, 0.63, 0.65,
    0.56, 0.47, 0.51, 0.66, 0.92, 1.26, 1.43, 1.37, 1.25, 1.18, 1.34, 1.37,
)  # fmt: skip
# (share in hundredths, checkpoint interval s or None, checkpoint cost s). An interval of None
# with a cost > 0 saves only at a notice, once, in that many seconds.
STRESS_HABITS: Final = (
    (30, 600, 30),
    (25, 3600, 400),
    (15, None, 60),
    (30, None, 0),
)
MIN_GPUS: Final = 20  # below this some pool would have no host


@dataclass(frozen=True, slots=True)
class Stress:
    """The stress trace's options (docs/simulation.md, "A stress trace")."""

    gpus: int = 10_000
    days: float = 7.0
    on_demand: float = 0.66
    peak: float = 0.95
    interruptible: float = 0.32
    median_h: float = 1.0
    sigma: float = 1.9
    max_h: float = 168.0
    gangs: float = 0.0
    gang_nodes: int = 4
    gang_hold_s: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.gangs <= 1 or self.gang_nodes < 2:
            raise InvalidRequest(
                f"stress: gangs is a share (0 to 1, got {self.gangs}) and gang_nodes ≥ 2 "
                f"(got {self.gang_nodes})",
                hint="for example gangs=0.05,gang_nodes=4",
            )
        if self.gpus < MIN_GPUS:
            raise InvalidRequest(
                f"stress: gpus must be ≥ {MIN_GPUS} (so that every pool has a host), "
                f"got {self.gpus}"
            )
        for name in ("days", "median_h", "max_h"):
            if getattr(self, name) <= 0:
                raise InvalidRequest(f"stress: {name} must be > 0, got {getattr(self, name)}")
        if self.sigma < 0:
            raise InvalidRequest(f"stress: sigma must be ≥ 0, got {self.sigma}")
        if self.on_demand < 0 or self.interruptible < 0:
            raise InvalidRequest(
                "stress: on_demand and interruptible are shares of the capacity, ≥ 0",
                hint="for example on_demand=0.66,interruptible=0.32",
            )
        if self.on_demand + self.interruptible <= 0:
            raise InvalidRequest("stress: on_demand and interruptible cannot both be 0")
        if self.on_demand > 0 and self.peak < self.on_demand:
            raise InvalidRequest(
                f"stress: peak ({self.peak}) is the on-demand share at the busiest hour: it "
                f"cannot be below the mean, on_demand ({self.on_demand})",
                hint=f"give peak ≥ {self.on_demand} (peak = on_demand: a flat day)",
            )
        if self.max_h < self.median_h:
            raise InvalidRequest(
                f"stress: max_h ({self.max_h}) is below median_h ({self.median_h})",
                hint="the cut must be above the median",
            )
        demand_curve(self.on_demand, self.peak)  # refuses a peak the curve cannot reach


def parse_stress(spec: str) -> Stress:
    """`stress` or `stress:key=value,…` (keys: the fields of `Stress`)."""
    _, _, options = spec.partition(":")
    kinds = {f.name: f.type for f in fields(Stress)}
    values: dict[str, float | int] = {}
    for item in filter(None, (p.strip() for p in options.split(","))):
        key, eq, text = (part.strip() for part in item.partition("="))
        if not eq or key not in kinds:
            raise InvalidRequest(
                f"stress trace option {item!r} is not understood",
                hint=f"write key=value with keys {', '.join(kinds)}",
            )
        if key in values:
            raise InvalidRequest(f"stress: {key} is given twice", hint="give each option once")
        values[key] = _number(key, text, whole=kinds[key] == "int")
    return Stress(**values)  # type: ignore[arg-type]


def _number(key: str, text: str, *, whole: bool) -> float | int:
    try:
        value = int(text) if whole else float(text)
    except ValueError:
        what = "a whole number" if whole else "a number"
        raise InvalidRequest(f"stress: {key} must be {what}, got {text!r}") from None
    if not math.isfinite(value):
        raise InvalidRequest(f"stress: {key} must be a finite number, got {text!r}")
    return value


def demand_curve(on_demand: float, peak: float) -> tuple[float, ...]:
    """Hour-of-day multipliers of the on-demand arrival rate: `HOURLY_ARRIVALS` stretched about
    their mean (1) so that the busiest hour is `peak ÷ on_demand`; a flat day if they are equal."""
    base_mean = sum(HOURLY_ARRIVALS) / len(HOURLY_ARRIVALS)
    base = [m / base_mean for m in HOURLY_ARRIVALS]
    if on_demand <= 0:
        return tuple(1.0 for _ in base)
    stretch = (peak / on_demand - 1) / (max(base) - 1)
    curve = tuple(1 + stretch * (m - 1) for m in base)
    if min(curve) < 0:
        top = on_demand * (1 + (max(base) - 1) / (1 - min(base)))
        raise InvalidRequest(
            f"stress: a peak of {peak} with on_demand {on_demand} would need a negative "
            "arrival rate at the quietest hour",
            hint=f"give peak ≤ {top:.3f} for on_demand={on_demand}",
        )
    return curve


def mean_hours(median_h: float, sigma: float, max_h: float) -> float:
    """E[min(X, max_h)] for X lognormal with that median and sigma: the mean duration of a job."""
    if sigma == 0:
        return min(median_h, max_h)
    mu, cut = math.log(median_h), math.log(max_h)
    below = math.exp(mu + sigma**2 / 2) * _phi((cut - mu - sigma**2) / sigma)
    return below + max_h * (1 - _phi((cut - mu) / sigma))


def _phi(z: float) -> float:
    return 0.5 * (1 + math.erf(z / math.sqrt(2)))


def stress_hosts(gpus: int) -> list[Host]:
    """The fleet: for each row of `FLEET_SHAPE`, round(share × gpus ÷ host size) hosts."""
    hosts: list[Host] = []
    for gpu_type, size, share in FLEET_SHAPE:
        pool = PoolKey(REGION, gpu_type)
        count = round(share * gpus / size)
        hosts += [Host(f"{gpu_type}-{size}g-{i:05d}", pool, size) for i in range(count)]
    return hosts


def check_catalog(hosts: Sequence[Host], catalog: Catalog) -> None:
    """The stress fleet's GPU types are the shipped catalog's; a --catalog must price them."""
    missing = sorted({h.pool.gpu_type for h in hosts} - set(catalog.gpu_types))
    if missing:
        raise ConfigError(
            f"the stress trace's GPU types {', '.join(missing)} are not in the catalog",
            hint="leave out --catalog, or give one that prices "
            + ", ".join(sorted({t for t, _, _ in FLEET_SHAPE})),
        )


def generate_stress(options: Stress, seed: int = 0, fleet_scale: float = 1.0) -> Trace:
    if not 0 < fleet_scale <= 1:
        raise ConfigError(f"--fleet-scale must be in (0, 1], got {fleet_scale}")
    gpus = round(options.gpus * fleet_scale)
    if gpus < MIN_GPUS:
        raise ConfigError(
            f"--fleet-scale {fleet_scale} leaves {gpus} of the stress trace's "
            f"{options.gpus} GPUs; it needs at least {MIN_GPUS}",
            hint="give a larger --fleet-scale, or set gpus= in the trace options",
        )
    hosts = stress_hosts(gpus)
    largest: dict[PoolKey, int] = {}
    for h in hosts:
        largest[h.pool] = max(largest.get(h.pool, 0), h.gpu_count)
    horizon = int(options.days * 86400)
    jobs: list[Job] = []
    warm = 0
    for pool, pool_gpus in gpus_per_pool(hosts).items():
        sizes = [(g, w) for g, w in JOB_GPUS if g <= largest[pool]]
        for klass in CapacityClass:
            for job in _pool_jobs(options, seed, pool, pool_gpus, sizes, klass, horizon):
                jobs.append(job)
                warm += job.submit_s == 0
    notes = {
        "format": "stress",
        "options": repr(options),
        "seed": seed,
        "fleet_scale": fleet_scale,
        "gpus": sum(h.gpu_count for h in hosts),
        "warm_start_jobs": warm,
        "mean_job_hours": round(mean_hours(options.median_h, options.sigma, options.max_h), 4),
    }
    return Trace("stress", tuple(hosts), sorted_jobs(jobs), horizon, notes)


def _pool_jobs(
    options: Stress,
    seed: int,
    pool: PoolKey,
    pool_gpus: int,
    sizes: list[tuple[int, int]],
    klass: CapacityClass,
    horizon_s: int,
) -> Iterator[Job]:
    """One pool's jobs of one class, from `max_h` before 0 (the warm start) to the horizon."""
    on_demand = klass is CapacityClass.ON_DEMAND
    share = options.on_demand if on_demand else options.interruptible
    if share <= 0:
        return
    curve = demand_curve(options.on_demand, options.peak) if on_demand else (1.0,) * 24
    mean_gpus = sum(g * w for g, w in sizes) / sum(w for _, w in sizes)
    job_gpu_h = mean_gpus * mean_hours(options.median_h, options.sigma, options.max_h)
    gangs = 0.0 if on_demand else options.gangs
    job_gpu_h *= 1 + gangs * ((2 + options.gang_nodes) / 2 - 1)  # the mean nodes of a job
    per_s = [share * pool_gpus * m / job_gpu_h / 3600 for m in curve]
    rng = random.Random(f"stress:{seed}:{pool}:{klass.value}")
    gang_rng = random.Random(f"stress-gangs:{seed}:{pool}")
    mu, max_s = math.log(options.median_h * 3600), options.max_h * 3600
    tag = "d" if on_demand else "i"  # on-demand first among the jobs of one second
    for n, t in enumerate(_arrivals(rng, per_s, -int(max_s), horizon_s)):
        work = int(min(max_s, rng.lognormvariate(mu, options.sigma)))
        gpus = rng.choices([g for g, _ in sizes], [w for _, w in sizes])[0]
        submit = math.ceil(t)
        if submit < 0:  # warm start: still running at 0 with what it has left
            submit, work = 0, submit + work
            if work <= 0:
                continue
        job_id = f"st-{tag}-{pool.gpu_type}-{n:07d}"
        interval, cost = (None, 0) if on_demand else stress_habit(seed, job_id)
        nodes = 1
        if gangs and gang_rng.random() < gangs:
            nodes = gang_rng.randint(2, options.gang_nodes)
        yield Job(
            id=job_id,
            submit_s=submit,
            work_s=max(1, work),
            gpus=gpus,
            pool=pool,
            capacity_class=klass,
            checkpoint_interval_s=interval,
            checkpoint_cost_s=cost,
            nodes=nodes,
            hold_survivors_s=options.gang_hold_s if nodes > 1 else 0,
        )


def _arrivals(rng: random.Random, per_s: list[float], start_s: int, end_s: int) -> Iterator[float]:
    """A Poisson process whose rate is `per_s[hour of day]`, from start_s to end_s."""
    t = float(start_s)
    while t < end_s:
        hour_end = (math.floor(t / 3600) + 1) * 3600
        rate = per_s[math.floor(t / 3600) % 24]
        step = rng.expovariate(rate) if rate > 0 else math.inf
        if t + step >= hour_end:
            t = float(hour_end)  # memoryless: draw again at the next hour's rate
            continue
        t += step
        if t < end_s:
            yield t


def stress_habit(seed: int, name: str) -> tuple[int | None, int]:
    """(checkpoint_interval_s or None, checkpoint_cost_s) of an interruptible stress job."""
    return checkpoint_habit(seed, name, STRESS_HABITS, "stress-checkpoint")

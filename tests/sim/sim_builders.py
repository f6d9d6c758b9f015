"""Small hand-made worlds for the simulator tests."""

from __future__ import annotations

from lowcostgpu.core.scheduler import SchedulerConfig
from lowcostgpu.domain.capacity import CapacityClass, Host, PoolKey
from lowcostgpu.sim.jobs import Job, Trace, sorted_jobs
from lowcostgpu.sim.result import SimResult
from lowcostgpu.sim.runner import Simulation

POOL = PoolKey("eu-west", "a100-sxm4")
OD, IR = CapacityClass.ON_DEMAND, CapacityClass.INTERRUPTIBLE


def job(
    name: str,
    submit_s: int,
    work_s: int,
    gpus: int = 1,
    cls: CapacityClass = IR,
    interval: int | None = None,
    cost: int = 0,
) -> Job:
    return Job(name, submit_s, work_s, gpus, POOL, cls, interval, cost)


def run(
    jobs: list[Job], host_gpus: tuple[int, ...] = (2,), config: SchedulerConfig | None = None
) -> SimResult:
    hosts = tuple(Host(f"h{i}", POOL, g) for i, g in enumerate(host_gpus))
    trace = Trace("hand-made", hosts, sorted_jobs(jobs), None)
    return Simulation(trace, config or SchedulerConfig()).run()

"""What the simulator replays: jobs (one workload each) on a fleet of hosts, up to a horizon.

Every trace reader (our CSV, the Alibaba trace, the synthetic generator) produces a `Trace`, so the
simulation itself never knows where the jobs came from.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from lowcostgpu.domain.capacity import CapacityClass, Host, PoolKey
from lowcostgpu.domain.errors import InvalidRequest


@dataclass(frozen=True, slots=True)
class Job:
    """One workload: `work_s` seconds of useful work on `gpus` GPUs of `pool`.

    A job that checkpoints saves its progress every `checkpoint_interval_s` seconds of work, and
    each save takes `checkpoint_cost_s` (no progress meanwhile). None: it never checkpoints, and an
    interruption sends it back to the start.
    """

    id: str
    submit_s: int
    work_s: int
    gpus: int
    pool: PoolKey
    capacity_class: CapacityClass
    checkpoint_interval_s: int | None = None
    checkpoint_cost_s: int = 0
    nodes: int = 1  # a multi-node job (a gang): `nodes` hosts with `gpus` GPUs each
    hold_survivors_s: int = 0  # a gang's `--hold-survivors-s` (0: off)

    def __post_init__(self) -> None:
        if self.work_s < 1 or self.gpus < 1 or self.submit_s < 0 or self.nodes < 1:
            raise InvalidRequest(f"job {self.id}: work_s, gpus and nodes must be ≥ 1, submit_s ≥ 0")
        if self.checkpoint_interval_s is not None and self.checkpoint_interval_s < 1:
            raise InvalidRequest(f"job {self.id}: checkpoint_interval_s must be ≥ 1")
        if self.checkpoint_cost_s < 0:
            raise InvalidRequest(f"job {self.id}: checkpoint_cost_s must be ≥ 0")

    @property
    def total_gpus(self) -> int:
        """GPUs across all its hosts: what its lost work and its useful work are counted on."""
        return self.gpus * self.nodes

    @property
    def checkpoints(self) -> bool:
        return self.checkpoint_interval_s is not None


@dataclass(frozen=True, slots=True)
class Trace:
    """Jobs sorted by submit time, the fleet they run on, and how far to simulate."""

    name: str
    hosts: tuple[Host, ...]
    jobs: tuple[Job, ...]
    horizon_s: int | None  # None: until the last job is done
    # How the source was mapped (counts of skipped rows and the like), copied into the report.
    notes: Mapping[str, Any] = field(default_factory=dict)

    def until(self, days: float | None) -> Trace:
        """The first `days` days of the trace (jobs submitted later are left out)."""
        if days is None:
            return self
        if days <= 0:
            raise InvalidRequest(f"--days must be > 0, got {days}")
        horizon = int(days * 86400)
        if self.horizon_s is not None:
            horizon = min(horizon, self.horizon_s)
        jobs = tuple(j for j in self.jobs if j.submit_s < horizon)
        return replace(self, jobs=jobs, horizon_s=horizon)

    def replicated(self, factor: int) -> Trace:
        """The fleet and the jobs `factor` times over (copies `~1`, `~2`…): a bigger world with
        the same load per GPU, to measure how the simulation's cost grows."""
        if factor < 1:
            raise InvalidRequest(f"the replication factor must be ≥ 1, got {factor}")
        if factor == 1:
            return self
        hosts = tuple(
            replace(h, id=f"{h.id}~{k}" if k else h.id) for k in range(factor) for h in self.hosts
        )
        jobs = sorted(
            (replace(j, id=f"{j.id}~{k}" if k else j.id) for k in range(factor) for j in self.jobs),
            key=lambda j: (j.submit_s, j.id),
        )
        notes = {**self.notes, "replicated": factor}
        return replace(self, hosts=hosts, jobs=tuple(jobs), notes=notes)


def sorted_jobs(jobs: list[Job]) -> tuple[Job, ...]:
    return tuple(sorted(jobs, key=lambda j: (j.submit_s, j.id)))

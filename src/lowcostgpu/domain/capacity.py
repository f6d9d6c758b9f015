"""Capacity values: pools, hosts, GPU indices and allocations.

An allocation holds specific GPU indices on one host, because a workload is started with
`CUDA_VISIBLE_DEVICES` set to exactly those indices; counting GPUs alone would let two workloads
share a device.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final

from lowcostgpu.domain.errors import InvalidRequest

Timestamp = int
"""Seconds since the Unix epoch (UTC). The shell reads the clock; the core only receives it."""

# The drain's grace when an allocation does not say (`core.drain.DEFAULT_GRACE_PERIOD_S`, which
# the domain cannot import: the same figure, checked equal by tests/core/test_fairness.py).
ALLOCATION_GRACE_PERIOD_S: Final = 300


class CapacityClass(StrEnum):
    """Whether an allocation can be reclaimed.

    Instances say on-demand/interruptible, clusters say standard/preemptible; they are the same
    two classes, so both spellings parse to one of these.
    """

    ON_DEMAND = "on-demand"
    INTERRUPTIBLE = "interruptible"

    @classmethod
    def parse(cls, text: str) -> CapacityClass:
        try:
            return _CLASS_ALIASES[text.strip().lower()]
        except KeyError:
            raise InvalidRequest(
                f"unknown capacity type {text!r}",
                hint="use on-demand (alias standard) or interruptible (alias preemptible)",
            ) from None

    @property
    def preemptible(self) -> bool:
        return self is CapacityClass.INTERRUPTIBLE

    @property
    def compute_class_label(self) -> str:
        """The value of the `lowcostgpu.io/compute-class` node label."""
        return "preemptible" if self.preemptible else "standard"


_CLASS_ALIASES = {
    "on-demand": CapacityClass.ON_DEMAND,
    "ondemand": CapacityClass.ON_DEMAND,
    "standard": CapacityClass.ON_DEMAND,
    "interruptible": CapacityClass.INTERRUPTIBLE,
    "preemptible": CapacityClass.INTERRUPTIBLE,
    "spot": CapacityClass.INTERRUPTIBLE,
}


@dataclass(frozen=True, order=True, slots=True)
class PoolKey:
    """A pool is one GPU type in one region."""

    region: str
    gpu_type: str

    def __str__(self) -> str:
        return f"{self.region}/{self.gpu_type}"


@dataclass(frozen=True, slots=True)
class Host:
    """A machine with `gpu_count` GPUs, indexed 0..gpu_count-1."""

    id: str
    pool: PoolKey
    gpu_count: int
    cordoned: bool = False

    def __post_init__(self) -> None:
        if self.gpu_count < 1:
            raise InvalidRequest(f"host {self.id}: gpu_count must be ≥ 1, got {self.gpu_count}")


@dataclass(frozen=True, slots=True)
class Allocation:
    """GPUs held on one host by one subject (an instance or a cluster node).

    `last_checkpoint_at` is the time of the workload's last reported checkpoint (None: never
    reported); victim choice charges the GPU-seconds since then as the work a reclaim would lose.
    `save_s` and `saves_on_notice` are what the workload said of itself with its checkpoints: the
    seconds a save takes (the largest of its last few reports, whole seconds rounded up) and
    whether it saves when the notice comes; `grace_period_s` is the time a reclaim gives it to
    (`notice_save_s`: when the plane believes the claim).
    """

    id: str
    subject_id: str
    host_id: str
    pool: PoolKey
    gpu_indices: frozenset[int]
    capacity_class: CapacityClass
    started_at: Timestamp
    account_id: str = ""
    last_checkpoint_at: Timestamp | None = None
    last_interrupted_at: Timestamp | None = None
    interruption_count: int = 0
    # Seconds the subject ran in its earlier runs (before this allocation): with the current
    # runtime, the hours of running that the interruption rate is measured against.
    earlier_run_s: int = 0
    priority: int = 0
    # A draining allocation has had its notice; its GPUs are spoken for until the workload exits.
    draining: bool = False
    # Draining allocations on the same GPUs that must be gone before this workload starts.
    waits_for: frozenset[str] = field(default_factory=frozenset)
    save_s: int | None = None
    saves_on_notice: bool = False
    grace_period_s: int = ALLOCATION_GRACE_PERIOD_S
    # A member of a multi-node instance (a gang): the GPUs of all its members. Reclaiming one
    # member interrupts them all, so victim choice prices the member at the gang's GPUs.
    gang_gpus: int = 0

    @property
    def gpus(self) -> int:
        return len(self.gpu_indices)

    @property
    def priced_gpus(self) -> int:
        """The GPUs a reclaim of this allocation interrupts: the whole gang's for a member."""
        return self.gang_gpus or len(self.gpu_indices)

    @property
    def preemptible(self) -> bool:
        return self.capacity_class.preemptible

    @property
    def progress_mark(self) -> Timestamp:
        """When the work a reclaim would lose began: the last checkpoint, else the start."""
        if self.last_checkpoint_at is not None and self.last_checkpoint_at > self.started_at:
            return self.last_checkpoint_at
        return self.started_at

    def progress_since(self, now: Timestamp) -> Timestamp:
        """`progress_mark`, never later than `now` (a report from the future counts as now)."""
        return min(self.progress_mark, now)

    def work_at_risk_gpu_s(self, now: Timestamp) -> int:
        """GPU-seconds lost if this allocation were reclaimed at `now`."""
        return self.priced_gpus * max(0, now - self.progress_since(now))

    def runtime_s(self, now: Timestamp) -> int:
        return max(0, now - self.started_at)

    @property
    def notice_save_s(self) -> int | None:
        """The seconds this workload takes to save everything at a notice, when that claim is
        believed; None when it is not, and a reclaim loses the work since the last checkpoint.

        Believed only from a workload that has reported a checkpoint (the claim comes with one;
        a claim without one proves nothing) whose save, at the largest of its recent reports,
        fits in its grace period (a save cut by SIGKILL keeps nothing). A workload that says
        nothing is never assumed to save."""
        save_s = self.save_s
        if (
            not self.saves_on_notice
            or save_s is None
            or self.last_checkpoint_at is None
            or save_s > self.grace_period_s
        ):
            return None
        return save_s

    def lost_at_notice_gpu_s(self, now: Timestamp) -> int:
        """GPU-seconds a reclaim at `now` costs the workload: its save time when it believably
        saves at the notice (it saves then however recent its last checkpoint, and its GPUs are
        held meanwhile), else the work since its last checkpoint (`work_at_risk_gpu_s`)."""
        save_s = self.notice_save_s
        return self.work_at_risk_gpu_s(now) if save_s is None else self.priced_gpus * save_s

"""The runtime port: start, signal, kill and observe workloads on GPUs.

Reports are level-triggered: `observe` returns what is true now for every workload the runtime
knows (started, exited with a code, failed to start), every time it is called. The lifecycle
ignores a fact it has already taken into account, so a report seen twice — after a crash of the
control plane, say — changes nothing, and no report is lost because none is consumed.

A runtime may also say what changed (`ChangeReporting.changes_since`): the reports that differ
from those of an earlier call, so that a server watching 10,000 workloads pays per tick for what
changed, not for what runs. It is still level-triggered underneath: a cursor of None asks for
every workload, which is what the loop does after it (re)loads its state, after a tick that
failed, and every few minutes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, Protocol

from lowcostgpu.domain.capacity import Timestamp
from lowcostgpu.domain.errors import InvalidRequest


@dataclass(frozen=True, slots=True)
class VolumeMount:
    name: str
    size_gb: int
    path: str  # where the runtime mounts it for the workload (LOWCOSTGPU_VOLUME)


@dataclass(frozen=True, slots=True)
class WorkloadStart:
    """Everything needed to start one run of an instance on its allocation."""

    instance_id: str
    allocation_id: str
    host_id: str
    gpu_indices: tuple[int, ...]
    restart_count: int
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    volume: VolumeMount | None = None
    grace_period_s: int = 300
    account_id: str = ""  # whose workload: a sandboxing runtime runs each account as its own uid
    # A member of a multi-node instance: its rank of `nodes`, and `gang_id` (its rank 0's
    # allocation id, the same for every member of the run). A runtime that must publish where
    # rank 0 is (Kubernetes: a Service) does it from these.
    rank: int = 0
    nodes: int = 1
    gang_id: str = ""


def check_command(start: WorkloadStart) -> None:
    """Every runtime refuses a start with nothing to run, in the same words."""
    if not start.argv:
        raise InvalidRequest(
            f"workload of {start.instance_id} has an empty command",
            hint="give the command to run, e.g. ['python', 'train.py']",
        )


WorkloadPhase = Literal["starting", "running", "exited", "start_failed"]


@dataclass(frozen=True, slots=True)
class WorkloadReport:
    allocation_id: str
    instance_id: str
    phase: WorkloadPhase
    exit_code: int | None = None
    reason: str = ""
    at: Timestamp | None = None  # when the runtime saw the phase begin, if it knows


class Runtime(Protocol):
    def start(self, start: WorkloadStart) -> None:
        """Start the workload; starting an allocation that was already started does nothing."""
        ...

    def signal(self, allocation_id: str, signal: Literal["SIGTERM"]) -> None:
        """Signal the workload's whole process group; nothing happens if it is gone."""
        ...

    def kill(self, allocation_id: str) -> None:
        """SIGKILL the workload's whole process group; nothing happens if it is gone."""
        ...

    def observe(self) -> list[WorkloadReport]:
        """What is true now of every workload the runtime knows."""
        ...

    def forget(self, allocation_id: str) -> None:
        """The control plane has taken the exit into account: drop what is kept of it."""
        ...

    def logs(self, allocation_id: str, tail_bytes: int = 65536) -> str:
        """The workload's stdout and stderr, the last `tail_bytes` of them."""
        ...


class GangAddresses(Protocol):
    """A runtime that says where a gang's members reach its rank-0 member (optional: without
    it, rank 0's host id is the address)."""

    def gang_address(self, gang_id: str, master_host_id: str) -> str:
        """The address every member of the gang `gang_id` uses for rank 0 on that host."""
        ...


class ChangeReporting(Protocol):
    """A runtime that can say which reports changed (optional: the loop falls back to
    `observe`)."""

    def changes_since(self, cursor: int | None) -> tuple[list[WorkloadReport], int]:
        """With `cursor` None: every workload, as `observe` (and a full look at what runs).
        Else: the workloads whose report differs from what they reported when `cursor` was
        returned, in allocation order (a workload forgotten meanwhile is left out). With the
        cursor for the next call. Each caller keeps its own cursor. Cost: O(changes), or
        O(workloads) for None."""
        ...


class Volumes(Protocol):
    """Volumes outlive their instance's interruptions; only the user deletes them."""

    def ensure(
        self, account_id: str, name: str, size_gb: int, *, region: str | None = None
    ) -> VolumeMount:
        """Create the volume on first use (with its size limit), or return the existing one.
        `region`: where the instance that mounts it runs (a runtime over several regions makes
        the volume there; one region's runtime ignores it)."""
        ...

    def check_fits(
        self, account_id: str, name: str, size_gb: int | None, *, region: str | None = None
    ) -> None:
        """Refuse, at launch, a new volume this runtime can never hold (`InvalidRequest` saying
        how much fits); an existing volume, or one the runtime's provisioner decides on, passes.
        `size_gb` None: an existing volume is attached. `region`: where the instance runs; a
        runtime over several regions refuses a volume that lives in another one."""
        ...

    def usage_bytes(self, account_id: str, name: str) -> int: ...

    def delete(self, account_id: str, name: str) -> None:
        """Remove the volume and its data; nothing happens if it does not exist (idempotent:
        the outbox may carry the effect out twice)."""
        ...

    def resize(self, account_id: str, name: str, size_gb: int) -> None:
        """Grow the volume's limit to `size_gb`; nothing happens if it is that large already or
        does not exist (a volume not made yet is made at its recorded size by `ensure`). Never
        shrinks: the control plane refuses a shrink before anything is written."""
        ...

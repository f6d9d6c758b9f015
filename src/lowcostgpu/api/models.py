"""Request and response bodies of the API (Pydantic). Money travels as exact decimal strings."""

from __future__ import annotations

import math
from typing import Annotated, Any, Final

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from lowcostgpu.api.models_input import (
    MAX_ARGS,
    MAX_ENV_VARS,
    MAX_INT64,
    MAX_NAME_CHARS,
    check_command,
    check_env,
    check_volume,
)
from lowcostgpu.app.plane import ControlPlane
from lowcostgpu.core.queue import QueueEntry
from lowcostgpu.core.rating import invoice_of
from lowcostgpu.domain.capacity import CapacityClass
from lowcostgpu.ports.store import EventRecord
from lowcostgpu.ports.store_records import StoredInstance


class InstanceIn(BaseModel):
    """Strict: a JSON number is a count and `true` is not; every string is checked before the
    launch is stored (`models_input`), so what is accepted can start."""

    model_config = ConfigDict(extra="forbid", strict=True)

    gpu: str = Field(
        description="GPU type, e.g. a100-sxm4 (see the prices)",
        min_length=1,
        max_length=MAX_NAME_CHARS,
    )
    type: str = Field("interruptible", description="interruptible or on-demand", max_length=32)
    gpus: int = Field(1, ge=1, le=64, description="GPUs per node")
    nodes: int = Field(
        1, ge=1, le=256, description="hosts, `gpus` each, placed all at once (interruptible)"
    )
    hold_survivors_s: int = Field(
        0,
        ge=0,
        le=600,
        description="multi-node: after a reclaim, keep the other hosts this long (billed)",
    )
    region: str | None = Field(None, min_length=1, max_length=MAX_NAME_CHARS)
    template: str | None = Field(
        None,
        description="a launch template (see `templates`)",
        min_length=1,
        max_length=MAX_NAME_CHARS,
    )
    command: list[str] = Field(
        default_factory=list,
        description=f"argv, run without a shell (no NUL; at most {MAX_ARGS} arguments)",
    )
    env: Annotated[dict[str, str], AfterValidator(check_env)] = Field(
        default_factory=dict,
        description="names [A-Za-z_][A-Za-z0-9_]*, values without NUL "
        f"(at most {MAX_ENV_VARS} variables)",
    )
    volume: Annotated[str | None, AfterValidator(check_volume)] = Field(
        None, description="NAME:SIZE with the size in GB, e.g. ckpts:50GB", max_length=100
    )
    auto_requeue: bool = True
    grace_period_s: int = Field(300, ge=0, le=300)

    @model_validator(mode="after")
    def _command(self) -> InstanceIn:
        check_command(self.command, runs_alone=self.template in (None, "shell"))
        return self


class QueueOut(BaseModel):
    """Where a queued instance stands; `eta_at` is None when there is no honest estimate yet."""

    position: int
    gpus_ahead: int
    eta_at: int | None
    eta_s: int | None

    @classmethod
    def of(cls, entry: QueueEntry, now: int) -> QueueOut:
        eta_s = None if entry.eta_at is None else max(0, entry.eta_at - now)
        return cls(
            position=entry.position, gpus_ahead=entry.gpus_ahead, eta_at=entry.eta_at, eta_s=eta_s
        )


MAX_SAVE_S: Final = 86_400  # a save that takes longer than a day is no save time


class CheckpointIn(BaseModel):
    """What a workload reports (extra fields such as `size_bytes` are kept by the SDK, ignored
    here); strict: a step is a JSON integer the store can hold.

    `save_s` is how long the workload measured this save to take (seconds, up to a day) and
    `saves_on_notice` whether it saves when a notice comes (`true` needs a `save_s`: a claim
    without a time cannot be weighed). Both optional: a client that sends neither is a plain
    reporter. Victim choice believes the claim as `Allocation.notice_save_s` says."""

    model_config = ConfigDict(strict=True)

    step: int = Field(ge=0, le=MAX_INT64)
    path: str | None = Field(None, max_length=4096)
    duration_s: float | None = Field(None, ge=0, allow_inf_nan=False)
    save_s: float | None = Field(None, ge=0, le=MAX_SAVE_S, allow_inf_nan=False)
    saves_on_notice: bool = False

    @model_validator(mode="after")
    def _claim_has_a_time(self) -> CheckpointIn:
        if self.saves_on_notice and self.save_s is None:
            raise ValueError(
                "saves_on_notice is true but save_s is missing: send the seconds the save took "
                "(the SDK's Checkpointer sends both)"
            )
        return self

    @property
    def whole_save_s(self) -> int | None:
        """`save_s` in whole seconds, rounded up (a save never looks shorter than it was)."""
        return None if self.save_s is None else math.ceil(self.save_s)


class CompleteIn(BaseModel):
    model_config = ConfigDict(strict=True)

    step: int | None = Field(None, ge=0, le=MAX_INT64)


class InstanceOut(BaseModel):
    id: str
    status: str
    gpu: str
    region: str
    gpus: int
    nodes: int
    type: str
    price_per_hour: str
    restart_count: int
    interruption_count: int
    last_checkpoint_step: int | None
    host_id: str | None
    gpu_indices: list[int]
    host_ids: list[str]  # every host it holds, by rank (a multi-node instance has several)
    hold_survivors_s: int
    held_hosts: list[str]  # a requeued multi-node instance's hosts held for it, until held_until
    held_until: int | None
    queue_position: int | None
    queue: QueueOut | None
    notice_at: int | None
    deadline: int | None
    exit_code: int | None
    failure_reason: str | None
    volume: str | None
    created_at: int
    # The launch answer only: the checkpoint step the volume it attached already held (a run
    # that resumes from its volume starts from there). None otherwise.
    volume_checkpoint_step: int | None = None

    @classmethod
    def of(
        cls, plane: ControlPlane, stored: StoredInstance, queue: QueueEntry | None = None
    ) -> InstanceOut:
        """`queue`: the instance's place in its queue, when it is queued."""
        s, launch = stored.state, stored.launch
        gpu = plane.catalog.gpu(s.pool.gpu_type)
        rate = (
            gpu.interruptible_per_gpu_hour
            if s.capacity_class is CapacityClass.INTERRUPTIBLE
            else gpu.on_demand_per_gpu_hour
        )
        volume = f"{launch.volume_name}:{launch.volume_size_gb}GB" if launch.volume_name else None
        return cls(
            id=s.id,
            status=str(s.status),
            gpu=s.pool.gpu_type,
            region=s.pool.region,
            gpus=s.gpus,
            nodes=s.nodes,
            type=str(s.capacity_class),
            price_per_hour=f"{rate.times(s.total_gpus).amount.normalize():f}",
            restart_count=s.restart_count,
            interruption_count=s.interruption_count,
            last_checkpoint_step=s.last_checkpoint_step,
            host_id=s.host_id,
            gpu_indices=list(s.gpu_indices),
            host_ids=[] if s.host_id is None else [s.host_id, *(m.host_id for m in s.members)],
            hold_survivors_s=s.hold_survivors_s,
            held_hosts=list(s.held_hosts) if s.held else [],
            held_until=s.held_until if s.held else None,
            queue_position=queue.position if queue else None,
            queue=QueueOut.of(queue, plane.clock.now()) if queue else None,
            notice_at=s.notice_at,
            deadline=s.deadline,
            exit_code=s.exit_code,
            failure_reason=s.failure_reason,
            volume=volume,
            created_at=launch.created_at,
        )


class UsageOut(BaseModel):
    instance_id: str
    gpu_seconds: int
    metered_through: int | None
    amount: str
    amount_exact: str

    @classmethod
    def of(cls, instance_id: str, account_id: str, plane: ControlPlane) -> UsageOut:
        store = plane.store
        totals = store.usage_totals(account_id=account_id, subject_id=instance_id)
        end = store.metered_through({instance_id}).get((instance_id, "gpu"))
        invoice = invoice_of(account_id, totals, plane.catalog, 0, end or 0)
        return cls(
            instance_id=instance_id,
            gpu_seconds=sum(t.quantity_s for t in totals if t.kind == "gpu"),
            metered_through=end,
            amount=f"{invoice.total.amount:f}",
            amount_exact=f"{invoice.total_exact.amount:f}",
        )


class EventOut(BaseModel):
    seq: int | None
    at: int
    type: str
    reason: str
    object_kind: str
    object_id: str
    message: str
    data: dict[str, Any]

    @classmethod
    def of(cls, e: EventRecord) -> EventOut:
        return cls(
            seq=e.seq,
            at=e.at,
            type=str(e.type),
            reason=str(e.reason),
            object_kind=e.object_kind,
            object_id=e.object_id,
            message=e.message,
            data=dict(e.data),
        )

"""Instances: launch, list, get, logs (follow), stop, resume, delete, usage, timeline."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import PlainTextResponse, StreamingResponse

from lowcostgpu.api.context import AccountId, ApiContext, Ctx, owned_instance
from lowcostgpu.api.models import EventOut, InstanceIn, InstanceOut, UsageOut
from lowcostgpu.app import queries
from lowcostgpu.app.launch import LaunchRequest
from lowcostgpu.core.lifecycle import InstanceState
from lowcostgpu.domain.status import InstanceStatus
from lowcostgpu.ports.store import StoredInstance

router = APIRouter(prefix="/v1", tags=["instances"])
FOLLOW_POLL_S = 0.5
FINAL = frozenset({InstanceStatus.SUCCEEDED, InstanceStatus.FAILED, InstanceStatus.STOPPED})
LOG_LIMIT = 2**24


def _out(ctx: ApiContext, stored: StoredInstance) -> InstanceOut:
    queue = None
    if stored.state.status is InstanceStatus.QUEUED:
        queue = queries.queue_entries(ctx.plane).get(stored.state.id)
    return InstanceOut.of(ctx.plane, stored, queue)


@router.post("/instances", status_code=201)
def launch(ctx: Ctx, account_id: AccountId, body: InstanceIn) -> InstanceOut:
    """On-demand: placed now (reclaiming interruptible work if needed) or 409
    `insufficient_capacity` with what is free. Interruptible: queued, with position and ETA."""
    ctx.accounts.check_can_launch(account_id)
    request = LaunchRequest(
        account_id=account_id,
        gpu_type=body.gpu,
        type=body.type,
        gpus=body.gpus,
        region=body.region,
        template=body.template,
        command=tuple(body.command),
        env=body.env,
        volume=body.volume,
        auto_requeue=body.auto_requeue,
        grace_period_s=body.grace_period_s,
    )
    return _out(ctx, ctx.plane.launch(request))


@router.get("/instances")
def list_instances(
    ctx: Ctx, account_id: AccountId, all: Annotated[bool, Query(description="deleted too")] = False
) -> list[InstanceOut]:
    queue = queries.queue_entries(ctx.plane)
    return [
        InstanceOut.of(ctx.plane, s, queue.get(s.state.id))
        for s in ctx.plane.store.instances(include_deleted=all)
        if s.launch.account_id == account_id
    ]


@router.get("/instances/{instance_id}")
def get_instance(ctx: Ctx, account_id: AccountId, instance_id: str) -> InstanceOut:
    return _out(ctx, owned_instance(ctx, instance_id, account_id))


@router.post("/instances/{instance_id}/stop")
def stop(ctx: Ctx, account_id: AccountId, instance_id: str) -> InstanceOut:
    owned_instance(ctx, instance_id, account_id)
    return _out(ctx, ctx.plane.stop(instance_id))


@router.post("/instances/{instance_id}/resume")
def resume(ctx: Ctx, account_id: AccountId, instance_id: str) -> InstanceOut:
    owned_instance(ctx, instance_id, account_id)
    ctx.accounts.check_can_launch(account_id)
    return _out(ctx, ctx.plane.resume(instance_id))


@router.delete("/instances/{instance_id}")
def delete(ctx: Ctx, account_id: AccountId, instance_id: str) -> InstanceOut:
    owned_instance(ctx, instance_id, account_id)
    return _out(ctx, ctx.plane.delete(instance_id))


@router.get("/instances/{instance_id}/usage")
def usage(ctx: Ctx, account_id: AccountId, instance_id: str) -> UsageOut:
    owned_instance(ctx, instance_id, account_id)
    return UsageOut.of(instance_id, account_id, ctx.plane)


@router.get("/instances/{instance_id}/events")
def timeline(
    ctx: Ctx,
    account_id: AccountId,
    instance_id: str,
    after: Annotated[int, Query(ge=0, description="only events with a larger seq")] = 0,
) -> list[EventOut]:
    """The instance's events in order: its timeline (queued, started, preempted, resumed…)."""
    owned_instance(ctx, instance_id, account_id)
    store = ctx.plane.store  # the store filters by object (an index), not the account's whole log
    events = store.events(
        after_seq=after, account_id=account_id, object_id=instance_id, limit=100_000
    )
    return [EventOut.of(e) for e in events]


@router.get("/instances/{instance_id}/logs", response_class=PlainTextResponse, response_model=None)
def logs(
    ctx: Ctx,
    account_id: AccountId,
    instance_id: str,
    tail_bytes: Annotated[int, Query(ge=1, le=LOG_LIMIT)] = 65536,
    follow: Annotated[bool, Query(description="keep streaming until the run ends")] = False,
) -> PlainTextResponse | StreamingResponse:
    """The latest run's output; with `follow`, streamed as it grows, across restarts."""
    state = owned_instance(ctx, instance_id, account_id).state
    if not follow:
        allocation = _latest_allocation(state)
        text = ctx.runtime.logs(allocation, tail_bytes) if allocation else ""
        return PlainTextResponse(text)
    return StreamingResponse(_follow(ctx, instance_id, tail_bytes), media_type="text/plain")


def _latest_allocation(state: InstanceState) -> str | None:
    if state.allocation_id:
        return state.allocation_id
    return state.runs[-1].allocation_id if state.runs else None


def _follow(ctx: ApiContext, instance_id: str, tail_bytes: int) -> Iterator[str]:
    """Poll the runtime's log of the current run; a new run (after a restart) is followed too."""
    allocation: str | None = None
    position = 0  # characters of the current run's log already sent
    while True:
        state = ctx.plane.store.instance(instance_id).state
        current = _latest_allocation(state)
        if current is not None:
            full = ctx.runtime.logs(current, LOG_LIMIT)
            if current != allocation:
                allocation, position = current, max(0, len(full) - tail_bytes)
            if len(full) > position:
                yield full[position:]
                position = len(full)
        if state.status in FINAL or state.status is InstanceStatus.DELETED:
            return
        time.sleep(FOLLOW_POLL_S)

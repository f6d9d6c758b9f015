"""Instances: launch, list, get, logs (follow), stop, resume, delete, usage, timeline.

The list is paged, newest first, by a cursor (the position after a page's last instance, opaque
to clients: urlsafe base64 of `created_at:id`), so it reads only the caller's rows, a page at a
time, through the store's index, however long the history of every account grows.
"""

from __future__ import annotations

import base64
import re
from typing import Annotated

import anyio.to_thread
from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import PlainTextResponse

from lowcostgpu.api import log_follow, longpoll
from lowcostgpu.api.context import AccountId, ApiContext, Ctx, owned_instance
from lowcostgpu.api.models import EventOut, InstanceIn, InstanceOut, UsageOut
from lowcostgpu.api.models_input import MAX_INT64
from lowcostgpu.app import queries
from lowcostgpu.app.events import MAX_SEQ
from lowcostgpu.app.launch import LaunchRequest
from lowcostgpu.domain.errors import InvalidRequest
from lowcostgpu.domain.status import InstanceStatus
from lowcostgpu.ports.store_records import StoredInstance

router = APIRouter(prefix="/v1", tags=["instances"])
LOG_LIMIT = log_follow.LOG_LIMIT
PAGE, MAX_PAGE = 50, 500  # instances per page of GET /v1/instances: the default, the most
NEXT_CURSOR = "X-Next-Cursor"
ID_PREFIX = re.compile(r"[a-z0-9-]{1,64}")  # an id's alphabet: what the store's range walk needs


def _out(ctx: ApiContext, stored: StoredInstance) -> InstanceOut:
    queue = None
    if stored.state.status is InstanceStatus.QUEUED:
        queue = queries.queue_entry_of(ctx.plane, stored.state.id)
    return InstanceOut.of(ctx.plane, stored, queue)


@router.post("/instances", status_code=201, response_model=InstanceOut)
async def launch(ctx: Ctx, account_id: AccountId, body: InstanceIn) -> Response:
    """On-demand: placed now (reclaiming interruptible work if needed) or 409
    `insufficient_capacity` with what is free. Interruptible: queued, with position and ETA.

    One hop to the thread pool for the balance, the decision and the answer's JSON (built once
    by Pydantic, not validated again by FastAPI): hops cost as much as the decision."""
    return await anyio.to_thread.run_sync(_launched, ctx, account_id, body)


def _launched(ctx: ApiContext, account_id: str, body: InstanceIn) -> Response:
    ctx.accounts.check_can_launch(account_id)
    request = LaunchRequest(
        account_id=account_id,
        gpu_type=body.gpu,
        type=body.type,
        gpus=body.gpus,
        nodes=body.nodes,
        hold_survivors_s=body.hold_survivors_s,
        region=body.region,
        template=body.template,
        command=tuple(body.command),
        env=body.env,
        volume=body.volume,
        auto_requeue=body.auto_requeue,
        grace_period_s=body.grace_period_s,
    )
    stored = ctx.plane.launch(request)
    out = _out(ctx, stored)
    held = ctx.plane.volume_service.held_step(account_id, stored.launch.volume_name)
    out.volume_checkpoint_step = held  # the volume's checkpoints: what the run resumes from
    body_json = out.model_dump_json(by_alias=True)
    return Response(body_json, status_code=201, media_type="application/json")


@router.get("/instances")
def list_instances(
    ctx: Ctx,
    account_id: AccountId,
    request: Request,
    response: Response,
    all: Annotated[bool, Query(description="deleted too")] = False,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE, description="instances per page")] = PAGE,
    cursor: Annotated[str | None, Query(description="the previous page's X-Next-Cursor")] = None,
    status: Annotated[
        list[str] | None, Query(description="only these statuses (repeatable, or a,b)")
    ] = None,
    id_prefix: Annotated[
        str | None,
        Query(
            description="only ids starting with this (by id, one page): resolves a short id",
            max_length=64,
        ),
    ] = None,
) -> list[InstanceOut]:
    """The caller's instances, newest first, a page at a time: `X-Next-Cursor` (and a `Link`
    `rel="next"`) say how to get the next page, and are absent on the last one. Only the
    caller's rows are read (`Store.instances_page`, an index): a page costs O(limit).

    With `id_prefix`, the caller's instances whose id starts with it, by id, at most `limit`
    (`Store.instances_with_prefix`, an index: the id's range or the account's rows): what the
    CLI resolves `i-c24` by, asking for 2 or more to see an ambiguity."""
    if id_prefix is not None:
        return _with_prefix(ctx, account_id, id_prefix, limit, all, cursor or status)
    statuses = _statuses(status)
    found = ctx.plane.store.instances_page(
        account_id,
        limit=limit + 1,  # one more than shown: whether a next page exists, without asking again
        before=_decode_cursor(cursor),
        statuses=statuses,
        include_deleted=all,
    )
    page = found[:limit]
    if len(found) > limit:
        after = _encode_cursor(page[-1])
        response.headers[NEXT_CURSOR] = after
        response.headers["Link"] = f'<{request.url.include_query_params(cursor=after)}>; rel="next"'
    queue = queries.queue_entries(ctx.plane, (s.state.id for s in page))
    return [InstanceOut.of(ctx.plane, s, queue.get(s.state.id)) for s in page]


def _with_prefix(
    ctx: ApiContext, account_id: str, prefix: str, limit: int, all: bool, other: object
) -> list[InstanceOut]:
    if other:
        raise InvalidRequest(
            "id_prefix takes neither cursor nor status", hint="ask GET /v1/instances?id_prefix=i-…"
        )
    if not ID_PREFIX.fullmatch(prefix):
        raise InvalidRequest(
            f"{prefix[:64]!r} is not the start of an instance id",
            hint="ids are like i-c24f09a1: lower-case letters, digits and dashes",
        )
    found = ctx.plane.store.instances_with_prefix(
        account_id, prefix, limit=limit, include_deleted=all
    )
    queue = queries.queue_entries(ctx.plane, (s.state.id for s in found))
    return [InstanceOut.of(ctx.plane, s, queue.get(s.state.id)) for s in found]


def _encode_cursor(last: StoredInstance) -> str:
    """Opaque to clients: the (created_at, id) of a page's last instance, as urlsafe base64."""
    text = f"{last.launch.created_at}:{last.state.id}"
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def _decode_cursor(cursor: str | None) -> tuple[int, str] | None:
    if cursor is None:
        return None
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        at, sep, instance_id = text.partition(":")
        if not sep or not instance_id or not at.isdigit():
            raise ValueError(text)
        return int(at), instance_id
    except ValueError:  # binascii.Error and UnicodeDecodeError are ValueErrors
        raise InvalidRequest(
            f"cursor {cursor[:80]!r} is not a cursor of GET /v1/instances",
            hint="pass the X-Next-Cursor header of the previous page as it came, or none",
        ) from None


def _statuses(values: list[str] | None) -> frozenset[InstanceStatus] | None:
    """`?status=a&status=b` or `?status=a,b`; None: no filter."""
    if not values:
        return None
    names = {n.strip() for v in values for n in v.split(",") if n.strip()}
    valid = {s.value for s in InstanceStatus}
    unknown = sorted(names - valid)
    if unknown:
        raise InvalidRequest(
            f"unknown status {', '.join(unknown)}",
            hint=f"valid statuses: {', '.join(s.value for s in InstanceStatus)}",
        )
    return frozenset(InstanceStatus(n) for n in names) or None


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
    after: Annotated[int, Query(ge=0, le=MAX_SEQ, description="only events with a larger seq")] = 0,
) -> list[EventOut]:
    """The instance's events in order: its timeline (queued, started, preempted, resumed…)."""
    owned_instance(ctx, instance_id, account_id)
    store = ctx.plane.store  # the store filters by object (an index), not the account's whole log
    events = store.events(
        after_seq=after, account_id=account_id, object_id=instance_id, limit=100_000
    )
    return [EventOut.of(e) for e in events]


@router.get(
    "/instances/{instance_id}/logs",
    response_class=PlainTextResponse,
    response_model=None,
    responses=longpoll.TOO_MANY,
)
async def logs(
    ctx: Ctx,
    account_id: AccountId,
    request: Request,
    instance_id: str,
    tail_bytes: Annotated[int, Query(ge=1, le=LOG_LIMIT)] = 65536,
    follow: Annotated[bool, Query(description="keep streaming until the run ends")] = False,
    run: Annotated[
        int | None,
        Query(ge=0, le=MAX_INT64, description="the run of this restart count (0: first)"),
    ] = None,
    previous: Annotated[bool, Query(description="the run before the latest")] = False,
) -> Response:
    """The latest run's output (or an earlier run's: `run`, `previous`; 404 for a run that does
    not exist, or whose log the runtime no longer keeps); with `follow`, the latest run streamed
    as it grows, across restarts, by a follower that holds no thread (`api.log_follow`); beyond
    the cap of waiting requests 429."""
    stored = await anyio.to_thread.run_sync(owned_instance, ctx, instance_id, account_id)
    if run is not None and previous:
        raise InvalidRequest(
            "give run or previous, not both", hint="previous=true is the run before the latest"
        )
    if follow and (run is not None or previous):
        raise InvalidRequest(
            "follow streams the latest run only", hint="leave out follow to read an earlier run"
        )
    if not follow:
        text = await anyio.to_thread.run_sync(
            log_follow.run_log, ctx, stored.state, run, previous, tail_bytes
        )
        return PlainTextResponse(text)
    watch = longpoll.watch_of(request, ctx.plane.store)
    try:
        release = watch.hold(account_id)
    except longpoll.TooManyWaiting as exc:
        return longpoll.too_many(exc, "long-polls and log followers")
    stream = log_follow.follow(ctx, watch, instance_id, tail_bytes)
    return log_follow.Held(stream, release)

"""Events: the caller's account's events, filtered, and a long-poll that resumes from a cursor.

`GET /v1/events?after=SEQ&wait_s=N` answers at once when events after SEQ exist, otherwise
waits up to N seconds for the first one to be committed. A follower keeps the last seq it got
and asks again from there: nothing is missed and nothing comes twice.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from lowcostgpu.api.context import AccountId, Ctx
from lowcostgpu.api.models import EventOut
from lowcostgpu.app import events as event_log

router = APIRouter(prefix="/v1", tags=["events"])


@router.get("/events")
def events(
    ctx: Ctx,
    account_id: AccountId,
    after: Annotated[int, Query(ge=0, description="only events with a larger seq")] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 200,
    object: Annotated[
        str | None, Query(description="an object id, or kind/id (instance/i-…)")
    ] = None,
    reason: Annotated[str | None, Query(description="e.g. Preempted")] = None,
    since: Annotated[int | None, Query(ge=0, description="events at or after this time")] = None,
    wait_s: Annotated[
        float, Query(ge=0, le=event_log.MAX_WAIT_S, description="long-poll: wait for one")
    ] = 0,
) -> list[EventOut]:
    """The account's events in seq order (immutable); with `wait_s`, a long-poll."""
    where = event_log.EventFilter(object_ref=object, reason=reason, since=since)
    where.check()
    store = ctx.plane.store
    if wait_s > 0:
        found = event_log.wait_for(
            store, account_id, after=after, where=where, limit=limit, wait_s=wait_s
        )
    else:
        found = event_log.find(store, account_id, after=after, where=where, limit=limit)
    return [EventOut.of(e) for e in found]

"""Events: the caller's account's events, filtered, and a long-poll that resumes from a cursor.

`GET /v1/events?after=SEQ&wait_s=N` answers at once when events after SEQ exist, otherwise
waits up to N seconds for the first one to be committed. A follower keeps the last seq it got
and asks again from there: nothing is missed and nothing comes twice.

Every answer carries `X-Events-Latest-Seq`, the account's latest seq when the read began, so a
page that shows only some events (a filter, `newest=true`) still tells where to follow from: the
larger of it and the last seq received. `newest=true` answers the last `limit` matches (still in
seq order), `before=SEQ` pages back from there.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response

from lowcostgpu.api.context import AccountId, Ctx
from lowcostgpu.api.models import EventOut
from lowcostgpu.app import events as event_log

router = APIRouter(prefix="/v1", tags=["events"])

LATEST_SEQ = "X-Events-Latest-Seq"


@router.get("/events")
def events(
    ctx: Ctx,
    account_id: AccountId,
    response: Response,
    after: Annotated[int, Query(ge=0, description="only events with a larger seq")] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 200,
    object: Annotated[
        str | None, Query(description="an object id, or kind/id (instance/i-…)")
    ] = None,
    reason: Annotated[str | None, Query(description="e.g. Preempted")] = None,
    since: Annotated[int | None, Query(ge=0, description="events at or after this time")] = None,
    before: Annotated[int | None, Query(ge=1, description="only events with a smaller seq")] = None,
    newest: Annotated[bool, Query(description="the last `limit` matches, not the first")] = False,
    wait_s: Annotated[
        float, Query(ge=0, le=event_log.MAX_WAIT_S, description="long-poll: wait for one")
    ] = 0,
) -> list[EventOut]:
    """The account's events in seq order (immutable); with `wait_s`, a long-poll."""
    where = event_log.EventFilter(object_ref=object, reason=reason, since=since)
    where.check()
    store = ctx.plane.store
    page = event_log.wait_for(
        store,
        account_id,
        after=after,
        where=where,
        limit=limit,
        wait_s=wait_s,
        before=before,
        newest=newest,
    )
    response.headers[LATEST_SEQ] = str(page.latest_seq)
    return [EventOut.of(e) for e in page.events]

"""Events: the caller's account's events, filtered, and a long-poll that resumes from a cursor.

`GET /v1/events?after=SEQ&wait_s=N` answers at once when events after SEQ exist, otherwise
waits up to N seconds for the first one to be committed. A follower keeps the last seq it got
and asks again from there: nothing is missed and nothing comes twice. A waiting poll holds no
thread and costs no read of its own until its account gets an event (`api.longpoll`); beyond
the cap of waiting polls the answer is 429 with `Retry-After`.

Every answer carries `X-Events-Latest-Seq`, the account's latest seq when the read began, so a
page that shows only some events (a filter, `newest=true`) still tells where to follow from: the
larger of it and the last seq received. `newest=true` answers the last `limit` matches (still in
seq order), `before=SEQ` pages back from there. Seqs and times are bounded by what the store
holds (`MAX_SEQ`): a larger one is a clear 422, not an overflow.
"""

from __future__ import annotations

from functools import partial
from typing import Annotated

import anyio.to_thread
from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse

from lowcostgpu.api import longpoll
from lowcostgpu.api.context import AccountId, Ctx
from lowcostgpu.api.models import EventOut
from lowcostgpu.app import events as event_log

router = APIRouter(prefix="/v1", tags=["events"])

LATEST_SEQ = "X-Events-Latest-Seq"
MAX_SEQ = event_log.MAX_SEQ


@router.get("/events", response_model=list[EventOut], responses=longpoll.TOO_MANY)
async def events(
    ctx: Ctx,
    account_id: AccountId,
    request: Request,
    after: Annotated[int, Query(ge=0, le=MAX_SEQ, description="only events with a larger seq")] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 200,
    object: Annotated[
        str | None, Query(description="an object id, or kind/id (instance/i-…)")
    ] = None,
    reason: Annotated[str | None, Query(description="e.g. Preempted")] = None,
    since: Annotated[
        int | None, Query(ge=0, le=MAX_SEQ, description="events at or after this time")
    ] = None,
    before: Annotated[
        int | None, Query(ge=1, le=MAX_SEQ, description="only events with a smaller seq")
    ] = None,
    newest: Annotated[bool, Query(description="the last `limit` matches, not the first")] = False,
    wait_s: Annotated[
        float, Query(ge=0, le=event_log.MAX_WAIT_S, description="long-poll: wait for one")
    ] = 0,
) -> JSONResponse:
    """The account's events in seq order (immutable); with `wait_s`, a long-poll."""
    where = event_log.EventFilter(object_ref=object, reason=reason, since=since)
    where.check()
    store = ctx.plane.store
    if wait_s == 0:  # a listing: a read in the pool of ordinary requests, no mark to take
        find = partial(event_log.find, store, account_id, after=after, where=where, limit=limit)
        page = await anyio.to_thread.run_sync(partial(find, before=before, newest=newest))
        return _answer(page)
    watch = longpoll.watch_of(request, store)
    look = partial(
        event_log.look, store, account_id, where=where, limit=limit, before=before, newest=newest
    )
    page, mark = await watch.read(look, after=after)
    if not page.events:
        try:
            with watch.slot(account_id):
                plain = where == event_log.EventFilter() and before is None and not newest
                limit_if_plain = limit if plain else None
                waited = _wait(watch, look, account_id, page, mark, after, wait_s, limit_if_plain)
                page = await longpoll.unless_gone(request, waited) or page
        except longpoll.TooManyWaiting as exc:
            return longpoll.too_many(exc, "long-polls")
    return _answer(page)


def _answer(page: event_log.Page) -> JSONResponse:
    body = [EventOut.of(e).model_dump(mode="json") for e in page.events]
    return JSONResponse(body, headers={LATEST_SEQ: str(page.latest_seq)})


async def _wait(
    watch: longpoll.EventWatch,
    look: partial[tuple[event_log.Page, int]],
    account_id: str,
    page: event_log.Page,
    mark: int,
    after: int,
    wait_s: float,
    limit_if_plain: int | None,
) -> event_log.Page:
    """Look again each time the watch says the account may have a new event, until one matches
    or `wait_s` has passed. Each empty look moves the cursor up to the latest seq it saw, so a
    filter that matches nothing old reads the account's history once at most. A poll without
    filters (`limit_if_plain` set) answers with the events the watch hands over: no read."""
    deadline = watch.loop.time() + min(wait_s, event_log.MAX_WAIT_S)
    cursor = max(after, page.latest_seq)
    while (left_s := deadline - watch.loop.time()) > 0:
        handed = await watch.wait(account_id, mark, left_s)
        if limit_if_plain is not None and handed is not None:
            latest = handed[-1].seq or cursor
            handed = [e for e in handed if (e.seq or 0) > cursor]  # `after` may be past them
            if handed:
                return event_log.Page(handed[:limit_if_plain], latest)
        page, mark = await watch.read(look, after=cursor)
        if page.events:
            return page
        cursor = max(cursor, page.latest_seq)
    return page

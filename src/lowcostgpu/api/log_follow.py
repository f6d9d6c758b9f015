"""Following a workload's log (`GET /v1/instances/{id}/logs?follow=true`) without a thread.

Why: the stream was a sync generator that slept between looks, so Starlette ran it in a worker
thread and each follower held one for its whole run. Here a follower is a coroutine: between
looks it awaits a timer, and each look (the instance's row and its run's log) is one brief read
in the long-polls' thread limiter (`api.longpoll`). A follower holds one of the capped waiting
slots for as long as it streams.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence

from fastapi.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from lowcostgpu.api.context import ApiContext
from lowcostgpu.api.longpoll import EventWatch
from lowcostgpu.core.lifecycle import InstanceState
from lowcostgpu.core.snapshot import allocation_id_for, placement_number
from lowcostgpu.domain.capacity import Timestamp
from lowcostgpu.domain.errors import NotFound
from lowcostgpu.domain.events import Reason
from lowcostgpu.domain.status import InstanceStatus

FOLLOW_POLL_S = 0.5  # how often a follower looks at the log
FINAL = frozenset({InstanceStatus.SUCCEEDED, InstanceStatus.FAILED, InstanceStatus.STOPPED})
LOG_LIMIT = 2**24  # the most of a run's log that is read (bytes)


class Held(StreamingResponse):
    """A text stream that gives its waiting slot back when it ends, however it ends (a client
    that goes away included): the release wraps the whole response, not only the stream."""

    def __init__(self, content: AsyncIterator[str], release: Callable[[], None]) -> None:
        super().__init__(content, media_type="text/plain")
        self._release = release

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._release()


def latest_allocation(state: InstanceState) -> str | None:
    """The current run's allocation, or the last run's once it ended."""
    if state.allocation_id:
        return state.allocation_id
    return state.runs[-1].allocation_id if state.runs else None


def run_allocation(
    state: InstanceState,
    run: int | None,
    previous: bool = False,
    scheduled_at: Sequence[Timestamp] = (),
) -> str | None:
    """The allocation of the run a logs request names: the latest (neither given), the one
    before it (`previous`), or the run of restart count `run` (0: the first). None: the latest
    was asked for and there is none yet. A run that does not exist is NotFound saying which do.

    `scheduled_at`: when each placement happened, in order (the instance's `Scheduled` events):
    a run reclaimed before its start was seen is in no `state.runs`, yet it ran and has a log;
    its allocation id is rebuilt from its placement (`allocation_id_for`). Cost: O(placements).
    """
    latest = latest_allocation(state)
    if run is None and not previous:
        return latest
    known = {n: allocation_id_for(state.id, at, n) for n, at in enumerate(scheduled_at)}
    for allocation in [*(r.allocation_id for r in state.runs), state.allocation_id]:
        if allocation:
            known[placement_number(allocation)] = allocation
    if previous:
        before = [n for n in known if latest is not None and n < placement_number(latest)]
        if not before:
            raise NotFound(
                f"instance {state.id} has had no run before its latest",
                hint="leave out --previous (previous=true) to read its only run",
            )
        return known[max(before)]
    if run in known:
        return known[run]
    runs = ", ".join(map(str, sorted(known))) or "none yet"
    raise NotFound(
        f"instance {state.id} has no run {run}",
        hint=f"its runs, by restart count (0 = the first): {runs}",
    )


def run_log(
    ctx: ApiContext, state: InstanceState, run: int | None, previous: bool, tail_bytes: int
) -> str:
    """The log of the run a request names (`run_allocation`); "" before the first run. An
    earlier run's placements are read from its `Scheduled` events (the store's index on the
    object: O(placements)); a log the runtime no longer keeps is NotFound naming the run."""
    scheduled: list[Timestamp] = []
    if run is not None or previous:
        events = ctx.plane.store.events(
            account_id=state.account_id,
            object_id=state.id,
            reason=Reason.SCHEDULED.value,
            limit=state.placement_count + 1,
        )
        scheduled = [e.at for e in events]
    allocation = run_allocation(state, run, previous, scheduled)
    if allocation is None:
        return ""
    if run is None and not previous:
        return latest_log(ctx, state, allocation, tail_bytes)
    try:
        return ctx.runtime.logs(allocation, tail_bytes)
    except NotFound as exc:
        which = f"run {placement_number(allocation)}"
        raise NotFound(
            f"no log of {which} of instance {state.id} is kept: {exc.message}",
            hint=exc.hint or "it may have been interrupted before it started",
        ) from None


def latest_log(ctx: ApiContext, state: InstanceState, allocation: str, tail_bytes: int) -> str:
    """The latest run's log; "" while that run is placed but its workload not started yet (the
    runtime knows nothing of it until the start is carried out: a requeued run's first moments,
    when a user following the log asks again)."""
    try:
        return ctx.runtime.logs(allocation, tail_bytes)
    except NotFound:
        if state.status is InstanceStatus.STARTING and state.allocation_id == allocation:
            return ""
        raise


def _look(ctx: ApiContext, instance_id: str) -> tuple[InstanceState, str | None, str]:
    """One look: the instance's state, its current run, and that run's log."""
    state = ctx.plane.store.instance(instance_id).state
    current = latest_allocation(state)
    log = latest_log(ctx, state, current, LOG_LIMIT) if current is not None else ""
    return state, current, log


async def follow(
    ctx: ApiContext, watch: EventWatch, instance_id: str, tail_bytes: int
) -> AsyncIterator[str]:
    """The log as it grows: the last `tail_bytes` first, then what is added; a new run (after a
    restart) is followed too; it ends when the instance does."""
    allocation: str | None = None
    position = 0  # characters of the current run's log already sent
    while True:
        state, current, full = await watch.read(_look, ctx, instance_id)
        if current is not None:
            if current != allocation:
                allocation, position = current, max(0, len(full) - tail_bytes)
            if len(full) > position:
                yield full[position:]
                position = len(full)
        if state.status in FINAL or state.status is InstanceStatus.DELETED:
            return
        await asyncio.sleep(FOLLOW_POLL_S)

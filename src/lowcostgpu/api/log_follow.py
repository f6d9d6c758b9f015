"""Following a workload's log (`GET /v1/instances/{id}/logs?follow=true`) without a thread.

Why: the stream was a sync generator that slept between looks, so Starlette ran it in a worker
thread and each follower held one for its whole run. Here a follower is a coroutine: between
looks it awaits a timer, and each look (the instance's row and its run's log) is one brief read
in the long-polls' thread limiter (`api.longpoll`). A follower holds one of the capped waiting
slots for as long as it streams.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

from fastapi.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from lowcostgpu.api.context import ApiContext
from lowcostgpu.api.longpoll import EventWatch
from lowcostgpu.core.lifecycle import InstanceState
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


def _look(ctx: ApiContext, instance_id: str) -> tuple[InstanceState, str | None, str]:
    """One look: the instance's state, its current run, and that run's log."""
    state = ctx.plane.store.instance(instance_id).state
    current = latest_allocation(state)
    return state, current, ctx.runtime.logs(current, LOG_LIMIT) if current is not None else ""


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

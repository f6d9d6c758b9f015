"""`Reconnecting`: how a long follower (`launch --wait`) outlasts a server that goes away.

Apart from the `Client` because it is a policy over any call (ask again with growing pauses, say
when the server is down and when it is back, give up after a while), not a call of the API.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from lowcostgpu.client.http_errors import FOLLOW_RETRY_MAX_S, ServerDown
from lowcostgpu.domain import errors

RECONNECT_GIVE_UP_S = 900.0  # how long a follower keeps asking a server that does not answer
RECONNECT_PAUSES_S = (0.5, 1.0, 2.0, 5.0)  # between its tries (the last one repeats)
T = TypeVar("T")


class Reconnecting:
    """Runs a call of a long follower (`launch --wait`) until the server answers it: while the
    server is down (`ServerDown`, or a 429 that says when to ask again) it says so once
    (`on_down`), asks again with growing pauses, says when it is back (`on_back`), and gives up
    with one clear error after `give_up_s` without an answer. Other errors pass through."""

    def __init__(
        self,
        on_down: Callable[[errors.Unavailable], None],
        on_back: Callable[[], None],
        give_up_s: float = RECONNECT_GIVE_UP_S,
        *,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.on_down, self.on_back, self.give_up_s = on_down, on_back, give_up_s
        self.sleep, self.clock = sleep, clock

    def call(self, fn: Callable[[], T]) -> T:
        down_since: float | None = None
        tries = 0
        while True:
            try:
                result = fn()
            except errors.Unavailable as exc:
                retry_after = exc.details.get("retry_after_s")
                if isinstance(retry_after, int | float) and not isinstance(exc, ServerDown):
                    self.sleep(min(max(float(retry_after), 0.1), FOLLOW_RETRY_MAX_S))  # busy
                    continue
                if not isinstance(exc, ServerDown):
                    raise
                if down_since is None:
                    down_since = self.clock()
                    self.on_down(exc)
                elif self.clock() - down_since > self.give_up_s:
                    raise self._given_up(exc) from None
                self.sleep(RECONNECT_PAUSES_S[min(tries, len(RECONNECT_PAUSES_S) - 1)])
                tries += 1
                continue
            if down_since is not None:
                self.on_back()
            return result

    def _given_up(self, exc: errors.Unavailable) -> errors.Unavailable:
        return errors.Unavailable(
            f"the server has not answered for {round(self.give_up_s)} s ({exc.message})",
            hint="the instance keeps its place: follow it later with `lowcostgpu show ID`"
            " or `lowcostgpu events --follow`",
        )

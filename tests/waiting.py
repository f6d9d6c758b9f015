"""One way for a test to wait for a state: poll a predicate until it holds or a deadline passes.

The loop, the runtime and the webhook sender act in their own threads and processes, so a test
that asserts a state right after a request races them: on a loaded machine the state may not be
reached yet, or may already have been passed. A test therefore waits for the state it needs with
a generous deadline (a loaded CI machine is many times slower than a laptop; the deadline only
bounds a failure, a passing test returns as soon as the state holds) and never measures speed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

DEADLINE_S = 60.0  # long enough for a loaded machine; a passing test never waits this long
POLL_S = 0.05


def wait_until(
    predicate: Callable[[], T | None],
    deadline_s: float = DEADLINE_S,
    what: str = "",
    *,
    poll_s: float = POLL_S,
) -> T:
    """The first truthy value of `predicate()`, polled every `poll_s` for `deadline_s` seconds.

    The predicate is tried once more after the deadline, so a slow poll (a loaded machine)
    never fails a state that was reached in time. The error names `what` and the last value."""
    end = time.monotonic() + deadline_s
    while True:
        late = time.monotonic() >= end
        value = predicate()
        if value:
            return value
        if late:
            raise AssertionError(
                f"timed out after {deadline_s} s waiting for {what or predicate}: last {value!r}"
            )
        time.sleep(poll_s)

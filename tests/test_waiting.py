"""`waiting.wait_until`, the one way the suite waits for a state: the first truthy value, one
last try after the deadline (a slow poll on a loaded machine never fails a state reached in
time), and an error that names what was awaited and what was last seen."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from waiting import wait_until


def answers(*values: object) -> tuple[Callable[[], object], list[object]]:
    """A predicate that returns `values` in turn (the last one for ever), and its calls."""
    calls: list[object] = []

    def predicate() -> object:
        value = values[min(len(calls), len(values) - 1)]
        calls.append(value)
        return value

    return predicate, calls


@pytest.mark.parametrize(
    ("values", "expected", "tries"),
    [
        (("found",), "found", 1),
        ((None, 0, "", [], "found"), "found", 5),  # every falsy value means "not yet"
        ((None, {"id": 1}), {"id": 1}, 2),  # the value itself is returned, not True
    ],
)
def test_the_first_truthy_value_is_returned(
    values: tuple[object, ...], expected: object, tries: int
) -> None:
    predicate, calls = answers(*values)
    assert wait_until(predicate, 60, "a value", poll_s=0) == expected
    assert len(calls) == tries


@pytest.mark.parametrize(("first", "returned"), [("ready", True), (None, False)])
def test_a_zero_deadline_tries_exactly_once(first: object, returned: bool) -> None:
    predicate, calls = answers(first, "too late")
    if returned:
        assert wait_until(predicate, 0, "once") == first
    else:
        with pytest.raises(AssertionError, match="waiting for once: last None"):
            wait_until(predicate, 0, "once")
    assert len(calls) == 1


def test_a_try_that_ends_after_the_deadline_gets_one_more() -> None:
    calls: list[float] = []

    def slow_then_ready() -> str | None:
        calls.append(time.monotonic())
        if len(calls) == 1:
            time.sleep(0.05)  # the first look outlasts the whole deadline, as on a loaded machine
            return None
        return "ready"

    assert wait_until(slow_then_ready, 0.01, "a slow look", poll_s=0) == "ready"
    assert len(calls) == 2


def test_the_timeout_names_what_was_awaited_and_the_last_value() -> None:
    predicate, _ = answers([], {})
    with pytest.raises(AssertionError) as raised:
        wait_until(predicate, 0.05, "the cluster to refill", poll_s=0.01)
    assert str(raised.value) == "timed out after 0.05 s waiting for the cluster to refill: last {}"

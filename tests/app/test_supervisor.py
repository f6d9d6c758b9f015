"""The supervisor: a background loop that dies is started again, counted, logged with its
traceback once per distinct error, and backed off while it keeps dying."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import pytest

from lowcostgpu.app.supervisor import RestartPolicy, Supervisor

FAST = RestartPolicy(first_backoff_s=0.01, max_backoff_s=0.05, healthy_after_s=60)
DEADLINE_S = 20.0


def until(what: str, check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


class Loop:
    """Dies `deaths` times (raising `errors` in turn, or returning when the error is None), then
    runs until the server stops."""

    def __init__(self, stopping: threading.Event, errors: list[Exception | None]) -> None:
        self.stopping = stopping
        self.errors = list(errors)
        self.runs = 0
        self.steady = threading.Event()

    def __call__(self) -> None:
        self.runs += 1
        if self.errors:
            error = self.errors.pop(0)
            if error is not None:
                raise error
            return
        self.steady.set()
        self.stopping.wait()


@pytest.mark.parametrize(
    ("errors", "tracebacks"),
    [
        ([], 0),
        ([RuntimeError("boom")], 1),
        ([RuntimeError("boom")] * 4, 1),  # the same error again: one traceback, then a line
        ([RuntimeError("boom"), KeyError("k"), RuntimeError("boom")], 3),
        ([None, None], 0),  # returned before the stop: restarted too, nothing to trace
    ],
    ids=["never-dies", "dies-once", "same-error-4x", "different-errors", "returns-early"],
)
def test_a_loop_that_dies_is_restarted_counted_and_traced_once_per_error(
    caplog: pytest.LogCaptureFixture, errors: list[Exception | None], tracebacks: int
) -> None:
    stopping = threading.Event()
    supervisor = Supervisor(stopping, FAST)
    loop = Loop(stopping, errors)
    with caplog.at_level(logging.WARNING, logger="lowcostgpu.app.supervisor"):
        supervisor.start("injected", loop)
        until("the loop to run steadily", loop.steady.is_set)
        stopping.set()
        assert supervisor.join(5) == []
    assert supervisor.counts() == {"injected": len(errors)}
    assert loop.runs == len(errors) + 1
    assert sum(1 for r in caplog.records if r.exc_info) == tracebacks
    assert sum(1 for r in caplog.records if "injected died" in r.getMessage()) == len(errors)


@pytest.mark.parametrize(
    ("deaths", "backoff_s"),
    [(1, 0.5), (2, 1.0), (3, 2.0), (7, 30.0), (8, 30.0)],
)
def test_the_restart_backoff_doubles_up_to_its_cap(deaths: int, backoff_s: float) -> None:
    assert RestartPolicy().backoff_s(deaths) == backoff_s


def test_a_loop_that_keeps_dying_stops_when_the_server_stops() -> None:
    stopping = threading.Event()
    supervisor = Supervisor(stopping, FAST)

    def always() -> None:
        raise RuntimeError("always")

    supervisor.start("doomed", always)
    until("a few restarts", lambda: supervisor.counts()["doomed"] >= 3)
    stopping.set()
    assert supervisor.join(5) == []


def test_two_loops_of_one_name_are_refused() -> None:
    supervisor = Supervisor(threading.Event(), FAST)
    supervisor.start("x", lambda: None)
    with pytest.raises(ValueError, match="already supervised"):
        supervisor.start("x", lambda: None)
    supervisor.stopping.set()
    supervisor.join(5)

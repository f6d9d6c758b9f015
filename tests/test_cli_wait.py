"""`launch --wait` against a scripted client: the id first, one status line as it changes, the
timeline's lines above it, a server that goes away and comes back, Ctrl-C, and giving up."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import pytest
import typer

from lowcostgpu.cli.wait import BACK, DOWN, detached_line, eta_text, launched_line, wait
from lowcostgpu.client.api import Client
from lowcostgpu.client.http_errors import ServerDown
from lowcostgpu.client.reconnecting import Reconnecting
from lowcostgpu.client.records import Event, Instance
from lowcostgpu.domain.elapsed import elapsed
from lowcostgpu.domain.errors import InvalidRequest, Unavailable

ID = "i-0123456789abcdef"


def _inst(status: str, *, position: int | None = None, step: int | None = None) -> Instance:
    queue = None if position is None else {"position": position, "gpus_ahead": 0}
    return cast(
        Instance,
        {
            "id": ID,
            "status": status,
            "price_per_hour": "0.234",
            "created_at": 1000,
            "last_checkpoint_step": step,
            "queue": None if queue is None else {**queue, "eta_at": None, "eta_s": None},
        },
    )


def _event(seq: int, at: int, reason: str, message: str = "", **data: Any) -> Event:
    return cast(
        Event, {"seq": seq, "at": 1000 + at, "reason": reason, "message": message, "data": data}
    )


Step = tuple[list[Event], Instance]  # what one poll reads: new events, then the instance


class Scripted:
    """A client that answers each poll from a script; a step may be an exception to raise."""

    def __init__(self, steps: list[Step | BaseException]) -> None:
        self.steps = steps
        self.current: Instance | None = None
        self.events_seen: list[Event] = []

    def events(self, after: int, limit: int, **kw: Any) -> list[Event]:
        assert kw["wait_s"] > 0 and kw["object"] == ID  # a long-poll of this instance
        step = self.steps.pop(0)
        if isinstance(step, BaseException):
            raise step
        found, self.current = step
        self.events_seen += found
        return [e for e in found if (e["seq"] or 0) > after]

    def instance(self, instance_id: str) -> Instance:
        assert self.current is not None
        return self.current

    def timeline(self, instance_id: str, after: int = 0) -> list[Event]:
        return self.events_seen

    def usage(self, instance_id: str) -> dict[str, Any]:
        metered = {"metered_through": 10**9, "gpu_seconds": 7200}
        return {**metered, "amount": "0.47", "amount_exact": "0.468"}


def _wait(steps: list[Step | BaseException], first: Instance, **kw: Any) -> Instance:
    client = cast(Client, Scripted(steps))
    final, _ = wait(client, first, live=False, sleep=lambda _: None, **kw)
    return final


SESSION: list[Step | BaseException] = [
    ([], _inst("queued", position=2)),  # nothing new: the line does not repeat
    ([], _inst("queued", position=1)),
    ([_event(1, 30, "Started")], _inst("running")),
    ([], _inst("running", step=180)),
    (
        [_event(2, 41, "Interrupted", "interrupted — checkpoint step 180 on volume")],
        _inst("queued", position=1, step=180),
    ),
    ([_event(3, 3958, "Restarted", resume_step=180)], _inst("running", step=180)),
    ([_event(4, 4000, "Succeeded")], _inst("succeeded", step=180)),
]


def test_the_id_comes_first_then_the_status_line_as_it_changes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert _wait(list(SESSION), _inst("queued", position=2))["status"] == "succeeded"
    out = capsys.readouterr().out.splitlines()
    assert out[-1].startswith("✓ run finished · 2.0 GPU-hrs · $0.47")  # money: cli.output's
    assert out[:-1] == [
        f"✓ instance {ID} queued · position 2 · ETA unknown · $0.234/hr",
        "… queued · position 2 · ETA unknown · no checkpoint yet",
        "… queued · position 1 · ETA unknown · no checkpoint yet",
        f"✓ instance {ID} running · $0.234/hr",
        "… running · no checkpoint yet",
        "… running · checkpoint step 180",
        "# 00:41 interrupted — checkpoint step 180 on volume",
        "… queued · position 1 · ETA unknown · checkpoint step 180",
        "# 1:05:58 capacity free — auto-restarted, resumed 180",
        "… running · checkpoint step 180",
    ]


def test_a_server_restart_does_not_end_the_wait(capsys: pytest.CaptureFixture[str]) -> None:
    down = ServerDown("no lowcostgpu server answers at http://x (ConnectError)")
    steps: list[Step | BaseException] = [
        ([], _inst("running")),
        down,
        ServerDown("HTTP 502 from http://x"),
        down,
        ([_event(1, 60, "Succeeded")], _inst("succeeded", step=3)),
    ]
    assert _wait(steps, _inst("running"))["status"] == "succeeded"
    out = capsys.readouterr().out.splitlines()
    assert out.count(DOWN) == 1 and out.count(BACK) == 1
    assert out.index(DOWN) < out.index(BACK) < len(out) - 1
    assert out[-1].startswith("✓ run finished")


def test_a_server_that_stays_away_ends_the_wait_with_one_clear_error() -> None:
    steps: list[Step | BaseException] = [ServerDown("refused")] * 5
    with pytest.raises(Unavailable, match=r"has not answered for 0 s \(refused\)") as caught:
        _wait(steps, _inst("running"), give_up_s=0)
    assert "lowcostgpu show" in str(caught.value)


def test_ctrl_c_detaches_and_says_how_to_follow_again(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(typer.Exit) as exited:
        _wait([([], _inst("running")), KeyboardInterrupt()], _inst("running"))
    assert exited.value.exit_code == 0
    assert capsys.readouterr().out.splitlines()[-1] == detached_line(ID)
    assert detached_line(ID) == f"detached — {ID} keeps running; lowcostgpu logs -f {ID}"


def _flaky(errors: list[Exception]) -> Callable[[], str]:
    def call() -> str:
        if errors:
            raise errors.pop(0)
        return "answer"

    return call


@pytest.mark.parametrize(
    ("errors", "says", "pauses"),
    [
        ([], [], []),
        ([ServerDown("down")], ["down", "back"], [0.5]),
        ([ServerDown("a"), ServerDown("b"), ServerDown("c")], ["down", "back"], [0.5, 1.0, 2.0]),
        ([Unavailable("busy", retry_after_s=5)], [], [5.0]),  # a 429: busy, not down
    ],
    ids=["answers", "one-refusal", "growing-pauses", "too-many-waiting"],
)
def test_reconnecting_asks_again_while_the_server_is_down(
    errors: list[Exception], says: list[str], pauses: list[float]
) -> None:
    said: list[str] = []
    slept: list[float] = []
    link = Reconnecting(lambda _: said.append("down"), lambda: said.append("back"), 60)
    link.sleep = slept.append
    assert link.call(_flaky(errors)) == "answer"
    assert (said, slept) == (says, pauses)


@pytest.mark.parametrize(
    "error", [InvalidRequest("bad"), Unavailable("a standby server")], ids=["4xx", "standby"]
)
def test_reconnecting_passes_other_errors_through(error: Exception) -> None:
    link = Reconnecting(lambda _: None, lambda: None, 60)
    with pytest.raises(type(error)):
        link.call(_flaky([error]))


@pytest.mark.parametrize(
    ("eta_s", "text"),
    [(None, "unknown"), (0, "now"), (75, "in 01:15"), (3700, "in 1:01:40")],
)
def test_an_eta_is_unknown_rather_than_wrong(eta_s: int | None, text: str) -> None:
    assert eta_text(eta_s) == text


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(-3, "00:00"), (18, "00:18"), (3599, "59:59"), (3600, "1:00:00"), (11520, "3:12:00")],
)
def test_elapsed_time_is_mm_ss_or_h_mm_ss_past_an_hour(seconds: int, text: str) -> None:
    assert elapsed(seconds) == text


def test_the_first_line_of_a_running_launch_has_no_queue() -> None:
    assert launched_line(_inst("running")) == f"✓ instance {ID} running · $0.234/hr"


def test_on_a_terminal_the_timeline_lines_print_above_the_live_status_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    client = cast(Client, Scripted(list(SESSION)))
    final, _ = wait(client, _inst("queued", position=2), live=True, sleep=lambda _: None)
    out = capsys.readouterr().out
    assert final["status"] == "succeeded"
    for line in (f"✓ instance {ID} queued", "# 00:41 interrupted", "✓ run finished"):
        assert line in out

"""Long-polls through the real server: many waiting polls leave ordinary requests answered and
each gets the event once; the waiting slots are capped (429) and a log follower gives its slot
back when it goes away; seq and time parameters are bounded by what the store holds."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from api_server import Api

from lowcostgpu.api import longpoll
from lowcostgpu.client.api import Client

POLLS = 120
DEADLINE_S = 60.0  # for a state that must come, on a loaded machine too
MAX_SEQ = 2**63 - 1
NOWHERE = "object=i-nothing-here"  # a filter that matches no event: a look that finds nothing


def _key(client: Client) -> dict[str, str]:
    return {"authorization": client._http.headers["authorization"]}


def _get(api: Api, client: Client, path: str, **kw: Any) -> httpx.Response:
    return httpx.get(f"{api.url}{path}", headers=_key(client), timeout=DEADLINE_S * 1.5, **kw)


def _launch(client: Client, command: list[str] | None = None) -> str:
    body = {"gpu": "a100-sxm4", "type": "interruptible", "command": command or ["sleep", "3600"]}
    return str(client.launch(**body)["id"])  # type: ignore[arg-type]


def _refused_once_full(api: Api, client: Client, query: str) -> httpx.Response:
    """Ask until the answer is a 429 (every slot is held), within the deadline."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        response = _get(api, client, f"/v1/events?{query}&wait_s=0.01")
        if response.status_code == 429 or time.monotonic() > deadline:
            return response
        time.sleep(0.05)


def _answered_once_free(api: Api, client: Client) -> httpx.Response:
    deadline = time.monotonic() + DEADLINE_S
    while True:
        response = _get(api, client, f"/v1/events?{NOWHERE}&wait_s=0.01")
        if response.status_code != 429 or time.monotonic() > deadline:
            return response
        time.sleep(0.05)


async def _poll_all(url: str, key: dict[str, str], after: int, out: list[Any]) -> None:
    """`POLLS` long-polls at once; one refused while a probe holds a slot asks again."""
    limits = httpx.Limits(max_connections=POLLS + 10)

    async def poll(c: httpx.AsyncClient, i: int) -> None:
        while True:
            r = await c.get("/v1/events", params={"after": after, "wait_s": 60})
            if r.status_code != 429:
                out[i] = (r.status_code, r.json())
                return
            await asyncio.sleep(0.2)

    async with httpx.AsyncClient(base_url=url, headers=key, limits=limits, timeout=90) as c:
        await asyncio.gather(*(poll(c, i) for i in range(POLLS)))


def test_waiting_polls_leave_ordinary_requests_answered_and_each_gets_the_event_once(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(longpoll, "MAX_WAITING_PER_ACCOUNT", POLLS)
    _, client = api.account("many-pollers")
    after = int(_get(api, client, "/v1/events").headers["X-Events-Latest-Seq"])
    got: list[Any] = [None] * POLLS
    pollers = threading.Thread(
        target=lambda: asyncio.run(_poll_all(api.url, _key(client), after, got))
    )
    pollers.start()
    full = _refused_once_full(api, client, f"after={after}")  # every poller waits on the server
    assert full.status_code == 429, full.text
    assert full.headers["Retry-After"] == str(longpoll.RETRY_AFTER_S)
    assert full.json()["code"] == "too_many_waiting"
    assert f"{POLLS} long-polls already wait (of this account)" in full.json()["message"]
    assert "retry after" in full.json()["hint"]
    for path in ("/healthz", "/v1/instances", "/v1/billing/balance"):  # answered meanwhile
        assert _get(api, client, path).status_code == 200
    instance_id = _launch(client)
    pollers.join(timeout=DEADLINE_S * 2)
    assert not pollers.is_alive()
    everything = client.events(after, 1000)
    assert everything and everything[0]["object_id"] == instance_id
    for status, events in got:
        assert status == 200 and events  # each got the event, none timed out empty
        assert events == everything[: len(events)]  # from the cursor on: no gap, nothing twice
    client.stop(instance_id)


def test_a_log_follower_holds_a_waiting_slot_until_it_goes_away(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(longpoll, "MAX_WAITING_PER_ACCOUNT", 1)
    _, client = api.account("one-slot")
    instance_id = _launch(client, ["sh", "-c", "echo hello; sleep 3600"])
    logs = f"{api.url}/v1/instances/{instance_id}/logs"
    with (
        httpx.Client(headers=_key(client), timeout=DEADLINE_S) as http,
        http.stream("GET", logs, params={"follow": "true"}) as following,
    ):
        assert following.status_code == 200
        refused = _refused_once_full(api, client, NOWHERE)
        assert refused.status_code == 429 and "of this account" in refused.json()["message"]
        second = http.get(logs, params={"follow": "true"})
        assert second.status_code == 429
        assert "long-polls and log followers" in second.json()["message"]
        assert http.get(logs).status_code == 200  # a plain read takes no slot
    assert _answered_once_free(api, client).status_code == 200  # given back on disconnect
    client.stop(instance_id)


def _holder(api: Api, client: Client) -> threading.Thread:
    """A long-poll that holds a slot of the account until its next event: asked again when a
    probe held the slot at that moment (a 429)."""
    after = _get(api, client, "/v1/events").headers["X-Events-Latest-Seq"]

    def hold() -> None:
        while _get(api, client, f"/v1/events?after={after}&wait_s=60").status_code == 429:
            time.sleep(0.1)

    holder = threading.Thread(target=hold)
    holder.start()
    return holder


def test_another_accounts_slots_are_not_this_ones(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(longpoll, "MAX_WAITING_PER_ACCOUNT", 1)
    _, busy = api.account("busy")
    _, other = api.account("other")
    holder = _holder(api, busy)
    assert _refused_once_full(api, busy, NOWHERE).status_code == 429
    assert _get(api, other, f"/v1/events?{NOWHERE}&wait_s=0.01").status_code == 200
    busy.stop(_launch(busy))  # an event of the account ends the holder's wait
    holder.join(timeout=DEADLINE_S)
    assert not holder.is_alive()


@pytest.fixture(scope="module")
def bounded(api: Api) -> Iterator[tuple[Client, str]]:
    """An account with an instance, hence events: a long-poll from 0 answers at once."""
    _, client = api.account("bounds")
    instance_id = _launch(client)
    yield client, instance_id
    client.stop(instance_id)


@pytest.mark.parametrize(
    ("query", "status"),
    [
        (f"after={MAX_SEQ}", 200),
        (f"after={MAX_SEQ + 1}", 422),
        ("after=18446744073709551616", 422),
        ("after=-1", 422),
        (f"before={MAX_SEQ}", 200),
        (f"before={MAX_SEQ + 1}", 422),
        ("before=18446744073709551616", 422),
        (f"since={MAX_SEQ}", 200),
        (f"since={MAX_SEQ + 1}", 422),
        ("wait_s=60", 200),
        ("wait_s=60.001", 422),
        ("wait_s=inf", 422),
        ("wait_s=nan", 422),
        ("wait_s=-0.001", 422),
    ],
)
def test_seq_time_and_wait_parameters_are_bounded(
    api: Api, bounded: tuple[Client, str], query: str, status: int
) -> None:
    """At the edge each is answered, past it a clear 422 that names the parameter (a 200 never
    waits: without `wait_s` there is no wait, and with it the account's events answer at once)."""
    client, _ = bounded
    response = _get(api, client, f"/v1/events?{query}")
    assert response.status_code == status, response.text
    if status == 422:
        name = query.partition("=")[0]
        assert response.json()["code"] == "invalid_request"
        assert name in response.json()["message"] and response.json()["hint"]


@pytest.mark.parametrize(("after", "status"), [(MAX_SEQ, 200), (MAX_SEQ + 1, 422)])
def test_an_instance_timeline_cursor_is_bounded(
    api: Api, bounded: tuple[Client, str], after: int, status: int
) -> None:
    client, instance_id = bounded
    response = _get(api, client, f"/v1/instances/{instance_id}/events?after={after}")
    assert response.status_code == status, response.text
    if status == 422:
        assert "after" in response.json()["message"]


def _refusals(api: Api) -> float:
    """The server's count of 429 answers, from /metrics."""
    text = httpx.get(f"{api.url}/metrics", timeout=DEADLINE_S).text
    line = 'lowcostgpu_http_requests_total{method="GET",status="429"} '
    return sum(float(row.removeprefix(line)) for row in text.splitlines() if row.startswith(line))


def test_a_client_follower_waits_out_a_429_and_then_gets_the_event(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(longpoll, "MAX_WAITING_PER_ACCOUNT", 1)
    monkeypatch.setattr(longpoll, "RETRY_AFTER_S", 1)
    _, client = api.account("patient")
    holder = _holder(api, client)
    assert _refused_once_full(api, client, NOWHERE).status_code == 429  # the slot is held
    after = int(_get(api, client, "/v1/events").headers["X-Events-Latest-Seq"])
    got: list[Any] = []
    refusals = _refusals(api)
    follower = threading.Thread(target=lambda: got.append(next(client.follow_events(after, 30))))
    follower.start()
    deadline = time.monotonic() + DEADLINE_S
    while _refusals(api) == refusals and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _refusals(api) > refusals  # the follower was refused while the holder waits
    instance_id = _launch(client)  # the holder gets it and goes; the follower asks again
    follower.join(timeout=DEADLINE_S)
    holder.join(timeout=DEADLINE_S)
    assert got and got[0]["object_id"] == instance_id
    client.stop(instance_id)


def test_a_poll_from_past_the_log_gets_no_event_before_its_cursor(api: Api) -> None:
    """A cursor beyond every seq: the events committed while it waits come before it, so the
    answer at its deadline is empty (whether the watch handed them over or it looked)."""
    _, client = api.account("ahead")
    ahead = int(_get(api, client, "/v1/events").headers["X-Events-Latest-Seq"]) + 10**6
    got: list[httpx.Response] = []
    poll = threading.Thread(
        target=lambda: got.append(_get(api, client, f"/v1/events?after={ahead}&wait_s=2"))
    )
    poll.start()
    instance_id = _launch(client)
    poll.join(timeout=DEADLINE_S)
    assert got[0].status_code == 200 and got[0].json() == []
    client.stop(instance_id)


def test_a_poll_whose_client_hangs_up_gives_its_slot_back_at_once(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not at its deadline (60 s): well before it, the account may wait again. The client hangs
    up when the test says so (a raw socket closed), not after a timeout a slow machine could
    pass before the test saw the slot taken."""
    monkeypatch.setattr(longpoll, "MAX_WAITING_PER_ACCOUNT", 1)
    _, client = api.account("hangs-up")
    host, port = api.url.removeprefix("http://").split(":")
    request = (
        f"GET /v1/events?{NOWHERE}&wait_s=60 HTTP/1.1\r\nHost: {host}\r\n"
        f"Authorization: {_key(client)['authorization']}\r\n\r\n"
    )
    with socket.create_connection((host, int(port)), timeout=DEADLINE_S) as impatient:
        impatient.sendall(request.encode())
        assert _refused_once_full(api, client, NOWHERE).status_code == 429  # it waits
    hung_up_at = time.monotonic()  # the socket is closed: the client has hung up
    answer = _answered_once_free(api, client)
    assert answer.status_code == 200
    assert time.monotonic() - hung_up_at < 59  # given back before the poll's own 60 s

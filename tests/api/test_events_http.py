"""Events through the real HTTP stack: filtered listings, long-polls resuming from a cursor."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import httpx
import pytest
from api_server import Api

from lowcostgpu.client.api import Client
from lowcostgpu.client.records import Event
from lowcostgpu.domain.errors import InvalidRequest
from waiting import wait_until

SLEEP = ["sleep", "3600"]


def _launch(client: Client) -> str:
    return client.launch(gpu="a100-sxm4", type="interruptible", command=SLEEP)["id"]


def _last_seq(client: Client) -> int:
    seqs = [e["seq"] or 0 for e in client.events(0, 1000)]
    return max(seqs, default=0)


def test_a_long_poll_answers_as_soon_as_an_event_is_committed(api: Api) -> None:
    _, client = api.account("poller")
    after = _last_seq(client)
    got: list[list[Event]] = []
    waiter = threading.Thread(target=lambda: got.append(client.events(after, wait_s=30)))
    waiter.start()
    time.sleep(0.5)
    assert waiter.is_alive()  # nothing yet: it waits
    instance_id = _launch(client)
    waiter.join(timeout=60)  # a poll that missed the event would answer [] at its 30 s deadline
    assert not waiter.is_alive()
    assert got[0] and got[0][0]["object_id"] == instance_id
    assert all((e["seq"] or 0) > after for e in got[0])
    client.stop(instance_id)


def test_a_long_poll_without_events_returns_empty_at_its_deadline(api: Api) -> None:
    _, client = api.account("quiet")
    assert client.events(_last_seq(client), wait_s=0.3) == []


def test_following_from_a_cursor_has_no_gap_and_no_duplicate(api: Api) -> None:
    _, client = api.account("follower")
    seen: list[Event] = []
    stop = threading.Event()

    def follow() -> None:
        after = 0
        while not stop.is_set():
            for e in client.events(after, 3, wait_s=0.5):  # small pages: many resumptions
                after = e["seq"] or after
                seen.append(e)

    follower = threading.Thread(target=follow)
    follower.start()
    ids = []
    for _ in range(4):
        ids.append(_launch(client))
        time.sleep(0.2)
    for instance_id in ids:
        client.stop(instance_id)
    everything = _settled(client)
    wait_until(lambda: len(seen) >= len(everything), what="the follower caught up")
    stop.set()
    follower.join(timeout=60)
    assert [e["seq"] for e in seen] == [e["seq"] for e in everything]
    assert len({e["seq"] for e in seen}) == len(seen) >= 8
    assert {e["object_id"] for e in seen} >= set(ids)
    middle = everything[len(everything) // 2]["seq"] or 0
    assert client.events(middle, 1000) == everything[len(everything) // 2 + 1 :]


def test_another_accounts_events_never_appear(api: Api) -> None:
    _, mine = api.account("mine")
    _, theirs = api.account("theirs")
    after = _last_seq(mine)
    their_instance = _launch(theirs)
    assert mine.events(after, wait_s=0.5) == []
    assert mine.events(0, 1000, object=their_instance) == []
    everything = mine.events(0, 1000)
    assert their_instance not in {e["object_id"] for e in everything}
    assert [e["object_id"] for e in theirs.events(0, 1000)] == [their_instance] * len(
        theirs.events(0, 1000)
    )
    theirs.stop(their_instance)


def test_filters_by_object_reason_and_time(api: Api) -> None:
    _, client = api.account("filters")
    first, second = _launch(client), _launch(client)
    client.stop(first)
    # stopped: no event about it comes by itself any more
    wait_until(lambda: client.instance(first)["status"] == "stopped", what=f"{first} stopped")
    everything = client.events(0, 1000)
    of_first = client.events(0, 1000, object=first)
    assert of_first and {e["object_id"] for e in of_first} == {first}
    assert client.events(0, 1000, object=f"instance/{first}") == of_first
    assert client.events(0, 1000, object=f"cluster/{first}") == []
    queued = client.events(0, 1000, reason="Queued")
    assert {e["object_id"] for e in queued} == {first, second}
    assert all(e["reason"] == "Queued" for e in queued)
    latest = max(e["at"] for e in everything)
    recent = client.events(0, 1000, since=latest)  # more may have come since `everything`
    assert all(e["at"] >= latest for e in recent)
    assert recent[: len([e for e in everything if e["at"] >= latest])] == [
        e for e in everything if e["at"] >= latest
    ]
    assert client.events(0, 1000, since=latest + 3600) == []
    assert client.events(0, 2) == everything[:2]
    client.stop(second)


def test_an_unknown_reason_is_a_clear_400(api: Api) -> None:
    _, client = api.account("typo")
    with pytest.raises(InvalidRequest, match="unknown event reason 'Preemted'") as caught:
        client.events(0, reason="Preemted")
    assert "Preempted" in (caught.value.hint or "")
    key = client._http.headers["authorization"]
    response = httpx.get(f"{api.url}/v1/events?wait_s=61", headers={"authorization": key})
    assert response.status_code == 422 and "wait_s" in response.text


FINAL = {"stopped", "succeeded", "failed", "deleted"}


def _settled(client: Client) -> list[Event]:
    """The account's events once its instances are all stopped (no event about one comes by
    itself any more) and no more come for a moment. Waiting for the status first: on a loaded
    machine a stop may take longer than the moment."""
    wait_until(
        lambda: all(i["status"] in FINAL for i in client.instances()), what="all instances final"
    )
    before = client.events(0, 1000)
    while True:
        time.sleep(0.3)
        now = client.events(0, 1000)
        if now == before:
            return now
        before = now


def _get(api: Api, client: Client, query: str) -> httpx.Response:
    key = client._http.headers["authorization"]
    return httpx.get(f"{api.url}/v1/events?{query}", headers={"authorization": key})


def test_every_answer_carries_the_latest_seq_to_follow_from(api: Api) -> None:
    """A filtered page that matches nothing still says where the log ends: a follower starts
    there (not at 0) and gets the next matching event, and nothing older."""
    _, client = api.account("tail")
    client.stop(_launch(client))
    everything = _settled(client)
    nothing = _get(api, client, "object=i-00000000&limit=1")
    assert nothing.status_code == 200 and nothing.json() == []
    latest = int(nothing.headers["X-Events-Latest-Seq"])
    assert latest == everything[-1]["seq"]
    listed = _get(api, client, "limit=1")
    assert int(listed.headers["X-Events-Latest-Seq"]) == latest
    second = _launch(client)
    followed = client.events(latest, 1000, object=second, wait_s=10)
    assert followed and {e["object_id"] for e in followed} == {second}
    assert all((e["seq"] or 0) > latest for e in followed)
    polled = _get(api, client, f"after={latest}&object={second}&wait_s=1")
    assert int(polled.headers["X-Events-Latest-Seq"]) >= polled.json()[-1]["seq"]
    client.stop(second)
    _, empty = api.account("no-events-yet", credit=None)
    assert _get(api, empty, "").headers["X-Events-Latest-Seq"] == "0"


def test_newest_pages_back_from_the_tail_with_before(api: Api) -> None:
    _, client = api.account("recent")
    for _ in range(2):
        client.stop(_launch(client))
    everything = _settled(client)
    assert len(everything) >= 5
    tail = _get(api, client, "newest=true&limit=3").json()
    assert tail == everything[-3:]
    older = _get(api, client, f"newest=true&limit=2&before={tail[0]['seq']}").json()
    assert older == everything[-5:-3]
    first_id = everything[0]["object_id"]
    of_first = [e for e in everything if e["object_id"] == first_id]
    assert _get(api, client, f"newest=true&limit=2&object={first_id}").json() == of_first[-2:]


def test_an_object_prefix_filters_and_an_empty_object_is_a_clear_422(api: Api) -> None:
    _, client = api.account("prefix")
    first = _launch(client)
    client.stop(first)
    everything = _settled(client)
    assert client.events(0, 1000, object=f"{first[:-1]}*") == [
        e for e in everything if e["object_id"].startswith(first[:-1])
    ]
    response = _get(api, client, "object=*")
    assert response.status_code == 422
    assert "names no object" in response.json()["message"]
    assert "ending in *" in response.json()["hint"]


def _until(stream: IO[bytes], object_id: str) -> Iterator[bytes]:
    for line in stream:
        yield line
        if json.loads(line)["object_id"] == object_id:
            return


def test_the_cli_lists_filters_and_follows_events(api: Api, tmp_path: Path) -> None:
    _, client = api.account("cli-events")
    key = client._http.headers["authorization"].removeprefix("Bearer ")
    env = {**os.environ, "LOWCOSTGPU_URL": api.url, "LOWCOSTGPU_API_KEY": key}
    env["XDG_CONFIG_HOME"] = str(tmp_path)
    instance_id = _launch(client)
    cli = [str(Path(sys.executable).parent / "lowcostgpu"), "events"]
    listed = subprocess.run([*cli, "--instance", instance_id], env=env, capture_output=True)
    assert listed.returncode == 0 and b"Queued" in listed.stdout, listed.stderr
    as_json = subprocess.run([*cli, "--reason", "Queued", "--json"], env=env, capture_output=True)
    assert [e["object_id"] for e in json.loads(as_json.stdout)] == [instance_id]
    follow = [*cli, "--follow", "--all", "--json"]  # `--all`: the history first, then live
    follower = subprocess.Popen(follow, env=env, stdout=subprocess.PIPE)
    watchdog = threading.Timer(60, follower.kill)  # a missed event fails, never hangs
    watchdog.start()
    try:
        assert follower.stdout is not None
        assert json.loads(follower.stdout.readline())["reason"] == "Queued"  # the history first
        second = _launch(client)
        objects = [json.loads(line)["object_id"] for line in _until(follower.stdout, second)]
        assert objects[-1] == second  # then what happens, as it happens
    finally:
        watchdog.cancel()
        follower.kill()
        follower.wait()
    client.stop(instance_id)
    client.stop(second)

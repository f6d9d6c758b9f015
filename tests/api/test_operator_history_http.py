"""`GET /v1/operator/history` through the real HTTP stack: the admin key gets queue depth and
reclaims per step (a real queue and a real reclaim show), an account key gets 403 like every
operator route, and a window that makes no plot is a 422 saying what to change."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from api_server import ADMIN_KEY, Api

from waiting import wait_until

POOL = "eu-west/a100-sxm4"
SLEEP = ["sleep", "120"]


def _get(api: Api, key: str | None, query: str = "") -> httpx.Response:
    headers = {"authorization": f"Bearer {key}"} if key else {}
    return httpx.get(f"{api.url}/v1/operator/history{query}", headers=headers)


def _history(api: Api, query: str = "?window_s=3600&step_s=60") -> dict[str, Any]:
    answer = _get(api, ADMIN_KEY, query)
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def test_the_admin_key_gets_a_point_per_step_with_every_pool(api: Api) -> None:
    body = _history(api, "?window_s=21600&step_s=600")
    assert len(body["series"]) == 36
    assert body["window"]["end"] - body["window"]["start"] == 21600
    assert body["window"]["start"] <= body["now"] < body["window"]["end"]
    assert body["pools"] == [POOL]
    point = body["series"][-1]
    assert set(point) >= {"start", "queue_depth", "queue_depth_peak", "reclaims", "pools"}
    assert set(point["pools"][POOL]) == {
        "queue_depth",
        "queue_depth_peak",
        "reclaims",
        "reclaims_per_hour",
    }


def test_a_queued_instance_and_a_reclaim_show_in_the_history(api: Api) -> None:
    _, client = api.account("history")
    with client:
        first = client.launch(gpu="a100-sxm4", type="interruptible", gpus=2, command=SLEEP)
        client.launch(gpu="a100-sxm4", type="interruptible", gpus=2, command=SLEEP)  # waits
        wait_until(
            lambda: client.instance(first["id"])["status"] == "running",
            what="the first instance running",
        )
        assert _history(api)["queue_depth_now"] >= 1
        client.launch(gpu="a100-sxm4", type="on-demand", gpus=2, command=["sleep", "2"])
        wait_until(lambda: _history(api)["reclaims_window"] >= 1, what="a reclaim in the history")
    body = _history(api)
    per_pool = sum(p["pools"][POOL]["reclaims"] for p in body["series"])
    assert per_pool == body["reclaims_window"] >= 1
    assert max(p["queue_depth_peak"] for p in body["series"]) >= 1
    reclaimed = next(p for p in body["series"] if p["reclaims"])
    assert reclaimed["reclaims_per_hour"] == reclaimed["reclaims"] * 60  # one-minute steps
    assert body["events_read"] > 0


def test_an_account_key_is_refused_and_no_key_is_unauthenticated(api: Api) -> None:
    with api.admin() as admin:
        key = admin.create_account("curious-history")["api_key"]
    refused = _get(api, key)
    assert (refused.status_code, refused.json()["code"]) == (403, "forbidden")
    assert _get(api, None).status_code == 401


@pytest.mark.parametrize(
    ("query", "says"),
    [
        ("?step_s=30", "step_s is 30"),
        ("?window_s=60&step_s=120", "window_s is 60"),
        ("?window_s=86400&step_s=60", "1440 points, more than 1000"),
        ("?window_s=99999999&step_s=86400", "90 days"),
        ("?window_s=a-day", "window_s"),
    ],
)
def test_a_window_that_makes_no_plot_is_a_422_saying_what_to_change(
    api: Api, query: str, says: str
) -> None:
    answer = _get(api, ADMIN_KEY, query)
    assert answer.status_code == 422, answer.text
    body = answer.json()
    assert body["code"] == "invalid_request"
    assert says in body["message"] and body["hint"]

"""`GET /v1/operator/reclaims` through the real HTTP stack: the operator sees why the victim
policy chose each victim (words and figures), which the customer's `Preempted` message leaves
out; an account key gets 403 like every operator route."""

from __future__ import annotations

from typing import Any

import httpx
from api_server import ADMIN_KEY, Api

from waiting import wait_until


def _reclaims(api: Api, key: str | None = ADMIN_KEY) -> httpx.Response:
    headers = {"authorization": f"Bearer {key}"} if key else {}
    return httpx.get(f"{api.url}/v1/operator/reclaims?limit=1000", headers=headers)


def _of(api: Api, instance_id: str) -> list[dict[str, Any]]:
    answer = _reclaims(api)
    assert answer.status_code == 200, answer.text
    return [r for r in answer.json() if r["object_id"] == instance_id]


def test_the_operator_sees_the_policys_reasoning_the_customer_is_not_told(api: Api) -> None:
    _, victim = api.account("reclaimed")
    _, other = api.account("on-demand-customer")
    with victim, other:
        free = victim.fleet()["pools"][0]["free_gpus"]
        run = victim.launch(gpu="a100-sxm4", gpus=free, command=["sleep", "120"], grace_period_s=0)
        wait_until(lambda: victim.instance(run["id"])["status"] == "running", what="it runs")
        od = other.launch(gpu="a100-sxm4", type="on-demand", gpus=free, command=["sleep", "2"])
        wait_until(lambda: _of(api, run["id"]), what="the reclaim in the operator's view")
        account_id = victim.account()["id"]
    (seen,) = _of(api, run["id"])
    assert seen["message"].startswith("reclaimed for on-demand work: ")
    assert "chosen by" not in seen["message"] and od["id"] not in seen["message"]
    assert seen["reason"].startswith("chosen by ") and seen["policy"]["name"]
    assert seen["policy"]["cost_gpu_s"] >= 0 and seen["object_kind"] == "instance"
    assert seen["account_id"] == account_id


def test_an_account_key_is_refused_and_no_key_is_unauthenticated(api: Api) -> None:
    with api.admin() as admin:
        key = admin.create_account("curious-reclaims")["api_key"]
    refused = _reclaims(api, key)
    assert (refused.status_code, refused.json()["code"]) == (403, "forbidden")
    assert _reclaims(api, None).status_code == 401

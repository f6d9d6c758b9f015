"""Instances, prices, fleet, billing and service endpoints through the real HTTP stack."""

from __future__ import annotations

import httpx
import pytest
from api_server import Api

from lowcostgpu.client.api import Client
from lowcostgpu.client.records import Instance
from lowcostgpu.domain.errors import InsufficientCapacity, NotFound
from waiting import wait_until

HOLD = ["sleep", "3600"]


def wait_for(user: Client, instance_id: str, statuses: set[str]) -> Instance:
    def reached() -> Instance | None:
        inst = user.instance(instance_id)
        return inst if inst["status"] in statuses else None

    return wait_until(reached, what=f"{instance_id} {statuses}")


def test_prices_are_exact_strings_and_interruptible_is_exactly_half(api: Api) -> None:
    _, user = api.account("prices")
    by_gpu = {p["gpu"]: p for p in user.prices()["gpus"]}
    assert by_gpu["rtx-5090"]["on_demand_per_gpu_hour"] == "0.481"
    assert by_gpu["rtx-5090"]["interruptible_per_gpu_hour"] == "0.2405"
    assert by_gpu["rtx-5090"]["interruptible_100_gpu_hours"] == "24.05"
    assert by_gpu["rtx-5090"]["savings_100_gpu_hours"] == "24.05"
    assert by_gpu["h100-sxm"]["interruptible_per_gpu_hour"] == "0.84"


def test_instance_life_through_the_api_queue_eta_409_logs_stop_resume_delete(api: Api) -> None:
    _, user = api.account("life")
    first = user.launch(gpu="a100-sxm4", type="on-demand", gpus=2, command=HOLD)
    wait_for(user, first["id"], {"running"})
    # The pool is full: an interruptible launch waits in the queue, with its place.
    queued = user.launch(gpu="a100-sxm4", type="interruptible", command=["echo", "hello"])
    assert queued["status"] == "queued"
    assert queued["queue"] is not None and queued["queue"]["position"] == 1
    assert queued["queue"]["gpus_ahead"] == 0
    # On-demand work that nothing can make room for is refused at once, saying what is free.
    with pytest.raises(InsufficientCapacity) as refused:
        user.launch(gpu="a100-sxm4", type="on-demand", gpus=1, command=HOLD)
    assert refused.value.details == {
        "free_gpus": 0,
        "largest_free_block": 0,
        "reclaimable_gpus": 0,
    }
    # Stop frees the GPUs, and they are held for the refused customer (120 s): the queued one
    # waits, and the on-demand retry gets a GPU at once, with nothing to reclaim.
    user.stop(first["id"])
    wait_for(user, first["id"], {"stopped"})
    assert user.instance(queued["id"])["status"] == "queued"
    retry = user.launch(gpu="a100-sxm4", type="on-demand", gpus=1, command=HOLD)
    assert retry["status"] in ("starting", "running")
    # That placement ends the hold: the queued one runs, prints, succeeds; its logs are there.
    done = wait_for(user, queued["id"], {"succeeded"})
    assert done["exit_code"] == 0
    assert user.logs(queued["id"]) == "hello\n"
    assert "".join(user.follow_logs(queued["id"])) == "hello\n"
    assert [e["reason"] for e in user.timeline(queued["id"])][:1] == ["Queued"]
    user.stop(retry["id"])
    wait_for(user, retry["id"], {"stopped"})
    resumed = user.resume(first["id"])
    assert resumed["status"] in ("queued", "starting", "running")
    wait_for(user, first["id"], {"running"})
    user.stop(first["id"])
    wait_for(user, first["id"], {"stopped"})
    assert user.delete(first["id"])["status"] == "deleted"
    assert first["id"] not in [i["id"] for i in user.instances()]
    assert first["id"] in [i["id"] for i in user.instances(include_deleted=True)]
    with pytest.raises(NotFound):
        user.instance("i-doesnotexist")


def test_fleet_shows_pools_and_interruption_statistics(api: Api) -> None:
    _, user = api.account("fleet")
    fleet = user.fleet()
    pool = fleet["pools"][0]
    assert (pool["region"], pool["gpu_type"], pool["gpus"]) == ("eu-west", "a100-sxm4", 2)
    assert {"free_gpus", "queue_depth", "queued_gpus"} <= set(pool)
    stats = fleet["interruptions"][0]
    assert stats["gpu_type"] == "a100-sxm4"
    assert "median_time_between_interruptions_s" in stats


def test_billing_balance_metrics_healthz_and_openapi(api: Api) -> None:
    account_id, user = api.account("billing", credit="12.5")
    bill = user.bill()
    assert bill["account_id"] == account_id and bill["lines"] == [] and bill["total"] == "0.00"
    balance = user.balance()
    assert balance["balance"] == "12.50" and balance["can_launch"] is True
    assert balance["ledger"][0]["kind"] == "topup"
    assert user.usage_records() == []
    assert httpx.get(f"{api.url}/v1/nothing-here").status_code == 404
    metrics = httpx.get(f"{api.url}/metrics").text
    assert 'lowcostgpu_gpus{gpu_type="a100-sxm4",region="eu-west",use="total"} 2.0' in metrics
    assert "lowcostgpu_http_requests_total" in metrics
    assert 'lowcostgpu_http_requests_total{method="GET",status="404"}' in metrics
    assert 'lowcostgpu_http_requests_total{method="GET",status="200"}' in metrics
    assert httpx.get(f"{api.url}/healthz").json() == {"ok": True, "leading": True}
    paths = httpx.get(f"{api.url}/openapi.json").json()["paths"]
    assert {"/v1/instances", "/v1/prices", "/v1/fleet", "/v1/billing"} <= set(paths)

"""`GET /v1/operator/fleet`: the admin key gets the fleet over time; an account key gets 403."""

from __future__ import annotations

import httpx
import pytest
from console_server import ADMIN_KEY, Server


def _get(server: Server, key: str, query: str = "") -> httpx.Response:
    headers = {"authorization": f"Bearer {key}"}
    return httpx.get(f"{server.url}/v1/operator/fleet{query}", headers=headers)


def test_the_admin_key_gets_pools_interruptions_and_a_series_per_bucket(server: Server) -> None:
    answer = _get(server, ADMIN_KEY, "?window_s=3600&bucket_s=60")
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert len(body["series"]) == 60
    assert body["window"]["end"] - body["window"]["start"] == 3600
    assert {p["gpu_type"] for p in body["pools"]} == {"a100-sxm4", "h100-sxm"}
    assert body["gpus"] == 5
    assert {s["gpu_type"] for s in body["interruptions"]} == {"a100-sxm4", "h100-sxm"}
    assert set(body["series"][0]) >= {"utilisation_on_demand", "reclaims", "revenue"}


def test_an_account_key_is_refused(server: Server) -> None:
    _, key, _ = server.account("curious")
    answer = _get(server, key)
    assert (answer.status_code, answer.json()["code"]) == (403, "forbidden")


@pytest.mark.parametrize(
    "query", ["?bucket_s=30", "?window_s=60&bucket_s=120", "?window_s=864000&bucket_s=60"]
)
def test_a_window_without_sense_is_a_422_not_a_500(server: Server, query: str) -> None:
    assert _get(server, ADMIN_KEY, query).status_code == 422


def test_gpus_that_cluster_nodes_hold_are_counted_and_not_free(server: Server) -> None:
    _, key, _ = server.account("nodes")
    body = {
        "gpu": "h100-sxm",
        "gpus_per_node": 1,
        "standard_nodes": 1,
        "desired_preemptible_gpus": 1,
    }
    made = httpx.post(
        f"{server.url}/v1/clusters", json=body, headers={"authorization": f"Bearer {key}"}
    )
    assert made.status_code == 201, made.text
    pools = {p["gpu_type"]: p for p in _get(server, ADMIN_KEY).json()["pools"]}
    h100 = pools["h100-sxm"]
    assert (h100["node_standard_gpus"], h100["node_preemptible_gpus"]) >= (1, 1)
    for pool in pools.values():  # held counts instances and nodes; the node_* part is nodes'
        held = pool["on_demand_gpus"] + pool["interruptible_gpus"]
        assert pool["free_gpus"] == pool["gpus"] - held
        assert pool["node_standard_gpus"] <= pool["on_demand_gpus"]
        assert pool["node_preemptible_gpus"] <= pool["interruptible_gpus"]

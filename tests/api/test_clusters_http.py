"""Clusters through the real HTTP stack: a server (SQLite store, local runtime, loop, uvicorn) on
127.0.0.1; a preemptible node reclaimed by an on-demand launch drains for real (its placeholder
process gets SIGTERM and exits), and the cluster refills once capacity frees."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from api_server import Api, http_client, serving

from waiting import wait_until

FLEET = """
[[region]]
name = "eu-west"
  [[region.hosts]]
  name = "gpu-box"
  gpu_type = "a100-sxm4"
  gpus = 4
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    yield from serving(tmp_path_factory, FLEET)


def preemptible(cluster: dict[str, Any], status: str) -> list[str]:
    return [
        n["id"]
        for n in cluster["nodes"]
        if n["compute_class"] == "preemptible" and n["status"] == status
    ]


def test_reclaim_drain_and_refill_over_http(server: Api) -> None:
    http = http_client(server, "kube-team")
    body = {"gpu": "a100-sxm4", "gpus_per_node": 2, "standard_nodes": 1}
    made = http.post(
        "/v1/clusters", json={**body, "desired_preemptible_gpus": 2, "grace_period_s": 120}
    )
    assert made.status_code == 201, made.text
    cluster = made.json()
    cid = cluster["id"]
    assert (cluster["desired_preemptible_gpus"], cluster["allocated_preemptible_gpus"]) == (2, 2)
    labels = {n["labels"]["lowcostgpu.io/compute-class"] for n in cluster["nodes"]}
    assert labels == {"standard", "preemptible"}
    (victim,) = preemptible(cluster, "ready")
    node = next(n for n in cluster["nodes"] if n["id"] == victim)
    assert node["taints"] == [
        {"key": "lowcostgpu.io/preemptible", "value": "true", "effect": "NoSchedule"}
    ]

    od = http.post(
        "/v1/instances",
        json={"gpu": "a100-sxm4", "type": "on-demand", "gpus": 2, "command": ["sleep", "600"]},
    )
    assert od.status_code == 201, od.text
    instance_id = od.json()["id"]
    # The placeholder gets SIGTERM at T+0 and exits: the node is removed long before its deadline
    # (120 s; the wait's own deadline is half that, so a loaded machine cannot pass it by timing).
    gone = wait_until(
        lambda: victim not in {n["id"] for n in http.get(f"/v1/clusters/{cid}").json()["nodes"]},
        what="the reclaimed node to be removed",
    )
    assert gone
    cluster = http.get(f"/v1/clusters/{cid}").json()
    assert cluster["allocated_preemptible_gpus"] == 0 and cluster["target_met"] is False
    assert len(preemptible(cluster, "pending")) == 1, "the replacement waits in the queue"
    running = wait_until(
        lambda: http.get(f"/v1/instances/{instance_id}").json()["status"] == "running",
        what="the on-demand instance to run",
    )
    assert running

    assert http.post(f"/v1/instances/{instance_id}/stop").status_code == 200
    # Refilled is all of it at once: the GPUs allocated, the target met, a new node ready. The
    # count can reach 2 a step before the rest, so the wait is for the whole state (on a loaded
    # machine the first version read the cluster in between and failed).
    refilled = wait_until(
        lambda: (
            (c := http.get(f"/v1/clusters/{cid}").json())["allocated_preemptible_gpus"] == 2
            and c["target_met"] is True
            and preemptible(c, "ready") not in ([], [victim])
            and c
        ),
        what="the cluster to refill",
    )
    assert refilled
    events = [e for e in http.get("/v1/events", params={"limit": 1000}).json()]
    mine = [(e["object_id"], e["reason"]) for e in events]
    assert (victim, "Preempted") in mine and (victim, "NodeRemoved") in mine
    assert (cid, "TargetUnmet") in mine and (cid, "TargetMet") in mine


def test_cluster_requests_are_checked_and_owned(server: Api) -> None:
    http = http_client(server, "owner")
    other = http_client(server, "stranger")
    refused = http.post(
        "/v1/clusters", json={"gpu": "a100-sxm4", "gpus_per_node": 1, "standard_nodes": 0}
    )
    assert refused.status_code == 422 and "at least one standard node" in refused.json()["message"]
    made = http.post("/v1/clusters", json={"gpu": "a100-sxm4", "gpus_per_node": 1}).json()
    cid = made["id"]
    assert other.get(f"/v1/clusters/{cid}").status_code == 404
    assert (
        other.patch(f"/v1/clusters/{cid}", json={"desired_preemptible_gpus": 1}).status_code == 404
    )
    assert [c["id"] for c in other.get("/v1/clusters").json()] == []
    odd = http.patch(f"/v1/clusters/{cid}", json={"desired_preemptible_gpus": -1})
    assert odd.status_code == 422 and "nearest valid value is 0" in odd.json()["hint"]
    standard = made["nodes"][0]["id"]
    convert = http.post(
        f"/v1/clusters/{cid}/nodes/{standard}/convert", json={"compute_class": "preemptible"}
    )
    assert convert.status_code == 409
    assert "cannot be converted to preemptible in place" in convert.json()["message"]
    deleted = http.delete(f"/v1/clusters/{cid}")
    # SIGTERM reaches the nodes right after the commit: the loop may have removed them already
    assert deleted.status_code == 200 and deleted.json()["status"] in ("deleting", "deleted")
    wait_until(
        lambda: http.get(f"/v1/clusters/{cid}").json()["status"] == "deleted",
        what="the cluster to be deleted",
    )


BOUNDS_FLEET = """
[[region]]
name = "eu-west"
  [[region.hosts]]
  name = "box-a"
  gpu_type = "a100-sxm4"
  gpus = 3
  [[region.hosts]]
  name = "box-b"
  gpu_type = "a100-sxm4"
  gpus = 3
"""
# Nodes of 2 GPUs: one fits each 3-GPU host, so the pool holds 2 of them (not 6 // 2 = 3).


@pytest.fixture(scope="module")
def bounded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    for api in serving(tmp_path_factory, BOUNDS_FLEET):  # its clean-up runs when the loop ends
        with http_client(api, "sizes") as http:
            yield http


def delete_and_wait(http: httpx.Client, cid: str) -> None:
    assert http.delete(f"/v1/clusters/{cid}").status_code == 200
    wait_until(
        lambda: http.get(f"/v1/clusters/{cid}").json()["status"] == "deleted",
        what="the cluster to be deleted",
    )


@pytest.mark.parametrize(
    ("standard", "desired", "refusal"),
    [
        (2, 0, None),  # every node slot of the pool
        (3, 0, "can hold at most 2 node(s) of 2 GPUs"),
        (1, 2, None),  # the one slot left beside the standard node
        (1, 4, "can hold at most 2 preemptible GPUs"),
    ],
)
def test_cluster_sizes_are_bounded_by_what_the_pool_can_hold(
    bounded: httpx.Client, standard: int, desired: int, refusal: str | None
) -> None:
    body = {"gpu": "a100-sxm4", "gpus_per_node": 2, "standard_nodes": standard}
    made = bounded.post("/v1/clusters", json={**body, "desired_preemptible_gpus": desired})
    if refusal is None:
        assert made.status_code == 201, made.text
        delete_and_wait(bounded, made.json()["id"])
        return
    assert made.status_code == 422 and refusal in made.json()["message"], made.text
    assert "ask for" in made.json()["hint"] and made.json()["details"]["maximum"] == 2
    assert [c for c in bounded.get("/v1/clusters").json() if c["status"] != "deleted"] == []


@pytest.mark.parametrize(("desired", "refusal"), [(2, None), (4, "at most 2 preemptible GPUs")])
def test_a_target_change_is_bounded_by_the_pool(
    bounded: httpx.Client, desired: int, refusal: str | None
) -> None:
    made = bounded.post("/v1/clusters", json={"gpu": "a100-sxm4", "gpus_per_node": 2})
    assert made.status_code == 201, made.text
    cid = made.json()["id"]
    changed = bounded.patch(f"/v1/clusters/{cid}", json={"desired_preemptible_gpus": desired})
    if refusal is None:
        assert changed.status_code == 200 and changed.json()["desired_preemptible_gpus"] == 2
    else:
        assert changed.status_code == 422 and refusal in changed.json()["message"], changed.text
        assert bounded.get(f"/v1/clusters/{cid}").json()["desired_preemptible_gpus"] == 0
    delete_and_wait(bounded, cid)


@pytest.mark.parametrize(
    ("method", "body"),
    [
        ("POST", {"standard_nodes": 1_000_000_000}),
        ("POST", {"desired_preemptible_gpus": 10**18}),
        ("POST", {"standard_nodes": 2**63}),  # beyond any stored count: refused at the edge
        ("POST", {"desired_preemptible_gpus": 2**63 - 2}),
        ("PATCH", {"desired_preemptible_gpus": 2**63}),
        ("PATCH", {"desired_preemptible_gpus": 2**62}),
    ],
)
def test_huge_sizes_are_refused_at_once_and_the_server_goes_on(
    bounded: httpx.Client, method: str, body: dict[str, int]
) -> None:
    """Each answers a 4xx within the client's timeout (10 s; the bug was a request that never
    returned), nothing is created, and an ordinary request is served after it."""
    made = bounded.post("/v1/clusters", json={"gpu": "a100-sxm4", "gpus_per_node": 2})
    assert made.status_code == 201, made.text
    cid = made.json()["id"]
    if method == "POST":
        answer = bounded.post("/v1/clusters", json={"gpu": "a100-sxm4", "gpus_per_node": 2, **body})
    else:
        answer = bounded.patch(f"/v1/clusters/{cid}", json=body)
    assert answer.status_code == 422, answer.text
    assert answer.json()["message"] and answer.json().get("hint")
    live = [c["id"] for c in bounded.get("/v1/clusters").json() if c["status"] != "deleted"]
    assert live == [cid]
    delete_and_wait(bounded, cid)

"""A preemptible cluster node among the next victims, through the real HTTP stack: its cluster's
owner gets the `PreemptionRisk` event and sees the node at risk in the cluster's view; the
on-demand customer whose demand caused it sees neither; the mark clears when the demand ends."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from api_server import Api, http_client, serving

from waiting import wait_until

FLEET = """
[[region]]
name = "eu-west"
""" + "".join(
    f"""  [[region.hosts]]
  name = "box-{k}"
  gpu_type = "a100-sxm4"
  gpus = 2
"""
    for k in range(3)
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    yield from serving(tmp_path_factory, FLEET)


def node(cluster: dict[str, Any], node_id: str) -> dict[str, Any]:
    return next(n for n in cluster["nodes"] if n["id"] == node_id)


def test_the_cluster_owner_is_warned_and_sees_the_node_at_risk_until_the_demand_ends(
    server: Api,
) -> None:
    team, bigco = http_client(server, "risk-team"), http_client(server, "risk-bigco")
    made = team.post(
        "/v1/clusters",
        json={"gpu": "a100-sxm4", "gpus_per_node": 2, "desired_preemptible_gpus": 2},
    )
    assert made.status_code == 201, made.text
    cid = made.json()["id"]
    (at_risk,) = [n["id"] for n in made.json()["nodes"] if n["compute_class"] == "preemptible"]
    assert node(made.json(), at_risk)["risk"] is None
    od = bigco.post(
        "/v1/instances",
        json={"gpu": "a100-sxm4", "type": "on-demand", "gpus": 2, "command": ["sleep", "600"]},
    )
    assert od.status_code == 201, od.text  # the free host: 2 GPUs asked for lately, none free
    shown = node(team.get(f"/v1/clusters/{cid}").json(), at_risk)
    assert shown["status"] == "ready" and shown["risk"] == "next" and shown["risk_since"]
    events = team.get("/v1/events", params={"limit": 100}).json()
    (warning,) = [e for e in events if e["reason"] == "PreemptionRisk"]
    assert warning["object_id"] == at_risk and warning["data"]["cluster_id"] == cid
    theirs = bigco.get("/v1/events", params={"limit": 100}).json()
    assert not [e for e in theirs if e["reason"] == "PreemptionRisk"]
    assert at_risk not in str(theirs) and cid not in str(theirs)

    assert bigco.post(f"/v1/instances/{od.json()['id']}/stop").status_code == 200
    cleared = wait_until(
        lambda: node(team.get(f"/v1/clusters/{cid}").json(), at_risk)["risk"] is None,
        what="the node's risk to clear once the on-demand work has ended",
    )
    assert cleared
    assert node(team.get(f"/v1/clusters/{cid}").json(), at_risk)["status"] == "ready"

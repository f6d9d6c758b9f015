"""A cluster's page marks a preemptible node that the next on-demand requests would reclaim
("at risk", beside its state) and leaves the others unmarked."""

from __future__ import annotations

from typing import Any

import httpx
from console_server import Server, sign_in


def test_the_node_among_the_next_victims_is_shown_at_risk(server: Server, page: Any) -> None:
    _, key, _ = server.account("risk-team")
    _, od_key, _ = server.account("risk-bigco")
    headers = {"authorization": f"Bearer {key}"}
    body = {"gpu": "h100-sxm", "gpus_per_node": 1, "standard_nodes": 1}
    made = httpx.post(
        f"{server.url}/v1/clusters", json={**body, "desired_preemptible_gpus": 2}, headers=headers
    )
    assert made.status_code == 201, made.text
    cid = made.json()["id"]
    od = httpx.post(
        f"{server.url}/v1/instances",
        json={"gpu": "h100-sxm", "type": "on-demand", "gpus": 1, "command": ["sleep", "600"]},
        headers={"authorization": f"Bearer {od_key}"},
    )
    assert od.status_code == 201, od.text  # the box's last free GPU: 1 asked for, none free
    nodes = httpx.get(f"{server.url}/v1/clusters/{cid}", headers=headers).json()["nodes"]
    (at_risk,) = [n["id"] for n in nodes if n["risk"] == "next"]
    sign_in(page, server.url, key)
    page.goto(f"{server.url}/console/#/clusters/{cid}")
    page.locator("#nodes tr", has_text=at_risk).locator(".badge", has_text="at risk").wait_for()
    assert page.locator("#nodes .badge", has_text="at risk").count() == 1

"""Preemption risk through HTTP: the next victim's metadata endpoint advises it to save, and its
owner (only) gets a `PreemptionRisk` event; the on-demand customer sees neither."""

from __future__ import annotations

import httpx
from api_server import Api

from lowcostgpu.client.api import Client
from waiting import wait_until

HOLD = ["sleep", "3600"]


def _interruption(api: Api, token: str) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"}
    return httpx.get(f"{api.url}/v1/metadata/interruption", headers=headers)


def _token(api: Api, instance_id: str) -> str:
    plane = api.running.wired.plane
    allocation_id = plane.store.instance(instance_id).state.allocation_id
    assert allocation_id is not None  # placed by the launch itself
    return api.running.wired.tokens.mint(instance_id, allocation_id)


def _reasons(client: Client) -> list[tuple[str, str]]:
    return [(str(e["reason"]), str(e["object_id"])) for e in client.events(0, 1000)]


def test_the_next_victim_is_advised_to_save_and_only_its_owner_is_told(api: Api) -> None:
    _, owner = api.account("risk-owner")
    _, customer = api.account("risk-customer")
    # The fleet is one 2-GPU host: one interruptible instance, then an on-demand one fills it.
    victim = owner.launch(gpu="a100-sxm4", type="interruptible", gpus=1, command=HOLD)
    token = _token(api, victim["id"])
    before = _interruption(api, token)
    assert before.status_code == 404  # not at risk, no notice: as before warnings existed
    od = customer.launch(gpu="a100-sxm4", type="on-demand", gpus=1, command=HOLD)
    # No GPU is free and one was asked for lately: the next request would reclaim the victim.
    answer = _interruption(api, token)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert (body["action"], body["risk"]) == ("none", "next")
    assert isinstance(body["risk_since"], int)
    assert ("PreemptionRisk", victim["id"]) in _reasons(owner)
    risk = [e for e in owner.events(0, 1000) if e["reason"] == "PreemptionRisk"]
    assert len(risk) == 1 and od["id"] not in str(risk[0])
    assert all(reason != "PreemptionRisk" for reason, _ in _reasons(customer))
    # The on-demand work ends: a GPU is free again, the risk clears (no event says so).
    customer.stop(od["id"])
    wait_until(lambda: _interruption(api, token).status_code == 404, what="the risk to clear")
    owner.stop(victim["id"])

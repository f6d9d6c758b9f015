"""Instance tokens through HTTP: a token opens metadata only for the run it was minted for, and a
launch asking for a volume this machine can never hold is refused at once (422, what fits)."""

from __future__ import annotations

import time

import httpx
from api_server import Api

from lowcostgpu.client.api import Client

HOLD = ["sleep", "3600"]


def _interruption(api: Api, token: str) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"}
    return httpx.get(f"{api.url}/v1/metadata/interruption", headers=headers)


def _wait_status(user: Client, instance_id: str, wanted: set[str]) -> str:
    deadline = time.monotonic() + 30
    while True:
        status = str(user.instance(instance_id)["status"])
        if status in wanted or time.monotonic() > deadline:
            return status
        time.sleep(0.05)


def test_a_token_opens_metadata_only_while_its_run_is_the_instances_current_one(api: Api) -> None:
    _, user = api.account("tokens-run")
    inst = user.launch(gpu="a100-sxm4", type="interruptible", gpus=1, command=HOLD)
    store, tokens = api.running.wired.plane.store, api.running.wired.tokens
    allocation_id = store.instance(inst["id"]).state.allocation_id
    assert allocation_id is not None  # placed by the launch itself
    current = tokens.mint(inst["id"], allocation_id)
    earlier = tokens.mint(inst["id"], f"{inst['id']}@1")  # a run that is not this one
    assert _interruption(api, current).status_code == 404  # opened: no notice yet
    refused = _interruption(api, earlier)
    assert refused.status_code == 401 and "run that is over" in refused.text
    user.stop(inst["id"])
    assert _wait_status(user, inst["id"], {"stopped"}) == "stopped"
    after = _interruption(api, current)
    assert after.status_code == 401 and "run that is over" in after.text


def test_a_volume_larger_than_the_machine_can_hold_is_refused_at_launch(api: Api) -> None:
    _, user = api.account("tokens-volume")
    body = {"gpu": "a100-sxm4", "type": "on-demand", "command": HOLD}
    key = user._http.headers["authorization"]
    got = httpx.post(
        f"{api.url}/v1/instances",
        json={**body, "volume": "big:100000GB"},
        headers={"authorization": key},
    )
    assert got.status_code == 422, got.text
    error = got.json()
    assert "does not fit on this machine" in str(error) and "at most" in str(error)
    assert user.instances() == []  # refused before anything was written
    fits = httpx.post(
        f"{api.url}/v1/instances",
        json={**body, "volume": "small:1GB"},
        headers={"authorization": key},
    )
    assert fits.status_code == 201, fits.text
    user.stop(fits.json()["id"])

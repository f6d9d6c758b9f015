"""Accounts, keys and balances through the real HTTP stack."""

from __future__ import annotations

import httpx
import pytest
from api_server import ADMIN_KEY, Api

from lowcostgpu.client.api import Client
from lowcostgpu.domain.errors import (
    Forbidden,
    InvalidRequest,
    NotFound,
    PaymentRequired,
    Unauthenticated,
)

SLEEP = ["sleep", "30"]


def test_without_a_key_every_user_endpoint_is_401_with_a_hint(api: Api) -> None:
    response = httpx.get(f"{api.url}/v1/instances")
    assert response.status_code == 401
    body = response.json()
    assert body["code"] == "unauthenticated"
    assert "lowcostgpu login" in body["hint"]
    assert (
        httpx.get(f"{api.url}/v1/fleet", headers={"authorization": "Bearer nope"}).status_code
        == 401
    )


@pytest.mark.parametrize(
    "headers",
    [{}, {"authorization": "Bearer nope"}, {"authorization": ""}],
    ids=["no key", "a wrong key", "an empty header"],
)
def test_prices_are_public_whatever_the_authorization_header(
    api: Api, headers: dict[str, str]
) -> None:
    response = httpx.get(f"{api.url}/v1/prices", headers=headers)
    assert response.status_code == 200
    assert {"a100-sxm4", "h100-sxm"} <= {g["gpu"] for g in response.json()["gpus"]}


def test_an_account_key_cannot_act_as_admin_and_the_admin_owns_nothing(api: Api) -> None:
    _, user = api.account("alice")
    with pytest.raises(Forbidden, match="admin key"):
        user.create_account("mallory")
    with api.admin() as admin, pytest.raises(Forbidden, match="owns no instances"):
        admin.instances()


def test_keys_are_stored_hashed_and_a_second_key_works(api: Api) -> None:
    account_id, _ = api.account("bob")
    with api.admin() as admin:
        second = admin.create_key(account_id)["api_key"]
    store = api.running.wired.plane.store
    hashes = [k.key_hash for k in store.api_keys(account_id)]
    assert len(hashes) == 2 and second not in hashes and all(len(h) == 64 for h in hashes)
    assert Client(api.url, second).account()["id"] == account_id
    assert ADMIN_KEY not in {k.key_hash for k in store.api_keys()}


@pytest.mark.parametrize(
    ("amount", "message"),
    [("-5", "more than \\$0"), ("abc", "not a number"), ("1e9", "at most"), ("0", "more than")],
)
def test_a_bad_top_up_is_a_clear_422(api: Api, amount: str, message: str) -> None:
    account_id, _ = api.account("carol", credit=None)
    with api.admin() as admin, pytest.raises(InvalidRequest, match=message):
        admin.topup(account_id, amount)


def test_top_up_is_exact_and_idempotent_by_reference(api: Api) -> None:
    account_id, user = api.account("dave", credit=None)
    with api.admin() as admin:
        admin.topup(account_id, "0.1", reference="wire-1")
        admin.topup(account_id, "0.1", reference="wire-1")
        admin.topup(account_id, "0.2")
        with pytest.raises(NotFound):
            admin.topup("acct-nope", "1")
    assert user.balance()["balance"] == "0.30"


def test_a_launch_with_an_empty_balance_is_refused_with_402(api: Api) -> None:
    _, user = api.account("erin", credit=None)
    with pytest.raises(PaymentRequired, match="positive balance") as caught:
        user.launch(gpu="a100-sxm4", type="interruptible", command=SLEEP)
    assert "top" in (caught.value.hint or "")
    response = httpx.post(
        f"{api.url}/v1/instances",
        json={"gpu": "a100-sxm4", "command": SLEEP},
        headers={"authorization": f"Bearer {user._http.headers['authorization'][7:]}"},
    )
    assert response.status_code == 402
    assert user.instances() == []


@pytest.mark.parametrize(
    "body",
    [
        {"gpu": "a100-sxm4", "gpus": 0, "command": SLEEP},
        {"gpu": "a100-sxm4", "type": "auction", "command": SLEEP},
        {"gpu": "nope-gpu", "command": SLEEP},
        {"gpu": "a100-sxm4"},
        {"gpu": "a100-sxm4", "command": SLEEP, "volume": "ckpts:lots"},
        {"gpu": "a100-sxm4", "command": SLEEP, "env": {"LOWCOSTGPU_TOKEN": "x"}},
        {"gpu": "a100-sxm4", "command": SLEEP, "surprise": 1},
        {"gpu": "a100-sxm4", "command": SLEEP, "grace_period_s": 301},
    ],
)
def test_invalid_launches_are_4xx_json_never_500(api: Api, body: dict[str, object]) -> None:
    _, user = api.account("frank")
    key = user._http.headers["authorization"]
    response = httpx.post(f"{api.url}/v1/instances", json=body, headers={"authorization": key})
    assert 400 <= response.status_code < 500, response.text
    assert {"code", "message"} <= set(response.json())


def test_unknown_paths_and_methods_answer_json(api: Api) -> None:
    response = httpx.get(f"{api.url}/v1/nothing-here")
    assert response.status_code == 404 and response.json()["code"] == "not_found"
    response = httpx.put(f"{api.url}/healthz")
    assert response.status_code == 405 and response.json()["code"] == "method_not_allowed"


def test_unauthenticated_maps_back_to_the_domain_error(api: Api) -> None:
    with pytest.raises(Unauthenticated):
        Client(api.url, "lcg_wrong").instances()

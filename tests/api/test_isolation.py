"""Isolation: every endpoint the app has, called with another account's key, reveals nothing.

The routes are read from the app's own OpenAPI document, so an endpoint added later (clusters,
say) is covered without touching this test. Objects of the victim are addressed by their real
ids, and each answer must be exactly the answer for ids that never existed (a 404 for an
instance); endpoints without ids must not mention the victim's objects at all.
"""

from __future__ import annotations

import time

import httpx
from api_server import Api


def test_a_foreign_key_gets_404_on_every_object_and_sees_none_of_them(api: Api) -> None:
    victim_id, victim = api.account("victim")
    _, intruder = api.account("intruder")
    inst = victim.launch(gpu="a100-sxm4", type="interruptible", command=["sleep", "60"])
    deadline = time.monotonic() + 30  # a state the loop will not move on from by itself
    while victim.instance(inst["id"])["status"] != "running" and time.monotonic() < deadline:
        time.sleep(0.1)
    before = victim.instance(inst["id"])["status"]
    assert before == "running"
    key = intruder._http.headers["authorization"]
    paths = httpx.get(f"{api.url}/openapi.json").json()["paths"]
    secrets = (inst["id"], victim_id)
    tried = 0
    for template, methods in sorted(paths.items()):
        if not template.startswith("/v1/"):
            continue
        for method in methods:
            real = _call(api, method, template.format_map(_Ids(inst["id"], victim_id)), key)
            fake = _call(api, method, template.format_map(_Ids("i-nothing", "acct-nothing")), key)
            tried += 1
            where = f"{method.upper()} {template}"
            assert real.status_code < 500, (where, real.text)
            if "{" in template:
                unmasked = real.text.replace(inst["id"], "i-nothing").replace(
                    victim_id, "acct-nothing"
                )
                assert (real.status_code, unmasked) == (fake.status_code, fake.text), where
            else:
                assert not any(s in real.text for s in secrets), (where, real.text)
            if "{instance_id}" in template:
                assert real.status_code in (404, 422), (where, real.status_code)
    assert tried >= 20
    assert victim.instance(inst["id"])["status"] == before  # nothing was stopped or deleted
    victim.stop(inst["id"])


def _call(api: Api, method: str, path: str, key: str) -> httpx.Response:
    headers = {"authorization": key}
    return httpx.request(method.upper(), f"{api.url}{path}", headers=headers, json={})


class _Ids(dict[str, str]):
    def __init__(self, instance_id: str, account_id: str) -> None:
        super().__init__()
        self.instance_id, self.account_id = instance_id, account_id

    def __missing__(self, name: str) -> str:
        if name == "instance_id":
            return self.instance_id
        if name == "account_id":
            return self.account_id
        return "x-unknown"  # any other object of the victim: ids from other routers

"""Two tenants on one real server, for the isolation suite (`test_isolation.py`).

The victim and the intruder each own every kind of object the API addresses by id — a running
instance with a volume (addressed by its name), a cluster with a standard node, a webhook
endpoint (to a real receiver) with deliveries — so each route can be called with the victim's
real ids, with ids that never existed, and with the intruder's own (the control: the same call
on one's own objects gets through, so a refusal on the victim's is the ownership check, not a
bad request).

`Snapshot` is what the victim and the admin can see of the victim's world, with what the loop
changes by itself left out (metered usage and its charges), so "nothing changed" is one `==`.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from api_server import ADMIN_KEY, free_port, kill_workloads
from webhook_receiver import Receiver

from lowcostgpu.api.server import Running, start
from lowcostgpu.app.webhooks import WebhookPolicy
from lowcostgpu.bootstrap.serve import ServeOptions

FLEET = """
[[region]]
name = "eu-west"
  [[region.hosts]]
  name = "gpu-box"
  gpu_type = "a100-sxm4"
  gpus = 8
"""
GPU = "a100-sxm4"
POLICY = WebhookPolicy(first_backoff_s=1, max_backoff_s=1, disable_after_s=600, poll_s=0.1)
TOKEN_LINE = re.compile(r"token=(\S+)")
# A workload that tells its token (as a workload of an attacker would) and then waits.
TELLS_ITS_TOKEN = ["sh", "-c", 'echo "token=$LOWCOSTGPU_TOKEN"; exec sleep 600']


def until(what: str, check: Callable[[], Any], timeout_s: float = 45) -> Any:
    """Wait for `check()` to be truthy (a state the loop reaches), with a deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def never_existed(real_id: str) -> str:
    """An id of the same shape that names nothing: the hex digits after the kind prefix are
    zeroed, so ids made from others (a node `c-…-n1`, a delivery `wh-….…`) stay made from the
    zeroed parents, and masking a text id by id gives the same text as asking for the fakes."""
    kind, sep, rest = real_id.partition("-")
    if not sep:
        return re.sub("[0-9a-f]", "0", real_id)
    return kind + sep + re.sub("[0-9a-f]", "0", rest)


@dataclass
class Tenant:
    """An account and one object of every kind, by path parameter name."""

    name: str
    key: str
    account_id: str
    receiver: Receiver
    ids: dict[str, str] = field(default_factory=dict)
    token: str = ""  # its instance's LOWCOSTGPU_TOKEN, as the workload got it
    webhook_url: str = ""
    message_ids: list[str] = field(default_factory=list)

    @property
    def auth(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.key}"}

    def secrets(self) -> list[str]:
        """What no other account may ever see: its ids, name, webhook URL and token."""
        named = [self.account_id, self.name, self.webhook_url, self.token]
        return [*named, *self.ids.values(), *self.message_ids]


@dataclass
class World:
    url: str
    running: Running
    victim: Tenant
    intruder: Tenant
    http: httpx.Client

    def call(
        self, method: str, path: str, headers: dict[str, str], body: Any = None
    ) -> httpx.Response:
        return self.http.request(method.upper(), path, headers=headers, json=body)

    def get(self, path: str, tenant: Tenant) -> Any:
        answer = self.call("GET", path, tenant.auth)
        assert answer.status_code == 200, (path, answer.text)
        return answer.json()


ADMIN = {"authorization": f"Bearer {ADMIN_KEY}"}
METERED = frozenset({"usage", "charge"})  # ledger entries the loop writes by itself


def serving_world(tmp: Path) -> Iterator[World]:
    (tmp / "fleet.toml").write_text(FLEET)
    options = ServeOptions(
        data_dir=tmp / "data",
        fleet=tmp / "fleet.toml",
        port=free_port(),
        admin_key=ADMIN_KEY,
        allow_private_webhooks=True,  # the receivers listen on 127.0.0.1
        webhook_policy=POLICY,
    )
    running = start(options)
    receivers = [Receiver(free_port()).start(), Receiver(free_port()).start()]
    http = httpx.Client(base_url=running.url, timeout=30)
    try:
        stamp = f"{time.time_ns():x}"[-8:]
        victim = _tenant(http, f"victim-{stamp}", receivers[0])
        intruder = _tenant(http, f"intruder-{stamp}", receivers[1])
        world = World(running.url, running, victim, intruder, http)
        for tenant in (victim, intruder):
            _furnish(world, tenant)
        for tenant in (victim, intruder):
            _settle_objects(world, tenant)
        yield world
    finally:
        http.close()
        for r in receivers:
            r.stop()
        kill_workloads(running)
        running.stop()
        mounts = f"grep -F '{tmp}/' /proc/mounts | cut -d' ' -f2 | xargs -r umount"
        subprocess.run(["sh", "-c", mounts], check=False)  # the volumes' loop mounts


def _tenant(http: httpx.Client, name: str, receiver: Receiver) -> Tenant:
    made = http.post("/v1/accounts", headers=ADMIN, json={"name": name})
    assert made.status_code == 201, made.text
    account = made.json()
    topped = http.post(
        f"/v1/accounts/{account['id']}/topup", headers=ADMIN, json={"amount": "10.00"}
    )
    assert topped.status_code == 200, topped.text
    return Tenant(name, account["api_key"], account["id"], receiver)


def _furnish(world: World, t: Tenant) -> None:
    """A webhook first (so every later event is delivered), then an instance and a cluster."""
    hook = world.call("POST", "/v1/webhooks", t.auth, {"url": t.receiver.url})
    assert hook.status_code == 201, hook.text
    t.receiver.secret = hook.json()["secret"]
    t.webhook_url = t.receiver.url
    t.ids["webhook_id"] = hook.json()["id"]
    # A volume name of its own (names are per account: both owning `ckpts` would make the
    # intruder's own the answer to the victim's); `test_isolation` also tries a shared name.
    volume = f"vol-{t.name}"
    body = {"gpu": GPU, "type": "on-demand", "command": TELLS_ITS_TOKEN, "volume": f"{volume}:1GB"}
    inst = world.call("POST", "/v1/instances", t.auth, body)
    assert inst.status_code == 201, inst.text
    t.ids["instance_id"] = inst.json()["id"]
    t.ids["volume_name"] = volume
    cluster = world.call(
        "POST", "/v1/clusters", t.auth, {"gpu": GPU, "gpus_per_node": 1, "standard_nodes": 1}
    )
    assert cluster.status_code == 201, cluster.text
    t.ids["cluster_id"] = cluster.json()["id"]
    t.ids["account_id"] = t.account_id


def _settle_objects(world: World, t: Tenant) -> None:
    """Wait until the instance runs (and told its token), the node is ready, a delivery exists."""
    inst = t.ids["instance_id"]
    until(f"{inst} running", lambda: world.get(f"/v1/instances/{inst}", t)["status"] == "running")

    def told() -> str | None:
        logs = world.call("GET", f"/v1/instances/{inst}/logs", t.auth).text
        found = TOKEN_LINE.search(logs)
        return found.group(1) if found else None

    t.token = until(f"{inst} to print its token", told)
    cluster = t.ids["cluster_id"]

    def node() -> str | None:
        nodes = world.get(f"/v1/clusters/{cluster}", t)["nodes"]
        return next((n["id"] for n in nodes if n["status"] == "ready"), None)

    t.ids["node_id"] = until(f"a ready node of {cluster}", node)
    hook = t.ids["webhook_id"]
    deliveries = until(
        f"a delivery of {hook}", lambda: world.get(f"/v1/webhooks/{hook}/deliveries", t)
    )
    t.ids["delivery_id"] = deliveries[0]["id"]
    t.message_ids = [d["message_id"] for d in deliveries]


# Snapshots --------------------------------------------------------------------------------------


def snapshot(world: World, t: Tenant) -> dict[str, Any]:
    """What `t` and the admin see of `t`'s world, less what the loop changes by itself (usage
    metered on open spans, its charges): objects, events, deliveries and what arrived, the
    ledger's other entries."""
    get = world.get
    hook = t.ids["webhook_id"]
    ledger = get("/v1/billing/balance?ledger=10000", t)["ledger"]
    accounts = world.call("GET", "/v1/accounts", ADMIN).json()
    return {
        "instances": get("/v1/instances?all=true&limit=500", t),
        "instance": get(f"/v1/instances/{t.ids['instance_id']}", t),
        "timeline": get(f"/v1/instances/{t.ids['instance_id']}/events", t),
        "clusters": get("/v1/clusters", t),
        "volumes": get("/v1/volumes", t),
        "webhooks": get("/v1/webhooks", t),
        "deliveries": get(f"/v1/webhooks/{hook}/deliveries", t),
        "received": [r.webhook_id for r in t.receiver.got],
        "events": get("/v1/events?limit=1000", t),
        "account": {k: v for k, v in get("/v1/account", t).items() if k != "balance"},
        # The meter's charges come by themselves each minute (one may land between two reads).
        "ledger_not_usage": [e for e in ledger if e["kind"] not in METERED],
        "as_admin": [
            {k: v for k, v in a.items() if k != "balance"}
            for a in accounts
            if a["id"] == t.account_id
        ],
    }


def usage_records(world: World, t: Tenant) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = world.get("/v1/billing/usage?limit=100000", t)
    return records


def settled(world: World, t: Tenant) -> dict[str, Any]:
    """A snapshot once every delivery is delivered and two reads a moment apart agree."""

    def steady() -> dict[str, Any] | None:
        first = snapshot(world, t)
        if any(d["status"] != "delivered" for d in first["deliveries"]):
            return None
        time.sleep(0.3)
        second = snapshot(world, t)
        return first if first == second else None

    found: dict[str, Any] = until(f"{t.name}'s world to settle", steady)
    return found

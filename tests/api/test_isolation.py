"""Tenant isolation: no key reaches another account's objects, sees them, or changes them.

The routes are read from the server's own OpenAPI document, so a route added later is covered
without touching this file — and fails `test_every_route_of_the_openapi_document_is_covered`
until the tenants own an object for each id it takes and a valid body is written for it here.

Two tenants own one object of every kind (`isolation_world`). Every route that takes an id is
called with the victim's real ids and with ids that never existed: the answers must be the same
once ids are masked (a 404 for an account's objects, a 403 for an admin route); the same call on
the intruder's own objects must get through (the control: the body is valid and the refusal is
the ownership check). After each test the victim's world, as the victim and the admin see it,
must be exactly what it was.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from isolation_routes import (
    BODY_IDS,
    ID_QUERIES,
    ORDER,
    REACHED,
    Route,
    fakes,
    key_of,
    load_routes,
    masked,
    names_an_object,
    sweep,
)
from isolation_world import (
    ADMIN,
    GPU,
    Tenant,
    World,
    serving_world,
    settled,
    until,
    usage_records,
)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    yield from serving_world(tmp_path_factory.mktemp("isolation"))


@pytest.fixture(scope="module")
def routes(world: World) -> list[Route]:
    return load_routes(world.http.get("/openapi.json").json())


@pytest.fixture(scope="module")
def before(world: World) -> dict[str, Any]:
    return settled(world, world.victim)


def _assert_unchanged(world: World, before: dict[str, Any], usage: list[dict[str, Any]]) -> None:
    after = settled(world, world.victim)
    changed = sorted(k for k in before if before[k] != after[k])
    assert not changed, {k: (before[k], after[k]) for k in changed}
    now = usage_records(world, world.victim)
    assert all(r in now for r in usage), "a usage record of the victim disappeared"


# Coverage ---------------------------------------------------------------------------------------


def test_every_route_of_the_openapi_document_is_covered(world: World, routes: list[Route]) -> None:
    """A new route that takes an id, or needs a body, fails here until the suite can call it."""
    kinds = {"admin", "metadata", "account", "open"}
    assert {r.kind for r in routes} <= kinds
    for route in routes:
        missing = [p for p in route.params if p not in world.victim.ids]
        assert not missing, (
            f"{route} takes {missing}: give each tenant such an object in "
            "isolation_world._furnish so the isolation suite can call it with foreign ids"
        )
        if route.body_required:
            assert route.body is not None, f"{route} needs a body: add a valid one to BODIES"
        for name in filter(names_an_object, route.queries):
            where = (route.method, route.template, name)
            assert where in ID_QUERIES, f"{route} ?{name}= names objects: search it in _searches"
        for name in filter(names_an_object, route.body_fields):
            where = (route.method, route.template, name)
            assert where in BODY_IDS, f"{route} body field {name} names objects: cover it here"
    with_ids = [r for r in routes if r.params]
    assert len(with_ids) >= 17, [str(r) for r in with_ids]  # every id route the API has today


# Foreign ids ------------------------------------------------------------------------------------


def _refusals(world: World, route: Route, expected: int, query: str = "") -> list[str]:
    """Call `route` with the victim's ids and with fakes (and, with several ids, the intruder's
    outer ids and the victim's last): each pair must answer alike once masked, `expected`."""
    v, i = world.victim, world.intruder
    key = i.auth  # the intruder's key, even on admin routes: it must not open them
    cases = [(v.ids, fakes(v))]
    if len(route.params) > 1:
        last = route.params[-1]
        cases.append(({**i.ids, last: v.ids[last]}, {**i.ids, last: fakes(v)[last]}))
    problems = []
    for real_ids, fake_ids in cases:
        real = world.call(route.method, route.path(real_ids) + query, key, route.body)
        fake = world.call(route.method, route.path(fake_ids) + query, key, route.body)
        as_if_fake = masked(real.text, {k: v.ids[k] for k in route.params})
        if (real.status_code, as_if_fake) != (fake.status_code, fake.text):
            problems.append(
                f"{route} {real_ids}: {real.status_code} {real.text!r} "
                f"but never-existed ids get {fake.status_code} {fake.text!r}"
            )
        elif real.status_code != expected:
            problems.append(f"{route}{query}: {real.status_code} {real.text!r}, not {expected}")
    return problems


def test_another_accounts_ids_are_refused_as_if_they_never_existed_on_every_route(
    world: World, routes: list[Route], before: dict[str, Any]
) -> None:
    usage = usage_records(world, world.victim)
    cases = list(sweep(routes))
    problems = [p for route, code, query in cases for p in _refusals(world, route, code, query)]
    assert not problems, "\n".join(problems)
    assert len(cases) >= 60, len(cases)
    _assert_unchanged(world, before, usage)


# Wrong principals -------------------------------------------------------------------------------


def _wrong_principal(world: World, route: Route) -> tuple[dict[str, str], int] | None:
    """The key that must not open `route` (on the victim's ids), and the status it gets."""
    if route.kind == "account":
        return ADMIN, 403  # the admin key owns nothing
    if route.kind == "admin":
        return world.victim.auth, 403  # an account key, on its own account too
    if route.kind == "metadata":
        return world.victim.auth, 401  # an API key is not an instance token
    return None


def test_the_admin_key_on_account_routes_and_an_account_key_on_admin_routes_are_refused(
    world: World, routes: list[Route], before: dict[str, Any]
) -> None:
    usage = usage_records(world, world.victim)
    problems = []
    for route in routes:
        wrong = _wrong_principal(world, route)
        if wrong is None:
            continue
        key, status = wrong
        answer = world.call(route.method, route.path(world.victim.ids), key, route.body)
        body = answer.json() if answer.headers.get("content-type") == "application/json" else {}
        if answer.status_code != status or not body.get("message") or not body.get("hint"):
            problems.append(f"{route}: {answer.status_code} {answer.text!r}, not {status}")
    assert not problems, "\n".join(problems)
    _assert_unchanged(world, before, usage)


def _bad_keys(world: World, route: Route) -> dict[str, str | None]:
    """Authorization headers that name no principal of `route`: absent, malformed, tampered,
    forged, or the other kind of credential (an instance token for an API key, and back)."""
    key, token = world.victim.key, world.victim.token
    other = f"Bearer {key}" if route.kind == "metadata" else f"Bearer {token}"
    return {
        "no header": None,
        "empty": "",
        "scheme only": "Bearer",
        "another scheme": f"Basic {key}",
        "no scheme": key,
        "one character more": f"Bearer {key}x",
        "one character less": f"Bearer {key[:-1]}",
        "last character changed": f"Bearer {key[:-1]}{'0' if key[-1] != '0' else '1'}",
        "forged": "Bearer lcg_" + "0" * 43,
        "admin key tampered": f"Bearer {ADMIN['authorization'].removeprefix('Bearer ')}0",
        "the other kind of credential": other,
    }


def test_no_key_or_a_malformed_or_forged_key_gets_401_everywhere(
    world: World, routes: list[Route], before: dict[str, Any]
) -> None:
    usage = usage_records(world, world.victim)
    problems = []
    guarded = [r for r in routes if r.kind in {"account", "admin", "metadata"}]
    for route in guarded:
        for what, value in _bad_keys(world, route).items():
            headers = {} if value is None else {"authorization": value}
            answer = world.call(route.method, route.path(world.victim.ids), headers, route.body)
            code = answer.json().get("code") if answer.status_code == 401 else None
            if code != "unauthenticated" or not answer.json().get("hint"):
                problems.append(f"{route} with {what}: {answer.status_code} {answer.text!r}")
    assert not problems, "\n".join(problems)
    _assert_unchanged(world, before, usage)


# Lists and searches -----------------------------------------------------------------------------


def _cursor_at(world: World) -> str:
    """A cursor made (as a client could) at the victim's instance: a position, never a door."""
    created = world.get(f"/v1/instances/{world.victim.ids['instance_id']}", world.victim)
    text = f"{created['created_at'] + 1}:{world.victim.ids['instance_id']}"
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def _searches(world: World) -> list[str]:
    """Queries aimed at the victim's objects: by id, kind/id, prefix, reason, time, cursor."""
    v = world.victim.ids
    return [
        f"/v1/events?object={v['instance_id']}",
        f"/v1/events?object=instance/{v['instance_id']}",
        f"/v1/events?object={v['cluster_id']}*",
        f"/v1/events?object={v['node_id']}",
        f"/v1/events?object={world.victim.account_id}",
        f"/v1/events?object={v['instance_id'][:3]}*",
        "/v1/events?object=c-*",
        "/v1/events?reason=Started&limit=1000",
        "/v1/events?newest=true&limit=1000",
        "/v1/events?since=0&before=1000000",
        "/v1/instances?all=true&limit=500",
        "/v1/instances?status=running,queued,deleted",
        f"/v1/instances?cursor={_cursor_at(world)}",
        f"/v1/instances?id_prefix={v['instance_id']}&all=true",
        f"/v1/instances?id_prefix={v['instance_id'][:3]}&all=true&limit=500",
        "/v1/instances?id_prefix=i-&all=true&limit=500",
        f"/v1/clusters?id_prefix={v['cluster_id']}",
        "/v1/clusters?id_prefix=c-",
        "/v1/billing?start=0",
        "/v1/billing/usage?limit=100000",
        "/v1/billing/balance?ledger=10000",
    ]


def _leaks(world: World, answer: httpx.Response, where: str) -> list[str]:
    seen = answer.text + " ".join(f"{k}: {v}" for k, v in answer.headers.items())
    found = [s for s in world.victim.secrets() if s and s in seen]
    return [f"{where}: {answer.status_code} mentions {found}"] if found else []


def test_lists_and_searches_never_show_or_mention_another_accounts_objects(
    world: World, routes: list[Route]
) -> None:
    intruder = world.intruder
    plain = [r.template for r in routes if r.method == "GET" and r.kind in {"account", "open"}]
    own = [r.path(intruder.ids) for r in routes if r.method == "GET" and r.params]
    problems = []
    for path in [*plain, *own, *_searches(world)]:
        headers = intruder.auth if path.startswith("/v1/") else {}
        answer = world.call("GET", path, headers)
        if answer.status_code >= 500:
            problems.append(f"GET {path}: {answer.status_code} {answer.text!r}")
        problems += _leaks(world, answer, f"GET {path}")
    assert not problems, "\n".join(problems)


def test_the_searches_find_the_victims_objects_with_its_own_key(world: World) -> None:
    """The control of the test above: the same searches do find them for their owner."""
    searches = _searches(world)
    for path in [*searches[:4], *(p for p in searches if "id_prefix=" in p)]:
        answer = world.call("GET", path, world.victim.auth)
        assert answer.status_code == 200 and answer.json(), (path, answer.text)


# Instance tokens --------------------------------------------------------------------------------


def _forged_tokens(world: World) -> dict[str, str]:
    """Tokens for the victim's instance that its workload was never given."""
    v, i = world.victim, world.intruder
    last = v.token[-1]
    kid, _, run, mac = i.token.split(".")  # KID.INSTANCE.ALLOCATION.MAC, ids in base64url
    victim_b64 = base64.urlsafe_b64encode(v.ids["instance_id"].encode()).decode().rstrip("=")
    victim_run = v.token.split(".")[2]
    return {
        "the intruder's token, its id replaced": f"{kid}.{victim_b64}.{run}.{mac}",
        "the intruder's MAC on the victim's run": f"{kid}.{victim_b64}.{victim_run}.{mac}",
        "the victim's id, a made-up MAC": f"{kid}.{victim_b64}.{victim_run}.{'0' * 32}",
        "the victim's id in the old form, a made-up MAC": f"{v.ids['instance_id']}.{'0' * 32}",
        "the victim's id alone": v.ids["instance_id"],
        "the victim's token, last character changed": v.token[:-1] + ("0" if last != "0" else "1"),
        "the victim's token, truncated": v.token[:-1],
        "the victim's token, extended": v.token + "0",
        "the victim's API key": v.key,
    }


def test_a_forged_or_foreign_instance_token_opens_no_metadata(
    world: World, routes: list[Route], before: dict[str, Any]
) -> None:
    usage = usage_records(world, world.victim)
    metadata = [r for r in routes if r.kind == "metadata"]
    assert len(metadata) >= 4, [str(r) for r in metadata]
    problems = []
    for route in metadata:
        for what, token in _forged_tokens(world).items():
            answer = world.call(
                route.method, route.path({}), {"authorization": f"Bearer {token}"}, route.body
            )
            if answer.status_code != 401:
                problems.append(f"{route} with {what}: {answer.status_code} {answer.text!r}")
    assert not problems, "\n".join(problems)
    _assert_unchanged(world, before, usage)


def test_an_instance_token_reports_for_its_own_instance_only(
    world: World, before: dict[str, Any]
) -> None:
    usage = usage_records(world, world.victim)
    i = world.intruder
    own = {"authorization": f"Bearer {i.token}"}
    reported = world.call("POST", "/v1/metadata/checkpoint", own, {"step": 4242})
    assert reported.status_code == 204, reported.text
    mine = world.get(f"/v1/instances/{i.ids['instance_id']}", i)
    assert mine["last_checkpoint_step"] == 4242
    for path in ("/v1/metadata/interruption", "/v1/metadata/fleet"):
        assert not _leaks(world, world.call("GET", path, own), path)
    _assert_unchanged(world, before, usage)


def test_a_long_poll_never_wakes_with_another_accounts_event(world: World) -> None:
    """The intruder waits on its events (and on the victim's instance by id) while the victim's
    workload reports a checkpoint: the victim's long-poll gets the event, the intruder's none.
    (This changes the victim's world: it runs after the tests that compare it.)"""
    v, i = world.victim, world.intruder
    latest = {t.name: world.get("/v1/events?newest=true&limit=1", t) for t in (v, i)}
    after = {name: found[-1]["seq"] if found else 0 for name, found in latest.items()}
    polls = {
        "intruder": (i, f"/v1/events?after={after[i.name]}&wait_s=4"),
        "intruder on the victim's id": (
            i,
            f"/v1/events?after=0&object={v.ids['instance_id']}&wait_s=4",
        ),
        "victim": (v, f"/v1/events?after={after[v.name]}&reason=CheckpointReported&wait_s=30"),
    }
    with ThreadPoolExecutor(len(polls)) as pool:
        waiting = {n: pool.submit(world.call, "GET", p, t.auth) for n, (t, p) in polls.items()}
        token = {"authorization": f"Bearer {v.token}"}
        reported = world.call("POST", "/v1/metadata/checkpoint", token, {"step": 77})
        assert reported.status_code == 204, reported.text
        answers = {name: future.result() for name, future in waiting.items()}
    assert [e["reason"] for e in answers["victim"].json()] == ["CheckpointReported"]
    for name in ("intruder", "intruder on the victim's id"):
        assert answers[name].status_code == 200, answers[name].text
        assert not _leaks(world, answers[name], name)
    assert answers["intruder on the victim's id"].json() == []


def test_a_volume_named_like_another_accounts_is_ones_own_never_theirs(world: World) -> None:
    """The victim's volume name is no volume of the intruder's (404, and a launch cannot attach
    it); once the intruder makes its own of that name, a delete names only its own users."""
    before = settled(world, world.victim)  # after the checkpoint the long-poll test reported
    usage = usage_records(world, world.victim)
    v, i = world.victim, world.intruder
    name = v.ids["volume_name"]
    for method, body in (("GET", None), ("PATCH", {"size_gb": 2}), ("DELETE", None)):
        answer = world.call(method, f"/v1/volumes/{name}", i.auth, body)
        assert (answer.status_code, answer.json()["message"]) == (404, f"no volume {name}")
    attach = {"gpu": GPU, "command": ["true"], "volume": name}
    answer = world.call("POST", "/v1/instances", i.auth, attach)
    assert answer.status_code == 422 and "there is no volume" in answer.json()["message"]
    made = world.call("POST", "/v1/instances", i.auth, {**attach, "volume": f"{name}:1GB"})
    assert made.status_code == 201, made.text
    ran = f"/v1/instances/{made.json()['id']}"
    until("its run to end", lambda: world.get(ran, i)["status"] == "succeeded")  # GPUs free
    refused = world.call("DELETE", f"/v1/volumes/{name}", i.auth)  # it still names it
    assert refused.status_code == 409
    assert refused.json()["details"] == {"instances": [made.json()["id"]], "more": False}
    assert v.ids["instance_id"] not in refused.text
    _assert_unchanged(world, before, usage)


def _readable(world: World, routes: list[Route], t: Tenant, ids: dict[str, str]) -> dict[str, str]:
    """Everything `t` can read about its world: every GET route of an account on its own
    objects (`ids`), every event, the webhook deliveries its endpoint received, its runs' logs."""
    seen = {}
    for route in routes:
        if route.method == "GET" and route.kind == "account":
            path = route.path(ids)
            if route.template.endswith("/logs"):
                path += "?tail_bytes=100000"
            if "?" not in path and route.template == "/v1/events":
                path += "?limit=1000"
            seen[f"GET {path}"] = world.call("GET", path, t.auth).text
    seen["received webhooks"] = json.dumps([r.payload for r in t.receiver.got])
    return seen


def _reclaimed_world(world: World) -> tuple[dict[str, str], dict[str, str]]:
    """The victim runs a preemptible cluster node and an interruptible instance that fill the
    host; the intruder's on-demand launch (with a volume of its own name) takes both. Waits for
    both `Preempted` events and the webhooks; returns the ids each side then holds."""
    v, i = world.victim, world.intruder
    cluster = v.ids["cluster_id"]
    grown = world.call("PATCH", f"/v1/clusters/{cluster}", v.auth, {"desired_preemptible_gpus": 1})
    assert grown.status_code == 200, grown.text

    def preemptible_node() -> str | None:
        nodes = world.get(f"/v1/clusters/{cluster}", v)["nodes"]
        ready = (n for n in nodes if n["status"] == "ready" and n["id"] != v.ids["node_id"])
        return next((n["id"] for n in ready), None)

    node = until("the victim's preemptible node", preemptible_node)
    free = world.get("/v1/fleet", v)["pools"][0]["free_gpus"]
    body = {"gpu": GPU, "gpus": free, "command": ["sleep", "600"], "grace_period_s": 0}
    run = world.call("POST", "/v1/instances", v.auth, body).json()["id"]
    until(f"{run} running", lambda: world.get(f"/v1/instances/{run}", v)["status"] == "running")
    volume = f"odvol{i.name.rsplit('-', 1)[-1]}"
    ask = {"gpu": GPU, "type": "on-demand", "gpus": free + 1, "command": ["sleep", "600"]}
    od = world.call("POST", "/v1/instances", i.auth, {**ask, "volume": f"{volume}:1GB"})
    assert od.status_code == 201, od.text
    for victim in (run, node):
        preempted = f"/v1/events?object={victim}&reason=Preempted"
        until(f"the Preempted event of {victim}", lambda p=preempted: world.get(p, v))
    until(
        "its webhooks",
        lambda: sum("Preempted" in r.payload["type"] for r in v.receiver.got) >= 2,
    )
    victim_ids = {**v.ids, "instance_id": run, "node_id": node}
    intruder_ids = {**i.ids, "instance_id": od.json()["id"], "volume": volume}
    return victim_ids, intruder_ids


def test_a_reclaim_never_names_one_accounts_objects_to_the_other(
    world: World, routes: list[Route]
) -> None:
    """The intruder's on-demand launch reclaims the victim's interruptible instance and
    preemptible node. Nothing the victim can read (every route's answer, events, webhooks, logs)
    names any object of the intruder's — not the on-demand instance, its account, volume,
    cluster or nodes — and nothing the intruder can read names the victim's. The victim's
    `Preempted` events say what happens to it; the policy's reasoning is in their data.
    (On the main of issue 19 the message told the victim "preempted for on-demand work of
    another account (chosen by …)".) (This changes the victim's world: it runs after the tests
    that compare it.)"""
    v, i = world.victim, world.intruder
    victim_ids, intruder_ids = _reclaimed_world(world)
    problems = []
    for reader, ids, other, secrets in (
        (v, victim_ids, "intruder", [*intruder_ids.values(), *i.secrets()]),
        (i, intruder_ids, "victim", [*victim_ids.values(), *v.secrets()]),
    ):
        readable = _readable(world, routes, reader, ids)
        assert len(readable) >= 15, sorted(readable)  # every account GET route, and more
        # A volume name is the account's own: the intruder made one named like the victim's
        # (the volume test above), and reading its own is no leak.
        own = [vol["name"] for vol in world.get("/v1/volumes", reader)]
        for where, text in readable.items():
            for name in own:
                text = text.replace(name, "")
            found = sorted({s for s in secrets if s and s in text})
            if found:
                problems.append(f"{reader.name} reads {other}'s {found} in {where}")
    assert not problems, "\n".join(problems)
    for victim in (victim_ids["instance_id"], victim_ids["node_id"]):
        (event,) = world.get(f"/v1/events?object={victim}&reason=Preempted", v)
        assert event["message"].startswith("reclaimed for on-demand work: "), event["message"]
        assert "chosen by" not in event["message"] and "GPU-s" not in event["message"]
        assert event["data"]["policy"]["name"] and event["data"]["reason"]
        assert event["data"]["for_subject"] is None
    for who, instance in ((v, victim_ids["instance_id"]), (i, intruder_ids["instance_id"])):
        world.call("POST", f"/v1/instances/{instance}/stop", who.auth)


# The control: last, it stops and deletes the intruder's objects ----------------------------------


def test_the_same_calls_on_ones_own_objects_get_through(world: World, routes: list[Route]) -> None:
    """Each id route, on the intruder's own objects with the key that owns them, reaches its
    handler: the bodies above are valid, and the refusals were the ownership checks."""
    with_ids = sorted(
        (r for r in routes if r.params), key=lambda r: (ORDER.get(r.method, 2), r.template)
    )
    problems = []
    for route in with_ids:
        key = key_of(route, world.intruder)
        own = world.call(route.method, route.path(world.intruder.ids), key, route.body)
        if own.status_code not in REACHED:
            problems.append(f"{route}: {own.status_code} {own.text!r}")
    assert not problems, "\n".join(problems)

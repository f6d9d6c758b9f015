"""Webhooks end to end: a real server posts to a real receiver that verifies every signature
with the `standardwebhooks` library; errors, outages, disabling, replay."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from api_server import ADMIN_KEY, FLEET, Api, free_port, kill_workloads
from typer.testing import CliRunner
from webhook_receiver import Receiver

from lowcostgpu.adapters.webhooks import HttpWebhookSender
from lowcostgpu.api.server import start
from lowcostgpu.app.webhooks import WebhookPolicy
from lowcostgpu.bootstrap.serve import ServeOptions
from lowcostgpu.cli.main import app
from lowcostgpu.client.api import Client
from lowcostgpu.domain.errors import InvalidRequest

# disable_after_s: longer than the outage of the in-order test takes on a loaded machine;
# timeout_s: longer than the deadlines below, so a hanging endpoint still hangs while they run.
POLICY = WebhookPolicy(
    first_backoff_s=1, max_backoff_s=1, disable_after_s=10, poll_s=0.1, timeout_s=90
)
PROMPT_S = 30.0  # "promptly": far under a hanging send (90 s), far over an idle delivery (0.2 s)


@pytest.fixture(scope="module")
def hooks_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    tmp = tmp_path_factory.mktemp("hooks")
    (tmp / "fleet.toml").write_text(FLEET)
    options = ServeOptions(
        data_dir=tmp / "data",
        fleet=tmp / "fleet.toml",
        port=free_port(),
        admin_key=ADMIN_KEY,
        allow_private_webhooks=True,
        webhook_policy=POLICY,
    )
    running = start(options)
    yield Api(running, running.url, options.data_dir)
    kill_workloads(running)
    running.stop()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver(free_port()).start()
    yield r
    r.stop()


def until(what: str, check: Callable[[], bool], timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _launch_and_stop(client: Client, n: int) -> list[str]:
    ids = [
        client.launch(gpu="a100-sxm4", type="interruptible", command=["sleep", "3600"])["id"]
        for _ in range(n)
    ]
    for i in ids:
        client.stop(i)
    return ids


def _seqs(client: Client) -> list[int]:
    return [e["seq"] or 0 for e in client.events(0, 1000) if e["object_kind"] == "instance"]


def _outage_tries(client: Client, hook_id: str) -> bool:
    tries = [a for d in client.deliveries(hook_id) for a in d["tries"]]
    return any(a["status_code"] is None and a["error"] for a in tries)


def _all_delivered(client: Client, hook_id: str) -> bool:
    return all(d["status"] == "delivered" for d in client.deliveries(hook_id))


def test_every_event_arrives_in_order_through_errors_and_an_outage(
    hooks_api: Api, receiver: Receiver
) -> None:
    _, client = hooks_api.account("through-errors")
    hook = client.create_webhook(receiver.url)
    receiver.secret, receiver.failing = hook["secret"], 2
    _launch_and_stop(client, 2)
    until("a failed attempt", lambda: receiver.failing == 0)
    receiver.stop()  # down for a while (shorter than disable_after_s)
    _launch_and_stop(client, 1)
    until("a try that met the outage", lambda: _outage_tries(client, hook["id"]))
    receiver.start()
    until(
        "all instances stopped", lambda: all(i["status"] == "stopped" for i in client.instances())
    )
    until("every event", lambda: set(receiver.seqs()) >= set(_seqs(client)))
    until("every delivery recorded", lambda: _all_delivered(client, hook["id"]))
    first_seen = list(dict.fromkeys(receiver.seqs()))
    assert first_seen == sorted(first_seen)  # in order: n+1 never before n
    ids_of: dict[int, set[str]] = {}
    for r in receiver.got:
        ids_of.setdefault(r.payload["data"]["seq"], set()).add(r.webhook_id)
    assert all(len(ids) == 1 for ids in ids_of.values())  # a duplicate has the same webhook-id
    assert receiver.refused == []
    deliveries = client.deliveries(hook["id"])
    failed = [a for d in deliveries for a in d["tries"] if a["status_code"] != 204]
    assert any(a["status_code"] == 500 and len(a["response_excerpt"]) == 1024 for a in failed)
    assert any(a["status_code"] is None and a["error"] for a in failed)  # the outage
    assert all(d["status"] == "delivered" for d in deliveries)


def test_the_secret_is_shown_once_and_a_test_message_is_signed(
    hooks_api: Api, receiver: Receiver
) -> None:
    _, client = hooks_api.account("secret-once")
    hook = client.create_webhook(receiver.url, ["Preempted"])
    receiver.secret = hook["secret"]
    assert hook["secret"].startswith("whsec_")
    listed = str(client.webhooks()) + str(client.deliveries(hook["id"]))
    assert hook["secret"] not in listed and "secret" not in listed
    client.webhook_action(hook["id"], "test")
    until("the test message", lambda: len(receiver.got) == 1)
    assert receiver.got[0].payload["type"] == "webhook.test"
    _launch_and_stop(client, 1)  # Queued, Stopped…: not Preempted, so not sent
    time.sleep(1)
    assert len(receiver.got) == 1
    client.webhook_action(hook["id"], "rm")
    assert client.webhooks() == []


def test_a_failing_endpoint_is_disabled_and_enabling_it_delivers_the_backlog(
    hooks_api: Api, receiver: Receiver
) -> None:
    _, client = hooks_api.account("disabled")
    hook = client.create_webhook(receiver.url)
    receiver.secret, receiver.failing = hook["secret"], 1000
    _launch_and_stop(client, 1)
    until("the endpoint to be disabled", lambda: client.webhooks()[0]["status"] == "disabled")
    assert "HTTP 500" in client.webhooks()[0]["disabled_reason"]
    assert [e["reason"] for e in client.events(0, 1000, object=hook["id"])] == ["WebhookDisabled"]
    receiver.failing = 0
    client.webhook_action(hook["id"], "enable")
    until("the backlog", lambda: set(receiver.seqs()) >= set(_seqs(client)))
    assert client.webhooks()[0]["status"] == "enabled"


def test_a_delivery_can_be_replayed_with_the_same_webhook_id(
    hooks_api: Api, receiver: Receiver
) -> None:
    _, client = hooks_api.account("replay")
    hook = client.create_webhook(receiver.url, ["Queued"])
    receiver.secret = hook["secret"]
    _launch_and_stop(client, 1)
    # The receiver sees a try before the sender records it: wait for the record, not the arrival.
    until("the delivery", lambda: len(client.deliveries(hook["id"])[0]["tries"]) == 1)
    delivery = client.deliveries(hook["id"])[0]
    client.replay(hook["id"], delivery["id"])
    until("the replay", lambda: len(client.deliveries(hook["id"])[0]["tries"]) == 2)
    assert len(receiver.got) == 2
    assert receiver.got[0].webhook_id == receiver.got[1].webhook_id == delivery["message_id"]


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9/hook",
        "http://localhost/hook",
        "http://10.1.2.3/hook",
        "http://169.254.169.254/latest",
        "http://[::1]/hook",
        "ftp://example.com/hook",
    ],
)
def test_a_private_or_odd_url_is_refused_without_the_flag(url: str) -> None:
    with pytest.raises(InvalidRequest, match=r"private|not an http"):
        HttpWebhookSender().check_url(url)
    if url.startswith("http:"):
        HttpWebhookSender(allow_private=True).check_url(url)


def test_the_api_refuses_a_private_url_when_not_allowed(tmp_path: Path) -> None:
    (tmp_path / "fleet.toml").write_text(FLEET)
    options = ServeOptions(
        data_dir=tmp_path / "data", fleet=tmp_path / "fleet.toml", port=free_port(),
        admin_key=ADMIN_KEY,
    )  # fmt: skip
    running = start(options)
    try:
        _, client = Api(running, running.url, options.data_dir).account("strict")
        with pytest.raises(InvalidRequest, match="private/loopback"):
            client.create_webhook("http://127.0.0.1:8/hook")
    finally:
        running.stop()


def _serve(data_dir: Path, fleet: Path, port: int) -> subprocess.Popen[bytes]:
    argv = [str(Path(sys.executable).parent / "lowcostgpu"), "serve", "--data-dir", str(data_dir)]
    argv += ["--fleet", str(fleet), "--port", str(port), "--admin-key", ADMIN_KEY]
    argv += ["--allow-private-webhooks", "--webhook-backoff-s", "1"]
    server = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"

    def leading() -> bool:
        try:
            return bool(httpx.get(f"{url}/healthz", timeout=1).json().get("leading"))
        except (httpx.HTTPError, ValueError):
            return False

    until("the server to lead", leading)
    return server


def test_a_delivery_in_flight_when_the_server_is_killed_completes_after_restart(
    tmp_path: Path, receiver: Receiver
) -> None:
    (tmp_path / "fleet.toml").write_text(FLEET)
    port = free_port()
    server = _serve(tmp_path / "data", tmp_path / "fleet.toml", port)
    try:
        url = f"http://127.0.0.1:{port}"
        with Client(url, ADMIN_KEY) as admin:
            key = admin.create_account("killed")["api_key"]
        client = Client(url, key)
        hook = client.create_webhook(receiver.url)
        receiver.secret, receiver.hold_s = hook["secret"], 2.0
        client.webhook_action(hook["id"], "test")
        until("the delivery to be in flight", receiver.arrived.is_set)
        server.send_signal(signal.SIGKILL)
        server.wait()
        until("the held request to end", lambda: len(receiver.got) == 1)
        server = _serve(tmp_path / "data", tmp_path / "fleet.toml", port)
        until("the delivery after the restart", lambda: len(receiver.got) == 2)
        assert receiver.got[0].webhook_id == receiver.got[1].webhook_id
        until(
            "it to be recorded", lambda: client.deliveries(hook["id"])[0]["status"] == "delivered"
        )
    finally:
        server.kill()
        server.wait()


def test_the_cli_adds_lists_tests_replays_and_removes_webhooks(
    hooks_api: Api, receiver: Receiver, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, client = hooks_api.account("cli-hooks")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.setenv("LOWCOSTGPU_URL", hooks_api.url)
    monkeypatch.setenv("LOWCOSTGPU_API_KEY", client._http.headers["authorization"][7:])
    cli = CliRunner()

    def run(*args: str) -> str:
        result = cli.invoke(app, ["webhooks", *args])
        assert result.exit_code == 0 and "Traceback" not in result.output, result.output
        return result.output

    added = json.loads(run("add", receiver.url, "--reason", "Queued", "--json"))
    receiver.secret = added["secret"]
    assert added["id"] in run("ls") and added["secret"] not in run("ls")
    assert "queued test message" in run("test", added["id"])
    until("the test message", lambda: len(receiver.got) == 1)
    until("it to be recorded", lambda: "delivered" in run("deliveries", added["id"]))
    delivery = json.loads(run("deliveries", added["id"], "--json"))[0]
    assert "replaying" in run("replay", added["id"], delivery["id"])
    until("the replay", lambda: len(receiver.got) == 2)
    assert "deleted" in run("rm", added["id"])
    assert run("ls") == ""
    bad = cli.invoke(app, ["webhooks", "add", "not-a-url"])
    assert bad.exit_code == 2 and "not an http(s) URL" in bad.output


def test_a_preempted_webhook_arrives_before_the_grace_deadline(
    hooks_api: Api, receiver: Receiver
) -> None:
    _, client = hooks_api.account("preempted")
    hook = client.create_webhook(receiver.url, ["Preempted"])
    receiver.secret = hook["secret"]
    hold = ["sleep", "600"]
    victim = client.launch(gpu="a100-sxm4", type="interruptible", gpus=2, command=hold)["id"]
    until("the victim to run", lambda: client.instance(victim)["status"] == "running")
    asked_at = time.time()
    reclaimer = client.launch(gpu="a100-sxm4", type="on-demand", gpus=2, command=hold)["id"]
    until("the Preempted webhook", lambda: len(receiver.got) == 1)
    got = receiver.got[0]
    assert got.payload["type"] == "instance.Preempted"
    assert got.payload["data"]["object_id"] == victim
    data = got.payload["data"]["data"]
    assert data["for_subject"] == reclaimer and got.at < data["deadline"]
    print(
        f"notice-to-delivery latency: {got.at - asked_at:.3f} s (grace {data['grace_period_s']} s)"
    )
    for i in (reclaimer, victim):
        client.stop(i)


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("https://" + "a" * 5000 + ".com/hook", "characters long"),  # the issue's: was a 201
        ("https://example.com/" + "p" * 2100, "at most 2048"),
        ("http://127.0.0.1:0/hook", "port 0"),
        ("http://127.0.0.1:70000/hook", "port 70000"),
        ("https://me:pw@example.com/hook", "user name or password"),
        ("https://exa mple.com/hook", "whitespace"),
        ("https://-bad-.example/hook", "not a valid host name"),
    ],
    ids=["5000-char-host", "2100-char-url", "port-0", "port-70000", "userinfo", "space", "label"],
)
def test_a_webhook_url_that_cannot_be_sent_to_is_refused_at_creation(
    hooks_api: Api, url: str, words: str
) -> None:
    _, client = hooks_api.account("bad-urls")
    answer = client._http.post("/v1/webhooks", json={"url": url})
    assert answer.status_code == 422, answer.text
    body = answer.json()
    assert words in body["message"] and body.get("hint")
    assert len(answer.text) < 1000  # the URL is not echoed back whole
    assert client.webhooks() == []


class Hanging:
    """An endpoint that takes every request and answers none until released."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.arrived: list[str] = []
        hanging = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length", 0)))
                hanging.arrived.append(self.path)
                hanging.release.wait(120)
                self.send_response(204)
                self.end_headers()

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}{path}"

    def stop(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def hanging() -> Iterator[Hanging]:
    h = Hanging()
    yield h
    h.stop()


def test_hanging_endpoints_of_one_tenant_do_not_delay_another_tenants_delivery(
    hooks_api: Api, receiver: Receiver, hanging: Hanging
) -> None:
    _, slow = hooks_api.account("slow-tenant")
    for i in range(3):  # the three slow endpoints (they delayed a Preempted by 32.7 s)
        hook = slow.create_webhook(hanging.url(f"/slow-{i}"))
        slow.webhook_action(hook["id"], "test")
    until("the three sends to hang", lambda: len(hanging.arrived) == 3)
    _, prompt = hooks_api.account("prompt-tenant")
    hook = prompt.create_webhook(receiver.url)
    receiver.secret = hook["secret"]
    asked_at = time.time()
    prompt.webhook_action(hook["id"], "test")
    until("the other tenant's delivery", lambda: len(receiver.got) == 1, timeout_s=PROMPT_S)
    assert len(hanging.arrived) == 3 and not hanging.release.is_set()  # still hanging
    print(
        f"delivery to another tenant while 3 endpoints hang: {receiver.got[0].at - asked_at:.3f} s"
    )


class DiesOnce:
    """The store as the webhook dispatcher sees it: its first read of the endpoints raises, as a
    bug or a lost database connection would, in the dispatcher's thread only."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.died = False

    def webhook_endpoints(self, account_id: str | None = None) -> Any:
        if not self.died and threading.current_thread().name == "webhooks":
            self.died = True
            raise RuntimeError("injected: the dispatcher dies")
        return self.inner.webhook_endpoints(account_id)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _restarts(url: str, loop: str) -> float:
    text = httpx.get(f"{url}/metrics").text
    found = re.search(rf'^lowcostgpu_background_restarts_total{{loop="{loop}"}} (\S+)$', text, re.M)
    assert found, text
    return float(found.group(1))


def test_a_webhook_dispatcher_that_dies_is_restarted_counted_and_delivers_again(
    hooks_api: Api, receiver: Receiver
) -> None:
    hooks = hooks_api.running.webhooks.hooks
    before = _restarts(hooks_api.url, "webhooks")
    store, hooks.store = hooks.store, DiesOnce(hooks.store)
    try:
        until("the dispatcher to die and be restarted", lambda: hooks.store.died)
        until("the restart to be counted", lambda: _restarts(hooks_api.url, "webhooks") > before)
        assert _restarts(hooks_api.url, "webhooks") == before + 1
        assert _restarts(hooks_api.url, "reconcile") == 0
        _, client = hooks_api.account("after-restart")
        hook = client.create_webhook(receiver.url)
        receiver.secret = hook["secret"]
        client.webhook_action(hook["id"], "test")
        until("a delivery from the restarted dispatcher", lambda: len(receiver.got) == 1)
    finally:
        hooks.store = store

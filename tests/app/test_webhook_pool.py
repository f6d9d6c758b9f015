"""The served webhook worker: endpoints in parallel, one send in flight per endpoint, in order,
and no tenant's hanging endpoints can hold the deliveries of another.

The pool runs for real (its dispatcher and threads) against SQLite and the memory store; the
sender is a fake whose sends to `hang` URLs block until the test releases them, so "slow" is
exact rather than timed.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from lowcostgpu.adapters.clock import FixedClock
from lowcostgpu.adapters.store import MemoryStore, SqlStore
from lowcostgpu.app.webhook_pool import WebhookPool
from lowcostgpu.app.webhooks import WebhookPolicy, Webhooks
from lowcostgpu.domain.events import EventType, Reason
from lowcostgpu.ports.store import EventRecord, Store
from lowcostgpu.ports.store_records import Commit
from lowcostgpu.ports.webhooks import SendResult

POLICY = WebhookPolicy(poll_s=0.05, workers=4, per_account_workers=2)
DEADLINE_S = 20.0


class Sender:
    """Sends to `hang` URLs block until `release` is set; records order and concurrency."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.sent: list[tuple[str, str]] = []  # (url, message id), in the order sends began
        self.in_flight: dict[str, int] = {}  # per URL
        self.most_in_flight: dict[str, int] = {}  # per URL: the most at once
        self.hanging = 0
        self.most_hanging = 0
        self._lock = threading.Lock()

    def check_url(self, url: str) -> None:
        pass

    def send(self, url: str, secret: str, message_id: str, timestamp: int, body: str) -> SendResult:
        hang = "hang" in url
        with self._lock:
            self.sent.append((url, message_id))
            self.in_flight[url] = n = self.in_flight.get(url, 0) + 1
            self.most_in_flight[url] = max(n, self.most_in_flight.get(url, 0))
            self.hanging += hang
            self.most_hanging = max(self.most_hanging, self.hanging)
        if hang:
            self.release.wait()
        with self._lock:
            self.in_flight[url] -= 1
            self.hanging -= hang
        return SendResult(204, 1)


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    s: Store = (
        MemoryStore()
        if request.param == "memory"
        else SqlStore.open(f"sqlite:///{tmp_path / 'store.db'}")
    )
    yield s
    s.close()


@pytest.fixture
def running(store: Store) -> Iterator[tuple[Webhooks, Sender, WebhookPool]]:
    sender = Sender()
    hooks = Webhooks(store, sender, FixedClock(1_000), POLICY, random.Random(0))
    pool = WebhookPool(hooks)
    stopping = threading.Event()
    thread = threading.Thread(target=pool.run, args=(stopping, lambda: True), daemon=True)
    thread.start()
    yield hooks, sender, pool
    sender.release.set()
    stopping.set()
    pool.stop()
    thread.join(5)
    pool.join(5)


def _event(store: Store, account: str, key: str) -> None:
    e = EventRecord(key, 900, account, "instance", "i-1", EventType.NORMAL, Reason.QUEUED, "m")
    store.commit(Commit(events=[e]))


def until(what: str, check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def _delivered(hooks: Webhooks, account: str, endpoint_id: str) -> bool:
    return all(d.status == "delivered" for d in hooks.deliveries(account, endpoint_id))


@pytest.mark.parametrize("hanging_endpoints", [1, 3, 8])
def test_hanging_endpoints_of_one_account_do_not_delay_another_accounts_delivery(
    running: tuple[Webhooks, Sender, WebhookPool], hanging_endpoints: int
) -> None:
    hooks, sender, _ = running
    slow = [
        hooks.create("acct-slow", f"https://hang-{i}.example/hook", ())
        for i in range(hanging_endpoints)
    ]
    _event(hooks.store, "acct-slow", "slow-1")
    until("the slow account's sends to hang", lambda: sender.hanging >= min(2, hanging_endpoints))
    prompt = hooks.create("acct-prompt", "https://prompt.example/hook", ())
    _event(hooks.store, "acct-prompt", "prompt-1")
    until("the other account's delivery", lambda: _delivered(hooks, "acct-prompt", prompt.id))
    assert sender.hanging == min(hanging_endpoints, POLICY.per_account_workers)  # still hanging
    assert sender.most_hanging <= POLICY.per_account_workers  # one account never takes the pool
    sender.release.set()
    until(
        "the slow account's backlog",
        lambda: all(_delivered(hooks, "acct-slow", e.id) for e in slow),
    )


def test_one_endpoint_gets_one_send_at_a_time_in_order(
    running: tuple[Webhooks, Sender, WebhookPool],
) -> None:
    hooks, sender, _ = running
    endpoint = hooks.create("acct-1", "https://one.example/hook", ())
    keys = [f"e{i}" for i in range(8)]
    for key in keys:
        _event(hooks.store, "acct-1", key)
    until("every delivery", lambda: _delivered(hooks, "acct-1", endpoint.id))
    assert [m for url, m in sender.sent if url == endpoint.url] == keys
    assert sender.most_in_flight[endpoint.url] == 1


class FailingOnce:
    """A store that refuses, once, to write the outcome of a send to one endpoint (a database
    hiccup in the middle of a worker's run)."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.failing: set[str] = set()

    def commit(self, commit: Commit) -> None:
        hit = {d.endpoint_id for d in commit.webhooks.deliveries} & self.failing
        if hit:
            self.failing -= hit
            raise ConnectionError("the database went away")
        self.inner.commit(commit)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_a_run_that_raises_holds_only_its_endpoint_and_it_is_retried(store: Store) -> None:
    flaky = FailingOnce(store)
    sender = Sender()
    hooks = Webhooks(flaky, sender, FixedClock(1_000), POLICY, random.Random(0))  # type: ignore[arg-type]
    broken = hooks.create("acct-1", "https://broken.example/hook", ())
    fine = hooks.create("acct-2", "https://fine.example/hook", ())
    _event(store, "acct-1", "a")
    _event(store, "acct-2", "b")
    flaky.failing = {broken.id}
    pool = WebhookPool(hooks)
    pool.dispatch()  # both start; the broken one's run raises when it records its send
    until("the fine endpoint's delivery", lambda: _delivered(hooks, "acct-2", fine.id))
    assert not _delivered(hooks, "acct-1", broken.id)

    def retried() -> bool:
        pool.dispatch()  # what the dispatcher does each poll
        return _delivered(hooks, "acct-1", broken.id)

    until("the broken endpoint, retried after its backoff", retried)
    assert [m for url, m in sender.sent if url == broken.url] == ["a", "a"]  # at least once
    pool.join(5)

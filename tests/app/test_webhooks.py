"""The webhook worker against a replay that races it: the replay is never lost, order is kept.

The races are made deterministic: a fake sender runs the user's action while "the request is in
flight" (inside `send`), and a store wrapper runs the worker between the replay's read and its
write. Run against the memory fake and SQLite, which must agree.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from lowcostgpu.adapters.clock import FixedClock
from lowcostgpu.adapters.store import MemoryStore, SqlStore
from lowcostgpu.app.webhooks import Webhooks
from lowcostgpu.domain.events import EventType, Reason
from lowcostgpu.ports.store import EventRecord, Store
from lowcostgpu.ports.store_records import Commit
from lowcostgpu.ports.webhooks import SendResult, WebhookDelivery

ACCOUNT = "acct-1"


class Sender:
    """Records what it sent (by webhook-id); `during[i]` runs while the i-th send is in flight."""

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.status: list[int] = []  # the answer of each send, in turn; then 200
        self.during: dict[int, Callable[[], object]] = {}

    def check_url(self, url: str) -> None:
        pass

    def send(self, url: str, secret: str, message_id: str, timestamp: int, body: str) -> SendResult:
        i = len(self.sent)
        self.sent.append(message_id)
        if i in self.during:
            self.during[i]()
        status = self.status[i] if i < len(self.status) else 200
        return SendResult(status, 3)


class BeforeNextCommit:
    """A store that runs `hook` once, just before the next commit: another writer landing
    between a caller's read and its write."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.hook: Callable[[], object] | None = None

    def commit(self, commit: Commit) -> None:
        hook, self.hook = self.hook, None
        if hook is not None:
            hook()
        self.inner.commit(commit)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    s: Store = (
        MemoryStore()
        if request.param == "memory"
        else SqlStore.open(f"sqlite:///{tmp_path / 'store.db'}")
    )
    yield s
    s.close()


def setup(store: Store, *keys: str) -> tuple[Webhooks, Sender, str]:
    sender = Sender()
    hooks = Webhooks(store, sender, FixedClock(1_000), rng=random.Random(0))
    endpoint = hooks.create(ACCOUNT, "https://example.com/hook", ())
    for key in keys:
        event = EventRecord(
            key, 900, ACCOUNT, "instance", "i-1", EventType.NORMAL, Reason.QUEUED, "m"
        )
        store.commit(Commit(events=[event]))
    return hooks, sender, endpoint.id


def drain(hooks: Webhooks) -> None:
    """Run the worker until nothing is due (the clock stands still: no backoff expires)."""
    for _ in range(10):
        if hooks.deliver_due() == 0:
            return
    raise AssertionError("the worker kept finding due deliveries")


def only(hooks: Webhooks, endpoint_id: str) -> WebhookDelivery:
    [d] = hooks.deliveries(ACCOUNT, endpoint_id)
    return d


def test_a_replay_landing_while_the_delivery_is_in_flight_is_sent_again(store: Store) -> None:
    hooks, sender, ep = setup(store, "e1")
    d = only(hooks, ep)
    sender.during[0] = lambda: hooks.replay(ACCOUNT, ep, d.id)  # answered 200 afterwards
    assert hooks.deliver_due(limit=1) == 1
    after = only(hooks, ep)
    assert after.status == "pending"  # the replay survived the attempt's outcome
    assert after.attempts == 1 and after.next_attempt_at == 1_000
    drain(hooks)
    assert sender.sent == ["e1", "e1"]  # the replay went out: once more, never zero times
    done = only(hooks, ep)
    assert (done.status, done.attempts) == ("delivered", 2)
    assert [(a.n, a.status_code) for a in store.webhook_attempts(d.id)] == [(1, 200), (2, 200)]


def test_a_replay_during_a_failing_attempt_goes_out_now_not_after_the_backoff(
    store: Store,
) -> None:
    hooks, sender, ep = setup(store, "e1")
    d = only(hooks, ep)
    sender.status = [500]
    sender.during[0] = lambda: hooks.replay(ACCOUNT, ep, d.id)
    drain(hooks)
    assert sender.sent == ["e1", "e1"]
    assert only(hooks, ep).status == "delivered"
    assert [a.status_code for a in store.webhook_attempts(d.id)] == [500, 200]


def test_the_order_per_endpoint_holds_when_a_replay_lands_in_flight(store: Store) -> None:
    hooks, sender, ep = setup(store, "e1", "e2", "e3")
    first = hooks.deliveries(ACCOUNT, ep)[0]
    sender.during[0] = lambda: hooks.replay(ACCOUNT, ep, first.id)  # e1 in flight
    drain(hooks)
    assert sender.sent == ["e1", "e1", "e2", "e3"]  # e2 waits for the replayed e1's 2xx
    sender.during[4] = lambda: hooks.replay(ACCOUNT, ep, first.id)  # e2 in flight, e1 done
    second = hooks.deliveries(ACCOUNT, ep)[1]
    hooks.replay(ACCOUNT, ep, second.id)
    drain(hooks)
    assert sender.sent[4:] == ["e2", "e1"]  # the replayed e1 goes out after the one in flight
    assert all(d.status == "delivered" for d in hooks.deliveries(ACCOUNT, ep))


def test_a_replay_read_before_the_worker_wrote_does_not_undo_its_attempt(store: Store) -> None:
    wrapped = BeforeNextCommit(store)
    hooks, sender, ep = setup(store, "e1")
    user = Webhooks(wrapped, sender, FixedClock(1_000))
    wrapped.hook = hooks.deliver_due  # the worker delivers between the replay's read and write
    user.replay(ACCOUNT, ep, only(hooks, ep).id)
    assert sender.sent == ["e1"]
    replayed = only(hooks, ep)
    assert (replayed.status, replayed.attempts) == ("pending", 1)  # replayed on top of it
    drain(hooks)
    assert sender.sent == ["e1", "e1"]
    assert only(hooks, ep).attempts == 2
    assert [a.n for a in store.webhook_attempts(replayed.id)] == [1, 2]


def test_the_worker_does_not_rewrite_an_endpoint_it_only_failed_to_reach(store: Store) -> None:
    hooks, sender, ep = setup(store, "e1")
    sender.status = [500]
    sender.during[0] = lambda: hooks.delete(ACCOUNT, ep)  # deleted while the request is out
    hooks.deliver_due()
    assert store.webhook_endpoints(ACCOUNT) == []  # still deleted


class Raising(Sender):
    """A sender that raises `errors[i]` at the i-th send to a `broken` URL (any exception a
    library may throw), and sends to other URLs as `Sender` does."""

    def __init__(self, *errors: Exception) -> None:
        super().__init__()
        self.errors = list(errors)

    def send(self, url: str, secret: str, message_id: str, timestamp: int, body: str) -> SendResult:
        if self.errors and "broken" in url:
            self.sent.append(message_id)
            raise self.errors.pop(0)
        return super().send(url, secret, message_id, timestamp, body)


@pytest.mark.parametrize(
    "error",
    [
        UnicodeError("encoding with 'idna' codec failed (UnicodeError: label too long)"),
        RuntimeError("a bug in a library"),
        TimeoutError("timed out"),
    ],
    ids=["idna", "any-bug", "timeout"],
)
def test_a_send_that_raises_is_recorded_and_retried_and_other_endpoints_still_get_theirs(
    store: Store, error: Exception
) -> None:
    sender = Raising(error)
    clock = FixedClock(1_000)
    hooks = Webhooks(store, sender, clock, rng=random.Random(0))
    broken = hooks.create(ACCOUNT, "https://broken.example/hook", ())
    other = hooks.create("acct-2", "https://fine.example/hook", ())
    for account in (ACCOUNT, "acct-2"):
        event = EventRecord(
            f"e-{account}", 900, account, "instance", "i-1", EventType.NORMAL, Reason.QUEUED, "m"
        )
        store.commit(Commit(events=[event]))
    assert hooks.deliver_due() == 2  # the raise did not stop the worker
    [failed] = hooks.deliveries(ACCOUNT, broken.id)
    assert failed.status == "pending" and failed.next_attempt_at > 1_000  # backoff
    assert type(error).__name__ in failed.last_error
    [attempt] = store.webhook_attempts(failed.id)
    assert attempt.status_code is None and type(error).__name__ in attempt.error
    assert hooks.deliveries("acct-2", other.id)[0].status == "delivered"
    clock.at = failed.next_attempt_at  # once the backoff is over it goes out again
    assert hooks.deliver_due() == 1
    assert hooks.deliveries(ACCOUNT, broken.id)[0].status == "delivered"

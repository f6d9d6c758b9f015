"""Webhooks in the store, against every backend: events fan out to deliveries in their commit."""

from __future__ import annotations

from dataclasses import replace

import pytest
from store_support import state

from lowcostgpu.domain.errors import NotFound, StaleWrite
from lowcostgpu.domain.events import EventType, Reason
from lowcostgpu.ports.store import EventRecord, Store
from lowcostgpu.ports.store_records import Commit, InstanceWrite
from lowcostgpu.ports.webhooks import (
    WebhookAttempt,
    WebhookChanges,
    WebhookEndpoint,
)


def endpoint(
    eid: str = "wh-1", account: str = "acct-1", reasons: tuple[str, ...] = ()
) -> WebhookEndpoint:
    return WebhookEndpoint(eid, account, "https://example.com/hook", "whsec_x", 100, reasons)


def event(key: str, reason: Reason = Reason.QUEUED, account: str = "acct-1") -> EventRecord:
    return EventRecord(
        key, 200, account, "instance", "i-1", EventType.NORMAL, reason, "m", {"k": 1}
    )


def test_an_event_fans_out_to_every_matching_endpoint_in_its_commit(store: Store) -> None:
    eps = (endpoint("wh-all"), endpoint("wh-pre", reasons=("Preempted",)), endpoint("wh-b", "b"))
    store.commit(Commit(webhooks=WebhookChanges(endpoints=eps)))
    store.commit(Commit(events=[event("e1"), event("e2", Reason.PREEMPTED)]))
    store.commit(Commit(events=[event("e1")]))  # written again after a crash: no second delivery
    everything = store.webhook_deliveries(endpoint_id="wh-all")
    assert [(d.message_id, d.seq, d.status) for d in everything] == [
        ("e1", 1, "pending"),
        ("e2", 2, "pending"),
    ]
    assert everything[0].payload["data"]["data"] == {"k": 1}
    assert everything[0].payload["type"] == "instance.Queued"
    assert [d.message_id for d in store.webhook_deliveries(endpoint_id="wh-pre")] == ["e2"]
    assert store.webhook_deliveries(endpoint_id="wh-b") == []
    assert [e.id for e in store.webhook_endpoints("acct-1")] == ["wh-all", "wh-pre"]


def test_deliveries_and_attempts_are_upserted_and_listed_in_order(store: Store) -> None:
    store.commit(Commit(webhooks=WebhookChanges(endpoints=(endpoint(),))))
    store.commit(Commit(events=[event("e1"), event("e2")]))
    first, second = store.webhook_deliveries(endpoint_id="wh-1")
    done = replace(first, status="delivered", attempts=2, delivered_at=300)
    tries = tuple(WebhookAttempt(first.id, n, 250 + n, 500, 12, "oops") for n in (1, 2))
    store.commit(Commit(webhooks=WebhookChanges(deliveries=(done,), attempts=tries)))
    store.commit(Commit(webhooks=WebhookChanges(attempts=(replace(tries[0], error="x"),))))
    stored = replace(done, version=2)
    assert store.webhook_deliveries(endpoint_id="wh-1") == [stored, second]
    assert store.webhook_deliveries(endpoint_id="wh-1", pending_only=True) == [second]
    assert store.webhook_delivery(first.id) == stored
    assert store.webhook_attempts(first.id) == list(tries)  # attempts are never rewritten


def test_a_deleted_endpoint_is_not_listed_and_gets_nothing_disabled_ones_keep_their_backlog(
    store: Store,
) -> None:
    eps = (
        replace(endpoint("wh-off"), status="disabled"),
        replace(endpoint("wh-gone"), status="deleted"),
    )
    store.commit(Commit(webhooks=WebhookChanges(endpoints=eps)))
    store.commit(Commit(events=[event("e1")]))
    assert [e.id for e in store.webhook_endpoints()] == ["wh-off"]
    assert len(store.webhook_deliveries(endpoint_id="wh-off")) == 1
    assert store.webhook_deliveries(endpoint_id="wh-gone") == []


def test_a_stale_commit_writes_no_event_and_no_delivery(store: Store) -> None:
    store.commit(Commit(webhooks=WebhookChanges(endpoints=(endpoint(),))))
    with pytest.raises(StaleWrite):
        bogus = InstanceWrite(state=state("i-9"), expected_version=7)
        store.commit(Commit(instances=[bogus], events=[event("e1")]))
    assert store.events() == []
    assert store.webhook_deliveries(endpoint_id="wh-1") == []


def test_a_delivery_is_written_only_at_the_version_it_was_read(store: Store) -> None:
    """A worker's outcome, read before a replay landed, must not undo the replay (and nothing
    else of its commit is written): it re-reads and decides again."""
    store.commit(Commit(webhooks=WebhookChanges(endpoints=(endpoint(),))))
    store.commit(Commit(events=[event("e1")]))
    [read] = store.webhook_deliveries(endpoint_id="wh-1")
    assert read.version == 1
    replayed = replace(read, next_attempt_at=900)  # the user's write lands first
    store.commit(Commit(webhooks=WebhookChanges(deliveries=(replayed,))))
    outcome = replace(read, status="delivered", attempts=1, delivered_at=300)  # read at 1
    tried = WebhookAttempt(read.id, 1, 300, 200, 5)
    disabled = replace(endpoint(), status="disabled")
    with pytest.raises(StaleWrite, match="no longer at version 1"):
        stale = WebhookChanges(endpoints=(disabled,), deliveries=(outcome,), attempts=(tried,))
        store.commit(Commit(webhooks=stale, events=[event("e2")]))
    assert store.webhook_delivery(read.id) == replace(replayed, version=2)
    assert store.webhook_attempts(read.id) == []
    assert [e.status for e in store.webhook_endpoints()] == ["enabled"]
    assert [e.key for e in store.events()] == ["e1"]
    counted = replace(store.webhook_delivery(read.id), attempts=1)  # read again: at 2
    store.commit(Commit(webhooks=WebhookChanges(deliveries=(counted,), attempts=(tried,))))
    assert store.webhook_deliveries(endpoint_id="wh-1", pending_only=True) == [
        replace(counted, version=3)
    ]
    assert store.webhook_attempts(read.id) == [tried]


def test_a_new_delivery_must_be_new_and_one_commit_may_write_one_twice(store: Store) -> None:
    store.commit(Commit(webhooks=WebhookChanges(endpoints=(endpoint(),))))
    store.commit(Commit(events=[event("e1")]))
    [d] = store.webhook_deliveries(endpoint_id="wh-1")
    with pytest.raises(StaleWrite, match="already exists"):
        store.commit(Commit(webhooks=WebhookChanges(deliveries=(replace(d, version=0),))))
    twice = (replace(d, attempts=1), replace(d, attempts=2, version=2))
    store.commit(Commit(webhooks=WebhookChanges(deliveries=twice)))
    assert store.webhook_delivery(d.id) == replace(d, attempts=2, version=3)


def test_one_delivery_is_read_by_id(store: Store) -> None:
    store.commit(Commit(webhooks=WebhookChanges(endpoints=(endpoint(),))))
    store.commit(Commit(events=[event("e1")]))
    [d] = store.webhook_deliveries(endpoint_id="wh-1")
    assert store.webhook_delivery(d.id) == d
    with pytest.raises(NotFound):
        store.webhook_delivery("wh-1.99")

"""Webhooks in the store, against every backend: events fan out to deliveries in their commit."""

from __future__ import annotations

from dataclasses import replace

import pytest
from store_support import state

from lowcostgpu.domain.errors import StaleWrite
from lowcostgpu.domain.events import EventType, Reason
from lowcostgpu.ports.store import Commit, EventRecord, InstanceWrite, Store
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
    assert store.webhook_deliveries(endpoint_id="wh-1") == [done, second]
    assert store.webhook_deliveries(endpoint_id="wh-1", pending_only=True) == [second]
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

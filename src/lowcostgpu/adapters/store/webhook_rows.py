"""Webhook records as rows, and the SQL side of writing and reading them (used by `SqlStore`)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any

import sqlalchemy as sa

from lowcostgpu.adapters.store import codec, statements
from lowcostgpu.adapters.store import schema as t
from lowcostgpu.domain.errors import NotFound
from lowcostgpu.ports.store import EventRecord
from lowcostgpu.ports.webhooks import (
    WebhookAttempt,
    WebhookChanges,
    WebhookDelivery,
    WebhookEndpoint,
    fan_out,
)

Insert = Callable[[sa.Table], Any]
# Writes a row at a version (see `SqlStore._write_versioned`): conn, table, kind, row, expected.
Versioned = Callable[[sa.Connection, sa.Table, str, dict[str, Any], int | None], None]


def endpoint_row(e: WebhookEndpoint) -> dict[str, Any]:
    return {"id": e.id, "account_id": e.account_id, "status": e.status, "state": codec.dumps(e)}


def delivery_row(d: WebhookDelivery) -> dict[str, Any]:
    """The row without its version: the writer sets that, and only the column holds it."""
    return {
        "id": d.id,
        "endpoint_id": d.endpoint_id,
        "status": d.status,
        "seq": d.seq,
        "created_at": d.created_at,
        "state": _delivery_state(d),
    }


def _delivery_state(d: WebhookDelivery) -> str:
    """The delivery's JSON without `version`: the column is the one truth of it (rows written
    before it existed have none in their JSON), and a schema downgraded to 0004 still reads it."""
    raw = codec.encode(d)
    del raw["version"]
    return json.dumps(raw, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def attempt_row(a: WebhookAttempt) -> dict[str, Any]:
    return {"delivery_id": a.delivery_id, "n": a.n, "state": codec.dumps(a)}


def delivery_order(d: WebhookDelivery) -> tuple[int, int, str]:
    return (d.seq, d.created_at, d.id)


def write(
    conn: sa.Connection, insert: Insert, versioned: Versioned, changes: WebhookChanges
) -> None:
    """Upsert endpoints by id; write deliveries at the version each carries (`StaleWrite` if a
    row moved on: the caller's transaction rolls back whole); insert attempts not stored yet."""
    values = {e.id: endpoint_row(e) for e in changes.endpoints}
    if values:
        stmt = insert(t.webhook_endpoints)
        columns = [c for c in next(iter(values.values())) if c != "id"]
        stmt = stmt.on_conflict_do_update(
            index_elements=["id"], set_={c: stmt.excluded[c] for c in columns}
        )
        conn.execute(stmt, list(values.values()))
    for d in changes.deliveries:
        versioned(
            conn, t.webhook_deliveries, "webhook delivery", delivery_row(d), d.version or None
        )
    if changes.attempts:
        stmt = insert(t.webhook_attempts).on_conflict_do_nothing(
            index_elements=["delivery_id", "n"]
        )
        conn.execute(stmt, [attempt_row(a) for a in changes.attempts])


def endpoints(conn: sa.Connection, account_id: str | None = None) -> list[WebhookEndpoint]:
    """The endpoints (not deleted) of `account_id`, or of every account, sorted by id."""
    if account_id is not None:
        return endpoints_of(conn, [account_id])
    q = sa.select(t.webhook_endpoints.c.state)
    return _decoded(conn.scalars(q.where(t.webhook_endpoints.c.status != "deleted")))


def _decoded(states: Iterable[str]) -> list[WebhookEndpoint]:
    return sorted((codec.loads(WebhookEndpoint, s) for s in states), key=lambda e: e.id)


def deliveries(
    conn: sa.Connection, endpoint_id: str, pending_only: bool, limit: int
) -> list[WebhookDelivery]:
    d = t.webhook_deliveries
    q = sa.select(d.c.state, d.c.version).where(d.c.endpoint_id == endpoint_id)
    if pending_only:
        q = q.where(d.c.status == "pending")
    q = q.order_by(d.c.seq, d.c.created_at, d.c.id).limit(limit)
    return [_delivery(state, version) for state, version in conn.execute(q)]


def delivery(conn: sa.Connection, delivery_id: str) -> WebhookDelivery:
    d = t.webhook_deliveries
    found = conn.execute(sa.select(d.c.state, d.c.version).where(d.c.id == delivery_id)).first()
    if found is None:
        raise NotFound(f"no webhook delivery {delivery_id}")
    return _delivery(found.state, found.version)


def _delivery(state: str, version: int) -> WebhookDelivery:
    return replace(codec.loads(WebhookDelivery, state), version=version)


def attempts(conn: sa.Connection, delivery_id: str) -> list[WebhookAttempt]:
    a = t.webhook_attempts
    q = sa.select(a.c.state).where(a.c.delivery_id == delivery_id).order_by(a.c.n)
    return [codec.loads(WebhookAttempt, s) for s in conn.scalars(q)]


def endpoints_of(conn: sa.Connection, accounts: Sequence[str]) -> list[WebhookEndpoint]:
    """The endpoints (not deleted) of `accounts`, in one statement: those a commit's new events
    fan out to."""
    if not accounts:
        return []
    return _decoded(conn.scalars(statements.ENDPOINTS_OF_ACCOUNTS, {"accounts": list(accounts)}))


def lock_events_reading_endpoints(
    conn: sa.Connection, key: int, accounts: Sequence[str]
) -> list[WebhookEndpoint]:
    """PostgreSQL: take the event writers' transaction lock `key` and read the endpoints (not
    deleted) of `accounts` in the same statement. The endpoints are read at this statement's
    snapshot, a moment before the insert's: what was committed before this commit began, and
    what this commit wrote, is seen either way. The events' numbering reads max(seq) in the
    next statement, after the lock is held."""
    found = conn.execute(
        statements.LOCK_EVENTS_READ_ENDPOINTS, {"k": key, "accounts": list(accounts)}
    ).one()
    return _decoded(found.states or [])


def fanned_out(
    eps: Sequence[WebhookEndpoint], new_events: Sequence[tuple[EventRecord, int]]
) -> list[WebhookDelivery]:
    """The deliveries of newly inserted (event, seq) pairs, for the endpoints `eps` of their
    accounts (sorted by id)."""
    return [d for e, seq in new_events for d in fan_out(list(eps), e, seq)] if eps else []

"""`SqlStore`: the `Store` port on SQLAlchemy 2, over SQLite (embedded) or PostgreSQL.

A commit is one database transaction. Instances are written with optimistic concurrency: an
update must find its row at the expected version (`UPDATE ... WHERE id = ? AND version = ?` hits
exactly one row), a new instance must not exist yet; otherwise the transaction rolls back whole
and `StaleWrite` is raised. Outbox entries, events and usage records are inserted unless their key
exists (`ON CONFLICT DO NOTHING` on both dialects), so a commit replayed after a crash is harmless.
Ledger entries too, and each account's balance is updated in the same transaction by exactly the
entries that were inserted (see `ledger_rows`), so reading a balance never scans the ledger.

Events are numbered under a lock that serializes event writers (SQLite: the write transaction
itself; PostgreSQL: a transaction-level advisory lock); `event_rows` numbers and reads them.
Each kind of record's SQL is in a sibling module (`instance_rows`, `event_rows`, `outbox_rows`,
`usage_rows`, `ledger_rows`, `cluster_rows`, `webhook_rows`); this class holds the transactions,
the dialect and the single-writer lock, and its base class `SqlReads` (`sql_reads`) the reads.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from lowcostgpu.adapters.store import (
    cluster_rows,
    event_rows,
    instance_rows,
    ledger_rows,
    outbox_rows,
    rows,
    statements,
    usage_rows,
)
from lowcostgpu.adapters.store import schema as t
from lowcostgpu.adapters.store import webhook_rows as webhooks
from lowcostgpu.adapters.store.engine import (
    WRITE,
    Target,
    check_sqlite_path,
    create_engine,
    lead_path,
    parse_url,
    remove_sqlite_files,
)
from lowcostgpu.adapters.store.errors import translated
from lowcostgpu.adapters.store.locks import AdvisoryLead, FileLead, Lead, advisory_key
from lowcostgpu.adapters.store.migrate import migrate_or_refuse
from lowcostgpu.adapters.store.sql_reads import SqlReads
from lowcostgpu.domain.capacity import Timestamp
from lowcostgpu.ports.records import EventRecord, WebhookChanges, WebhookDelivery
from lowcostgpu.ports.store_records import Commit, OutboxFailure


class SqlStore(SqlReads):
    """Open with `SqlStore.open(url)`; it migrates the schema to head before returning."""

    def __init__(self, engine: sa.Engine, target: Target, lead: Lead) -> None:
        self._engine = engine
        self._target = target
        self._pg = engine.dialect.name == "postgresql"
        self._lead = lead
        self._leader: str | None = None
        self._lead_mutex = threading.Lock()
        self._events_key: int | None = None

    @classmethod
    def open(cls, url: str) -> SqlStore:
        target = parse_url(url)
        path = target.sqlite_path
        fresh = False
        if path is not None:
            check_sqlite_path(path)
            fresh = not path.exists()
        engine = create_engine(target)
        try:
            with translated(target.shown):
                migrate_or_refuse(engine, target)
        except BaseException:
            engine.dispose()
            if fresh and path is not None:
                remove_sqlite_files(path)
            raise
        lead: Lead = AdvisoryLead(engine) if path is None else FileLead(lead_path(path))
        return cls(engine, target, lead)

    # --- writes ----------------------------------------------------------------------------

    def commit(self, commit: Commit) -> None:
        rows.check_commit(commit)
        with self._write() as conn:
            for w in commit.instances:
                instance_rows.write(conn, self._insert, w)
            outbox_rows.write(conn, self._insert, commit.outbox)
            webhooks.write(conn, self._insert, self._write_versioned, commit.webhooks)
            if commit.events:  # the outbox of their webhooks is written in the same transaction
                changes = WebhookChanges(deliveries=tuple(self._insert_events(conn, commit.events)))
                webhooks.write(conn, self._insert, self._write_versioned, changes)
            usage_rows.write(
                conn, self._insert, commit.usage, commit.metered_through, commit.volumes
            )
            self._insert_new(conn, t.accounts, "id", [rows.account_row(a) for a in commit.accounts])
            self._insert_new(conn, t.api_keys, "key_hash", map(rows.api_key_row, commit.api_keys))
            ledger_rows.write(conn, self._insert, self._text, commit.ledger)  # and the balances
            for c in commit.clusters:
                row = cluster_rows.cluster_row(c.state)
                self._write_versioned(conn, t.clusters, "cluster", row, c.expected_version)
            for n in commit.nodes:
                row = cluster_rows.node_row(n.state)
                self._write_versioned(conn, t.nodes, "node", row, n.expected_version)

    def _write_versioned(
        self,
        conn: sa.Connection,
        table: sa.Table,
        kind: str,
        row: dict[str, Any],
        expected: int | None,
    ) -> None:
        """Insert a new row (it must not exist) or update one still at `expected`."""
        if expected is None:
            stmt = self._insert(table).on_conflict_do_nothing(index_elements=["id"])
            opts = {"preserve_rowcount": True}
            result = conn.execute(stmt, {**row, "version": 1}, execution_options=opts)
        else:
            stmt = statements.versioned_update(table, tuple(row))
            result = conn.execute(stmt, statements.versioned_params(row, expected))
        if result.rowcount != 1:
            raise cluster_rows.stale(kind, row["id"], expected)

    def _insert_new(
        self, conn: sa.Connection, table: sa.Table, key: str, values: Iterable[dict[str, Any]]
    ) -> None:
        """Insert rows whose key is not stored yet; the others are left as they are."""
        values = list(values)
        if values:
            conn.execute(self._insert(table).on_conflict_do_nothing(index_elements=[key]), values)

    def mark_done(self, keys: Sequence[str], at: Timestamp) -> None:
        with self._write() as conn:
            outbox_rows.mark_done(conn, keys, at)

    def record_failures(self, failures: Sequence[OutboxFailure]) -> None:
        with self._write() as conn:
            outbox_rows.record_failures(conn, failures)

    def _insert_events(
        self, conn: sa.Connection, events: Sequence[EventRecord]
    ) -> list[WebhookDelivery]:
        """Insert the new events; the webhook deliveries they fan out to (to the endpoints as
        this transaction sees them: its own writes included). Two statements on either dialect:
        PostgreSQL locks the event writers and reads the endpoints in one, then inserts; SQLite
        (its write transaction is the lock) inserts, then reads the endpoints."""
        if self._pg:
            if self._events_key is None:
                self._events_key = advisory_key("events", conn)
            accounts = sorted({e.account_id for e in events})
            eps = webhooks.lock_events_reading_endpoints(conn, self._events_key, accounts)
            return webhooks.fanned_out(eps, event_rows.insert(conn, events))
        new = event_rows.insert(conn, events)
        eps = webhooks.endpoints_of(conn, sorted({e.account_id for e, _ in new}))
        return webhooks.fanned_out(eps, new)

    # --- the single-writer lock ------------------------------------------------------------

    def try_lead(self, owner: str) -> bool:
        with self._lead_mutex:
            if self._leader not in (None, owner):
                return False
            with translated(self.url):
                got = self._lead.try_acquire()
            self._leader = owner if got else None
            return got

    def release_lead(self, owner: str) -> None:
        with self._lead_mutex:
            if self._leader != owner:
                return
            self._leader = None
            with translated(self.url):
                self._lead.release()

    def close(self) -> None:
        with self._lead_mutex:
            self._leader = None
            self._lead.release()
        self._engine.dispose()

    # --- plumbing --------------------------------------------------------------------------

    @contextmanager
    def _write(self) -> Iterator[sa.Connection]:
        with (
            translated(self.url),
            self._engine.connect().execution_options(**{WRITE: True}) as conn,
            conn.begin(),
        ):
            yield conn

    def _insert(self, table: sa.Table) -> Any:
        """An INSERT that knows ON CONFLICT, for this dialect."""
        return postgresql.insert(table) if self._pg else sqlite.insert(table)

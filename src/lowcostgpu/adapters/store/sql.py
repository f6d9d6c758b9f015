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
the dialect and the single-writer lock.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager
from decimal import Decimal
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
from lowcostgpu.core.metering import IntervalUsage, MeterKey, UsageRecord, UsageTotal
from lowcostgpu.domain.capacity import Timestamp
from lowcostgpu.domain.errors import NotFound
from lowcostgpu.domain.status import InstanceStatus
from lowcostgpu.ports.store import (
    AccountRecord,
    ApiKeyRecord,
    Commit,
    EventRecord,
    LedgerEntry,
    LedgerKind,
    OutboxEntry,
    OutboxFailure,
    StoredCluster,
    StoredInstance,
    StoredNode,
    VolumeRecord,
)
from lowcostgpu.ports.webhooks import (
    WebhookAttempt,
    WebhookChanges,
    WebhookDelivery,
    WebhookEndpoint,
)


class SqlStore:
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

    @property
    def url(self) -> str:
        """The URL with its password hidden."""
        return self._target.shown

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

    # --- reads -----------------------------------------------------------------------------

    def webhook_endpoints(self, account_id: str | None = None) -> list[WebhookEndpoint]:
        with translated(self.url), self._engine.connect() as conn:
            return webhooks.endpoints(conn, account_id)

    def webhook_deliveries(
        self, *, endpoint_id: str, pending_only: bool = False, limit: int = 1000
    ) -> list[WebhookDelivery]:
        with translated(self.url), self._engine.connect() as conn:
            return webhooks.deliveries(conn, endpoint_id, pending_only, limit)

    def webhook_delivery(self, delivery_id: str) -> WebhookDelivery:
        with translated(self.url), self._engine.connect() as conn:
            return webhooks.delivery(conn, delivery_id)

    def webhook_attempts(self, delivery_id: str) -> list[WebhookAttempt]:
        with translated(self.url), self._engine.connect() as conn:
            return webhooks.attempts(conn, delivery_id)

    def instances(self, *, include_deleted: bool = False) -> list[StoredInstance]:
        with translated(self.url), self._engine.connect() as conn:
            return instance_rows.instances(conn, self._text, include_deleted)

    def instance(self, instance_id: str) -> StoredInstance:
        with translated(self.url), self._engine.connect() as conn:
            return instance_rows.instance(conn, instance_id)

    def live_instances(self) -> list[StoredInstance]:
        with translated(self.url), self._engine.connect() as conn:
            return instance_rows.live_instances(conn, self._text)

    def instances_page(
        self,
        account_id: str,
        *,
        limit: int,
        before: tuple[Timestamp, str] | None = None,
        statuses: frozenset[InstanceStatus] | None = None,
        include_deleted: bool = False,
    ) -> list[StoredInstance]:
        if limit <= 0:
            return []
        args = (account_id, limit, before, statuses, include_deleted)
        with translated(self.url), self._engine.connect() as conn:
            return instance_rows.page(conn, self._text, *args)

    def instances_with_prefix(
        self, account_id: str, prefix: str, *, limit: int, include_deleted: bool = False
    ) -> list[StoredInstance]:
        if limit <= 0:
            return []
        with translated(self.url), self._engine.connect() as conn:
            return instance_rows.with_prefix(conn, account_id, prefix, limit, include_deleted)

    def instances_naming_volume(
        self, account_id: str, name: str, *, limit: int | None = None
    ) -> list[str]:
        if limit is not None and limit <= 0:
            return []
        with translated(self.url), self._engine.connect() as conn:
            return instance_rows.naming_volume(conn, account_id, name, limit)

    def clusters(
        self, *, account_id: str | None = None, include_deleted: bool = False
    ) -> list[StoredCluster]:
        q = sa.select(t.clusters)
        if not include_deleted:
            q = q.where(t.clusters.c.status != cluster_rows.DELETED)
        if account_id is not None:
            q = q.where(t.clusters.c.account_id == account_id)
        found = self._rows(q.order_by(self._text(t.clusters.c.id)))
        return [cluster_rows.stored_cluster(r) for r in found]

    def cluster(self, cluster_id: str) -> StoredCluster:
        found = self._rows(sa.select(t.clusters).where(t.clusters.c.id == cluster_id))
        if not found:
            raise NotFound(f"no cluster {cluster_id}", hint="list clusters to see their ids")
        return cluster_rows.stored_cluster(found[0])

    def nodes(
        self, *, cluster_id: str | None = None, include_removed: bool = False
    ) -> list[StoredNode]:
        q = sa.select(t.nodes)
        if not include_removed:
            q = q.where(t.nodes.c.status != cluster_rows.REMOVED)
        if cluster_id is not None:
            q = q.where(t.nodes.c.cluster_id == cluster_id)
        found = self._rows(q.order_by(self._text(t.nodes.c.id)))
        return [cluster_rows.stored_node(r) for r in found]

    def node(self, node_id: str) -> StoredNode:
        found = self._rows(sa.select(t.nodes).where(t.nodes.c.id == node_id))
        if not found:
            raise NotFound(f"no node {node_id}", hint="get the cluster to see its nodes")
        return cluster_rows.stored_node(found[0])

    def pending_outbox(
        self, limit: int = 1000, *, due_at: Timestamp | None = None
    ) -> list[OutboxEntry]:
        with translated(self.url), self._engine.connect() as conn:
            return outbox_rows.pending(conn, limit, due_at)

    def events(
        self,
        *,
        after_seq: int = 0,
        account_id: str | None = None,
        limit: int = 1000,
        since: Timestamp | None = None,
        until: Timestamp | None = None,
        object_kind: str | None = None,
        object_id: str | None = None,
        object_prefix: str | None = None,
        reason: str | None = None,
        before_seq: int | None = None,
        newest: bool = False,
    ) -> list[EventRecord]:
        if limit <= 0:
            return []
        q = event_rows.select(
            after_seq=after_seq,
            account_id=account_id,
            limit=limit,
            since=since,
            until=until,
            object_kind=object_kind,
            object_id=object_id,
            object_prefix=object_prefix,
            reason=reason,
            before_seq=before_seq,
            newest=newest,
        )
        with translated(self.url), self._engine.connect() as conn:
            return event_rows.read(conn, q, newest)

    def latest_seq(self, account_id: str | None = None) -> int:
        with translated(self.url), self._engine.connect() as conn:
            return event_rows.latest_seq(conn, account_id)

    def usage(
        self,
        *,
        account_id: str | None = None,
        subject_id: str | None = None,
        since: Timestamp | None = None,
        until: Timestamp | None = None,
        last: int | None = None,
    ) -> list[UsageRecord]:
        with translated(self.url), self._engine.connect() as conn:
            return usage_rows.usage(
                conn,
                self._text,
                account_id=account_id,
                subject_id=subject_id,
                since=since,
                until=until,
                last=last,
            )

    def usage_totals(
        self,
        *,
        account_id: str | None = None,
        subject_id: str | None = None,
        since: Timestamp | None = None,
        until: Timestamp | None = None,
    ) -> list[UsageTotal]:
        with translated(self.url), self._engine.connect() as conn:
            return usage_rows.usage_totals(
                conn, account_id=account_id, subject_id=subject_id, since=since, until=until
            )

    def usage_by_interval(
        self, *, since: Timestamp | None = None, until: Timestamp | None = None
    ) -> list[IntervalUsage]:
        with translated(self.url), self._engine.connect() as conn:
            return usage_rows.usage_by_interval(conn, since=since, until=until)

    def metered_through(
        self, subject_ids: Collection[str] | None = None
    ) -> dict[MeterKey, Timestamp]:
        with translated(self.url), self._engine.connect() as conn:
            return usage_rows.metered_through(conn, subject_ids)

    def metering_watermark(self) -> Timestamp | None:
        with translated(self.url), self._engine.connect() as conn:
            return usage_rows.metering_watermark(conn)

    def volumes(self, account_id: str | None = None) -> list[VolumeRecord]:
        with translated(self.url), self._engine.connect() as conn:
            return usage_rows.volumes(conn, self._text, account_id)

    def volume(self, account_id: str, name: str) -> VolumeRecord | None:
        with translated(self.url), self._engine.connect() as conn:
            return usage_rows.volume(conn, account_id, name)

    def accounts(self) -> list[AccountRecord]:
        q = sa.select(t.accounts).order_by(self._text(t.accounts.c.id))
        return [rows.account_record(r) for r in self._rows(q)]

    def account(self, account_id: str) -> AccountRecord:
        found = self._rows(sa.select(t.accounts).where(t.accounts.c.id == account_id))
        if not found:
            raise NotFound(f"no account {account_id}", hint="list accounts to see their ids")
        return rows.account_record(found[0])

    def api_key(self, key_hash: str) -> ApiKeyRecord | None:
        with translated(self.url), self._engine.connect() as conn:
            found = conn.execute(statements.API_KEY, {"key_hash": key_hash}).mappings().first()
        return rows.api_key_record(found) if found else None

    def api_keys(self, account_id: str | None = None) -> list[ApiKeyRecord]:
        q = sa.select(t.api_keys)
        if account_id is not None:
            q = q.where(t.api_keys.c.account_id == account_id)
        q = q.order_by(t.api_keys.c.created_at, self._text(t.api_keys.c.key_hash))
        return [rows.api_key_record(r) for r in self._rows(q)]

    def ledger(
        self,
        account_id: str | None = None,
        *,
        kind: LedgerKind | None = None,
        since: Timestamp | None = None,
        until: Timestamp | None = None,
        last: int | None = None,
    ) -> list[LedgerEntry]:
        with translated(self.url), self._engine.connect() as conn:
            return ledger_rows.ledger(
                conn, self._text, account_id, kind=kind, since=since, until=until, last=last
            )

    def balances(self) -> dict[str, Decimal]:
        with translated(self.url), self._engine.connect() as conn:
            return ledger_rows.balances(conn, self._text)

    def balance(self, account_id: str) -> Decimal:
        with translated(self.url), self._engine.connect() as conn:
            return ledger_rows.balance(conn, account_id)

    def balances_of(self, account_ids: Collection[str]) -> dict[str, Decimal]:
        with translated(self.url), self._engine.connect() as conn:
            return ledger_rows.balances_of(conn, account_ids)

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

    def _rows(self, query: sa.Select[Any]) -> list[sa.RowMapping]:
        with translated(self.url), self._engine.connect() as conn:
            return list(conn.execute(query).mappings())

    def _text(self, column: sa.Column[Any]) -> sa.ColumnElement[Any]:
        """Sort text by code point on both dialects (as Python does, and as SQLite does)."""
        return column.collate("C") if self._pg else column

    def _insert(self, table: sa.Table) -> Any:
        """An INSERT that knows ON CONFLICT, for this dialect."""
        return postgresql.insert(table) if self._pg else sqlite.insert(table)

"""`SqlStore`: the `Store` port on SQLAlchemy 2, over SQLite (embedded) or PostgreSQL.

A commit is one database transaction. Instances are written with optimistic concurrency: an
update must find its row at the expected version (`UPDATE ... WHERE id = ? AND version = ?` hits
exactly one row), a new instance must not exist yet; otherwise the transaction rolls back whole
and `StaleWrite` is raised. Outbox entries, events and usage records are inserted unless their key
exists (`ON CONFLICT DO NOTHING` on both dialects), so a commit replayed after a crash is harmless.
Ledger entries too, and each account's balance is updated in the same transaction by exactly the
entries that were inserted (see `ledger_rows`), so reading a balance never scans the ledger.

Event `seq` numbers are assigned as max + 1 while holding a lock that serializes event writers
(SQLite: the write transaction itself; PostgreSQL: a transaction-level advisory lock), so they
grow strictly in commit order and a reader paging with `after_seq` never skips a late commit.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from alembic.util.exc import CommandError
from sqlalchemy.dialects import postgresql, sqlite

from lowcostgpu.adapters.store import cluster_rows, ledger_rows, rows
from lowcostgpu.adapters.store import schema as t
from lowcostgpu.adapters.store import webhook_rows as webhooks
from lowcostgpu.adapters.store.engine import (
    WRITE,
    Target,
    check_sqlite_path,
    create_engine,
    parse_url,
)
from lowcostgpu.adapters.store.errors import StoreUnavailable, translated
from lowcostgpu.adapters.store.locks import AdvisoryLead, FileLead, Lead, advisory_key
from lowcostgpu.adapters.store.migrate import upgrade_to_head
from lowcostgpu.core.metering import MeterKey, UsageRecord
from lowcostgpu.domain.capacity import Timestamp
from lowcostgpu.domain.errors import NotFound, StaleWrite
from lowcostgpu.ports.store import (
    AccountRecord,
    ApiKeyRecord,
    Commit,
    EventRecord,
    InstanceWrite,
    LedgerEntry,
    OutboxEntry,
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

_CHUNK = 500  # keys per IN (...) list


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
                _migrate(engine, target)
        except BaseException:
            engine.dispose()
            if fresh and path is not None:
                _remove_sqlite_files(path)
            raise
        lead: Lead = AdvisoryLead(engine) if path is None else FileLead(_lead_path(path))
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
                self._write_instance(conn, w)
            if commit.outbox:
                stmt = self._insert(t.outbox).on_conflict_do_nothing(index_elements=["key"])
                conn.execute(stmt, [rows.outbox_row(e) for e in commit.outbox])
            webhooks.write(conn, self._insert, self._write_versioned, commit.webhooks)
            if commit.events:  # the outbox of their webhooks is written in the same transaction
                fanned = webhooks.fanned_out(conn, self._insert_events(conn, commit.events))
                changes = WebhookChanges(deliveries=tuple(fanned))
                webhooks.write(conn, self._insert, self._write_versioned, changes)
            if commit.usage:
                keys = ["subject_id", "kind", "interval_start"]
                stmt = self._insert(t.usage).on_conflict_do_nothing(index_elements=keys)
                conn.execute(stmt, [rows.usage_row(u) for u in commit.usage])
            if commit.metered_through:
                self._upsert_metered(conn, commit.metered_through)
            if commit.volumes:
                self._upsert_volumes(conn, commit.volumes)
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
            result = conn.execute(
                sa.update(table)
                .where(table.c.id == row["id"], table.c.version == expected)
                .values(**row, version=expected + 1)
            )
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
            for chunk in _chunks(list(dict.fromkeys(keys))):
                conn.execute(
                    sa.update(t.outbox)
                    .where(t.outbox.c.key.in_(chunk), t.outbox.c.done_at.is_(None))
                    .values(done_at=at)
                )

    def _write_instance(self, conn: sa.Connection, w: InstanceWrite) -> None:
        if w.expected_version is None:
            stmt = self._insert(t.instances).on_conflict_do_nothing(index_elements=["id"])
            new = rows.new_instance_row(w)
            result = conn.execute(stmt, new, execution_options={"preserve_rowcount": True})
            if result.rowcount != 1:
                raise StaleWrite(
                    f"instance {w.state.id} already exists",
                    hint="someone created it first; re-read it and decide again",
                )
            return
        result = conn.execute(
            sa.update(t.instances)
            .where(t.instances.c.id == w.state.id, t.instances.c.version == w.expected_version)
            .values(**rows.instance_row(w.state), version=w.expected_version + 1)
        )
        if result.rowcount != 1:
            raise StaleWrite(
                f"instance {w.state.id} is no longer at version {w.expected_version}",
                hint="someone else wrote it first; re-read it and decide again",
            )

    def _insert_events(
        self, conn: sa.Connection, events: Sequence[EventRecord]
    ) -> list[tuple[EventRecord, int]]:
        if self._pg:
            if self._events_key is None:
                self._events_key = advisory_key("events", conn)
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": self._events_key})
        seen: set[str] = set()
        for chunk in _chunks(list({e.key for e in events})):
            seen.update(conn.scalars(sa.select(t.events.c.key).where(t.events.c.key.in_(chunk))))
        seq = conn.scalar(sa.select(sa.func.coalesce(sa.func.max(t.events.c.seq), 0))) or 0
        new: list[tuple[EventRecord, int]] = []
        for e in events:
            if e.key not in seen:
                seen.add(e.key)
                seq += 1
                new.append((e, seq))
        if new:
            conn.execute(sa.insert(t.events), [rows.event_row(e, n) for e, n in new])
        return new

    def _upsert_metered(self, conn: sa.Connection, through: Mapping[MeterKey, Timestamp]) -> None:
        stmt = self._insert(t.metered_through)
        stmt = stmt.on_conflict_do_update(
            index_elements=["subject_id", "kind"], set_={"through": stmt.excluded.through}
        )
        values = [{"subject_id": s, "kind": k, "through": at} for (s, k), at in through.items()]
        conn.execute(stmt, values)

    def _upsert_volumes(self, conn: sa.Connection, volumes: Sequence[VolumeRecord]) -> None:
        last = {(v.account_id, v.name): v for v in volumes}  # one statement may not hit a row twice
        stmt = self._insert(t.volumes)
        stmt = stmt.on_conflict_do_update(
            index_elements=["account_id", "name"],
            set_={c: stmt.excluded[c] for c in ("size_gb", "created_at", "deleted_at")},
        )
        conn.execute(stmt, [rows.volume_row(v) for v in last.values()])

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
        q = sa.select(t.instances)
        if not include_deleted:
            q = q.where(t.instances.c.status != rows.DELETED)
        return [
            rows.stored_instance(r) for r in self._rows(q.order_by(self._text(t.instances.c.id)))
        ]

    def instance(self, instance_id: str) -> StoredInstance:
        found = self._rows(sa.select(t.instances).where(t.instances.c.id == instance_id))
        if not found:
            raise NotFound(f"no instance {instance_id}", hint="list instances to see their ids")
        return rows.stored_instance(found[0])

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

    def pending_outbox(self, limit: int = 1000) -> list[OutboxEntry]:
        if limit <= 0:
            return []
        q = sa.select(t.outbox).where(t.outbox.c.done_at.is_(None))
        q = q.order_by(t.outbox.c.position).limit(limit)
        return [rows.outbox_entry(r) for r in self._rows(q)]

    def events(
        self,
        *,
        after_seq: int = 0,
        account_id: str | None = None,
        limit: int = 1000,
        since: Timestamp | None = None,
        until: Timestamp | None = None,
    ) -> list[EventRecord]:
        if limit <= 0:
            return []
        q = sa.select(t.events).where(t.events.c.seq > after_seq)
        if account_id is not None:
            q = q.where(t.events.c.account_id == account_id)
        if since is not None:
            q = q.where(t.events.c.at >= since)
        if until is not None:
            q = q.where(t.events.c.at < until)
        q = q.order_by(t.events.c.seq).limit(limit)
        return [rows.event_record(r) for r in self._rows(q)]

    def usage(self, *, account_id: str | None = None) -> list[UsageRecord]:
        q = sa.select(t.usage)
        if account_id is not None:
            q = q.where(t.usage.c.account_id == account_id)
        q = q.order_by(
            t.usage.c.interval_start, self._text(t.usage.c.subject_id), self._text(t.usage.c.kind)
        )
        return [rows.usage_record(r) for r in self._rows(q)]

    def metered_through(self) -> dict[MeterKey, Timestamp]:
        found = self._rows(sa.select(t.metered_through))
        return {(r["subject_id"], rows.usage_kind(r["kind"])): r["through"] for r in found}

    def volumes(self, account_id: str | None = None) -> list[VolumeRecord]:
        q = sa.select(t.volumes)
        if account_id is not None:
            q = q.where(t.volumes.c.account_id == account_id)
        q = q.order_by(self._text(t.volumes.c.account_id), self._text(t.volumes.c.name))
        return [rows.volume_record(r) for r in self._rows(q)]

    def accounts(self) -> list[AccountRecord]:
        q = sa.select(t.accounts).order_by(self._text(t.accounts.c.id))
        return [rows.account_record(r) for r in self._rows(q)]

    def account(self, account_id: str) -> AccountRecord:
        found = self._rows(sa.select(t.accounts).where(t.accounts.c.id == account_id))
        if not found:
            raise NotFound(f"no account {account_id}", hint="list accounts to see their ids")
        return rows.account_record(found[0])

    def api_key(self, key_hash: str) -> ApiKeyRecord | None:
        found = self._rows(sa.select(t.api_keys).where(t.api_keys.c.key_hash == key_hash))
        return rows.api_key_record(found[0]) if found else None

    def api_keys(self, account_id: str | None = None) -> list[ApiKeyRecord]:
        q = sa.select(t.api_keys)
        if account_id is not None:
            q = q.where(t.api_keys.c.account_id == account_id)
        q = q.order_by(t.api_keys.c.created_at, self._text(t.api_keys.c.key_hash))
        return [rows.api_key_record(r) for r in self._rows(q)]

    def ledger(self, account_id: str | None = None) -> list[LedgerEntry]:
        q = sa.select(t.ledger)
        if account_id is not None:
            q = q.where(t.ledger.c.account_id == account_id)
        q = q.order_by(t.ledger.c.at, self._text(t.ledger.c.key))
        return [rows.ledger_entry(r) for r in self._rows(q)]

    def balances(self) -> dict[str, Decimal]:
        with translated(self.url), self._engine.connect() as conn:
            return ledger_rows.balances(conn, self._text)

    def balance(self, account_id: str) -> Decimal:
        with translated(self.url), self._engine.connect() as conn:
            return ledger_rows.balance(conn, account_id)

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


def _migrate(engine: sa.Engine, target: Target) -> None:
    try:
        upgrade_to_head(engine)
    except CommandError as e:
        raise StoreUnavailable(
            f"cannot bring the database at {target.shown} to this version's schema: {e}",
            hint="the database was probably written by a newer lowcostgpu; upgrade this one",
        ) from None


def _lead_path(db: Path) -> Path:
    return db.with_name(db.name + ".lead")


def _remove_sqlite_files(path: Path) -> None:
    """Leave no partial state behind when a fresh database could not be set up."""
    for p in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        p.unlink(missing_ok=True)


def _chunks(items: list[str]) -> Iterator[list[str]]:
    for i in range(0, len(items), _CHUNK):
        yield items[i : i + _CHUNK]

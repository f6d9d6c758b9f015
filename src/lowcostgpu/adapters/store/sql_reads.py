"""`SqlReads`: the read side of `SqlStore`, its base class.

Each read takes a connection of its own from the engine, under `errors.translated`, and hands
the work to the sibling module of its kind of record (`instance_rows`, `event_rows`,
`outbox_rows`, `usage_rows`, `ledger_rows`, `cluster_rows`, `webhook_rows`) or runs one short
select (accounts, keys, clusters, nodes). None of it touches the writes' transactions, the
opening of a store or the single-writer lock, which stay in `sql`; what a read needs of the store
is the engine, its target (the URL that errors show) and the dialect (the order of text), which
`SqlStore.__init__` sets. Kept apart so that each module is one part of the store and fits the
house size.
"""

from __future__ import annotations

from collections.abc import Collection
from decimal import Decimal
from typing import Any

import sqlalchemy as sa

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
from lowcostgpu.adapters.store.engine import Target
from lowcostgpu.adapters.store.errors import translated
from lowcostgpu.core.metering import IntervalUsage, MeterKey, UsageRecord, UsageTotal
from lowcostgpu.domain.capacity import Timestamp
from lowcostgpu.domain.errors import NotFound
from lowcostgpu.domain.status import InstanceStatus
from lowcostgpu.ports.records import EventRecord, WebhookAttempt, WebhookDelivery, WebhookEndpoint
from lowcostgpu.ports.store_records import (
    AccountRecord,
    ApiKeyRecord,
    LedgerEntry,
    LedgerKind,
    OutboxEntry,
    StoredCluster,
    StoredInstance,
    StoredNode,
    VolumeRecord,
)


class SqlReads:
    """The queries of `SqlStore`, on the engine, target and dialect its `__init__` sets."""

    _engine: sa.Engine
    _target: Target
    _pg: bool

    @property
    def url(self) -> str:
        """The URL with its password hidden."""
        return self._target.shown

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

    # --- plumbing --------------------------------------------------------------------------

    def _rows(self, query: sa.Select[Any]) -> list[sa.RowMapping]:
        with translated(self.url), self._engine.connect() as conn:
            return list(conn.execute(query).mappings())

    def _text(self, column: sa.Column[Any]) -> sa.ColumnElement[Any]:
        """Sort text by code point on both dialects (as Python does, and as SQLite does)."""
        return column.collate("C") if self._pg else column

"""`MemoryReads`: the tables of `MemoryStore` and the queries on them; its base class.

The tables (the rows the SQL store keeps, in dicts) are made here, beside the reads that scan
them under the store's mutex and order what they find as the SQL store's indexes do, so both
stores answer alike. The writes (a commit all or nothing with its version checks and the
numbering of events, the outbox's done marks and retry state) and the lead lock stay in
`memory`. Kept apart so that each module is one part of the store and fits the house size.
"""

from __future__ import annotations

import threading
from collections.abc import Collection
from decimal import Decimal
from itertools import islice
from typing import Any

from lowcostgpu.adapters.store import cluster_rows, memory_rows, rows
from lowcostgpu.adapters.store.webhook_rows import delivery_order
from lowcostgpu.core.metering import (
    IntervalUsage,
    MeterKey,
    UsageRecord,
    UsageTotal,
    usage_by_interval,
    usage_totals,
)
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

Row = dict[str, Any]


class MemoryReads:
    """The tables of a `MemoryStore` and its reads; `MemoryStore` adds the writes."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._instances: dict[str, Row] = {}
        self._outbox: dict[str, Row] = {}  # insertion order is the outbox order
        self._pending: dict[str, Row] = {}  # the same rows while not done, in the same order
        self._events: list[Row] = []
        self._event_keys: set[str] = set()
        self._usage: dict[tuple[str, str, Timestamp], Row] = {}
        self._metered: dict[MeterKey, Timestamp] = {}
        self._volumes: dict[tuple[str, str], Row] = {}
        self._accounts: dict[str, Row] = {}
        self._api_keys: dict[str, Row] = {}
        self._ledger: dict[str, Row] = {}
        self._balances: dict[str, str] = {}  # account → exact decimal text, as account_balances
        self._clusters: dict[str, Row] = {}
        self._nodes: dict[str, Row] = {}
        self._leader: str | None = None
        self._webhooks = memory_rows.Webhooks()

    def instances(self, *, include_deleted: bool = False) -> list[StoredInstance]:
        with self._mutex:
            live = [
                r
                for r in self._instances.values()
                if include_deleted or r["status"] != rows.DELETED
            ]
        return [rows.stored_instance(r) for r in sorted(live, key=lambda r: r["id"])]

    def instance(self, instance_id: str) -> StoredInstance:
        with self._mutex:
            row = self._instances.get(instance_id)
        if row is None:
            raise NotFound(f"no instance {instance_id}", hint="list instances to see their ids")
        return rows.stored_instance(row)

    def live_instances(self) -> list[StoredInstance]:
        with self._mutex:
            found = memory_rows.live(self._instances.values())
        return [rows.stored_instance(r) for r in found]

    def instances_page(
        self,
        account_id: str,
        *,
        limit: int,
        before: tuple[Timestamp, str] | None = None,
        statuses: frozenset[InstanceStatus] | None = None,
        include_deleted: bool = False,
    ) -> list[StoredInstance]:
        with self._mutex:
            found = memory_rows.page(
                self._instances.values(), account_id, limit, before, statuses, include_deleted
            )
        return [rows.stored_instance(r) for r in found]

    def instances_with_prefix(
        self, account_id: str, prefix: str, *, limit: int, include_deleted: bool = False
    ) -> list[StoredInstance]:
        """O(all rows): the in-memory store keeps no order of ids."""
        with self._mutex:
            found = sorted(
                (
                    r
                    for r in self._instances.values()
                    if r["account_id"] == account_id
                    and r["id"].startswith(prefix)
                    and (include_deleted or r["status"] != rows.DELETED)
                ),
                key=lambda r: r["id"],
            )
        return [rows.stored_instance(r) for r in found[: max(limit, 0)]]

    def instances_naming_volume(
        self, account_id: str, name: str, *, limit: int | None = None
    ) -> list[str]:
        """O(all rows), as `instances_with_prefix`."""
        with self._mutex:
            found = memory_rows.naming_volume(self._instances.values(), account_id, name)
        return found if limit is None else found[: max(limit, 0)]

    def pending_outbox(
        self, limit: int = 1000, *, due_at: Timestamp | None = None
    ) -> list[OutboxEntry]:
        if limit <= 0:
            return []
        with self._mutex:
            due = (
                r
                for r in self._pending.values()
                if due_at is None or r["next_attempt_at"] <= due_at
            )
            pending = [dict(r) for r in islice(due, limit)]  # copies: later writes change rows
        return [rows.outbox_entry(r) for r in pending]

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
        wanted = {"account_id": account_id, "object_kind": object_kind, "object_id": object_id}
        wanted = {k: v for k, v in {**wanted, "reason": reason}.items() if v is not None}
        with self._mutex:
            found = [
                r
                for r in self._events
                if r["seq"] > after_seq
                and (before_seq is None or r["seq"] < before_seq)
                and all(r[k] == v for k, v in wanted.items())
                and (object_prefix is None or r["object_id"].startswith(object_prefix))
                and (since is None or r["at"] >= since)
                and (until is None or r["at"] < until)
            ]
        found = found[-limit:] if newest else found[:limit]
        return [rows.event_record(r) for r in found]

    def latest_seq(self, account_id: str | None = None) -> int:
        with self._mutex:
            for r in reversed(self._events):
                if account_id in (None, r["account_id"]):
                    return int(r["seq"])
        return 0

    def usage(
        self,
        *,
        account_id: str | None = None,
        subject_id: str | None = None,
        since: Timestamp | None = None,
        until: Timestamp | None = None,
        last: int | None = None,
    ) -> list[UsageRecord]:
        """O(every record): the in-memory store keeps no index (tests, the simulator's wiring)."""
        with self._mutex:
            found = [
                r
                for r in self._usage.values()
                if account_id in (None, r["account_id"])
                and subject_id in (None, r["subject_id"])
                and (since is None or r["interval_start"] >= since)
                and (until is None or r["interval_start"] < until)
            ]
        found.sort(key=lambda r: (r["interval_start"], r["subject_id"], r["kind"]))
        return [rows.usage_record(r) for r in rows.newest(found, last)]

    def usage_totals(
        self,
        *,
        account_id: str | None = None,
        subject_id: str | None = None,
        since: Timestamp | None = None,
        until: Timestamp | None = None,
    ) -> list[UsageTotal]:
        found = self.usage(account_id=account_id, subject_id=subject_id, since=since, until=until)
        return usage_totals(found)

    def usage_by_interval(
        self, *, since: Timestamp | None = None, until: Timestamp | None = None
    ) -> list[IntervalUsage]:
        return usage_by_interval(self.usage(since=since, until=until))

    def metered_through(
        self, subject_ids: Collection[str] | None = None
    ) -> dict[MeterKey, Timestamp]:
        with self._mutex:
            if subject_ids is None:
                return dict(self._metered)
            wanted = set(subject_ids)
            return {k: at for k, at in self._metered.items() if k[0] in wanted}

    def metering_watermark(self) -> Timestamp | None:
        with self._mutex:
            return max(self._metered.values(), default=None)

    def volumes(self, account_id: str | None = None) -> list[VolumeRecord]:
        with self._mutex:
            found = [r for r in self._volumes.values() if account_id in (None, r["account_id"])]
        found.sort(key=lambda r: (r["account_id"], r["name"]))
        return [rows.volume_record(r) for r in found]

    def volume(self, account_id: str, name: str) -> VolumeRecord | None:
        with self._mutex:
            row = self._volumes.get((account_id, name))
        return None if row is None else rows.volume_record(row)

    def accounts(self) -> list[AccountRecord]:
        with self._mutex:
            found = sorted(self._accounts.values(), key=lambda r: r["id"])
        return [rows.account_record(r) for r in found]

    def account(self, account_id: str) -> AccountRecord:
        with self._mutex:
            row = self._accounts.get(account_id)
        if row is None:
            raise NotFound(f"no account {account_id}", hint="list accounts to see their ids")
        return rows.account_record(row)

    def api_key(self, key_hash: str) -> ApiKeyRecord | None:
        with self._mutex:
            row = self._api_keys.get(key_hash)
        return None if row is None else rows.api_key_record(row)

    def api_keys(self, account_id: str | None = None) -> list[ApiKeyRecord]:
        with self._mutex:
            found = [
                r
                for r in self._api_keys.values()
                if account_id is None or r["account_id"] == account_id
            ]
        found.sort(key=lambda r: (r["created_at"], r["key_hash"]))
        return [rows.api_key_record(r) for r in found]

    def ledger(
        self,
        account_id: str | None = None,
        *,
        kind: LedgerKind | None = None,
        since: Timestamp | None = None,
        until: Timestamp | None = None,
        last: int | None = None,
    ) -> list[LedgerEntry]:
        with self._mutex:
            found = [
                r
                for r in self._ledger.values()
                if account_id in (None, r["account_id"])
                and kind in (None, r["kind"])
                and (since is None or r["at"] >= since)
                and (until is None or r["at"] < until)
            ]
        found.sort(key=lambda r: (r["at"], r["key"]))
        return [rows.ledger_entry(r) for r in rows.newest(found, last)]

    def balances(self) -> dict[str, Decimal]:
        with self._mutex:
            found = sorted(self._balances.items())
        return {account: rows.ledger_amount(b) for account, b in found}

    def balance(self, account_id: str) -> Decimal:
        with self._mutex:
            found = self._balances.get(account_id)
        return Decimal(0) if found is None else rows.ledger_amount(found)

    def balances_of(self, account_ids: Collection[str]) -> dict[str, Decimal]:
        with self._mutex:
            found = {a: self._balances.get(a) for a in account_ids}
        return {a: Decimal(0) if b is None else rows.ledger_amount(b) for a, b in found.items()}

    def clusters(
        self, *, account_id: str | None = None, include_deleted: bool = False
    ) -> list[StoredCluster]:
        with self._mutex:
            found = [
                r
                for r in self._clusters.values()
                if (include_deleted or r["status"] != cluster_rows.DELETED)
                and account_id in (None, r["account_id"])
            ]
        found.sort(key=lambda r: r["id"])
        return [cluster_rows.stored_cluster(r) for r in found]

    def cluster(self, cluster_id: str) -> StoredCluster:
        with self._mutex:
            row = self._clusters.get(cluster_id)
        if row is None:
            raise NotFound(f"no cluster {cluster_id}", hint="list clusters to see their ids")
        return cluster_rows.stored_cluster(row)

    def nodes(
        self, *, cluster_id: str | None = None, include_removed: bool = False
    ) -> list[StoredNode]:
        with self._mutex:
            found = [
                r
                for r in self._nodes.values()
                if (include_removed or r["status"] != cluster_rows.REMOVED)
                and cluster_id in (None, r["cluster_id"])
            ]
        found.sort(key=lambda r: r["id"])
        return [cluster_rows.stored_node(r) for r in found]

    def node(self, node_id: str) -> StoredNode:
        with self._mutex:
            row = self._nodes.get(node_id)
        if row is None:
            raise NotFound(f"no node {node_id}", hint="get the cluster to see its nodes")
        return cluster_rows.stored_node(row)

    def webhook_endpoints(self, account_id: str | None = None) -> list[WebhookEndpoint]:
        with self._mutex:
            found = self._webhooks.endpoints.values()
            return sorted(
                (e for e in found if e.status != "deleted" and account_id in (None, e.account_id)),
                key=lambda e: e.id,
            )

    def webhook_deliveries(
        self, *, endpoint_id: str, pending_only: bool = False, limit: int = 1000
    ) -> list[WebhookDelivery]:
        with self._mutex:
            found = [
                d
                for d in self._webhooks.deliveries.values()
                if d.endpoint_id == endpoint_id and (not pending_only or d.status == "pending")
            ]
        return sorted(found, key=delivery_order)[:limit]

    def webhook_delivery(self, delivery_id: str) -> WebhookDelivery:
        with self._mutex:
            found = self._webhooks.deliveries.get(delivery_id)
        if found is None:
            raise NotFound(f"no webhook delivery {delivery_id}")
        return found

    def webhook_attempts(self, delivery_id: str) -> list[WebhookAttempt]:
        with self._mutex:
            found = [a for a in self._webhooks.attempts.values() if a.delivery_id == delivery_id]
        return sorted(found, key=lambda a: a.n)

"""The store port: durable state, written in versioned transactions with an outbox.

One `commit` is one transaction: every instance it carries is written only if its stored version
is still the `expected_version` (None: it must not exist yet), and the effects that follow from
those writes go into the outbox in the same transaction. Either all of it lands or none of it does
(`StaleWrite` when a version did not match: re-read and decide again). Effects are carried out
only after the commit, and marked done after they were carried out; an effect found pending after
a crash is carried out again, which is safe because every effect is idempotent by its key.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from decimal import Decimal
from typing import Protocol

from lowcostgpu.core.metering import IntervalUsage, MeterKey, UsageRecord, UsageTotal
from lowcostgpu.domain.capacity import Timestamp
from lowcostgpu.domain.status import InstanceStatus
from lowcostgpu.ports.records import EventRecord as EventRecord
from lowcostgpu.ports.records import WebhookAttempt as WebhookAttempt
from lowcostgpu.ports.records import WebhookChanges as WebhookChanges
from lowcostgpu.ports.records import WebhookDelivery as WebhookDelivery
from lowcostgpu.ports.records import WebhookEndpoint as WebhookEndpoint
from lowcostgpu.ports.store_records import (
    AccountRecord,
    ApiKeyRecord,
    Commit,
    LedgerEntry,
    LedgerKind,
    OutboxEntry,
    OutboxFailure,
    StoredCluster,
    StoredInstance,
    StoredNode,
    VolumeRecord,
)


class Store(Protocol):
    def commit(self, commit: Commit) -> None:
        """Write all of it in one transaction, or raise `StaleWrite` and write nothing."""
        ...

    def instances(self, *, include_deleted: bool = False) -> list[StoredInstance]:
        """Every instance that is not deleted (or every one), with its version."""
        ...

    def instance(self, instance_id: str) -> StoredInstance:
        """One instance (deleted ones too); `NotFound` if there is none."""
        ...

    def live_instances(self) -> list[StoredInstance]:
        """The instances whose status is in `LIVE_INSTANCE_STATUSES`, by id, with their versions.

        What the leader loads once when it gains the lead. The SQL store reads them through a
        partial index on exactly those statuses, so it costs O(live instances) whatever the
        number of finished and deleted ones."""
        ...

    def instances_page(
        self,
        account_id: str,
        *,
        limit: int,
        before: tuple[Timestamp, str] | None = None,
        statuses: frozenset[InstanceStatus] | None = None,
        include_deleted: bool = False,
    ) -> list[StoredInstance]:
        """One page of an account's instances, newest first: by (created_at, id) descending.

        At most `limit` of them, each strictly before `before` — the (created_at, id) of the
        previous page's last instance — so pages neither skip nor repeat an instance however many
        are launched meanwhile. `statuses` keeps only those; deleted instances only with
        `include_deleted` (or when `statuses` names DELETED). Another account's instances are
        never read. The SQL store walks an index on (account_id, created_at, id): O(limit) rows
        (plus the skipped ones when a status filter is selective), not O(the account's rows)."""
        ...

    def instances_with_prefix(
        self, account_id: str, prefix: str, *, limit: int, include_deleted: bool = False
    ) -> list[StoredInstance]:
        """At most `limit` of an account's instances whose id starts with `prefix`, by id.

        What resolves a short id (`i-c24`) as docker does: asked with a limit of 2 or more, one
        answer is the instance, more are an ambiguity. Another account's instances never match.
        The SQL store walks the range [prefix, prefix + "zz") of the (account_id, id) index:
        O(the account's matching ids + limit). `prefix` is lower-case letters, digits and dashes
        (an id's alphabet)."""
        ...

    def instances_naming_volume(
        self, account_id: str, name: str, *, limit: int | None = None
    ) -> list[str]:
        """The ids of at most `limit` (None: all) of an account's instances that are not deleted
        and whose launch names volume `name`, by id: what keeps that volume in use.

        Another account's instances never count, whatever their volume is called. The SQL store
        walks a partial index on (account_id, volume_name, id) of the non-deleted instances that
        name a volume: O(the ids returned), however long the account's history."""
        ...

    def pending_outbox(
        self, limit: int = 1000, *, due_at: Timestamp | None = None
    ) -> list[OutboxEntry]:
        """Effects not yet done, oldest first; with `due_at`, only those whose next attempt is
        due by then (`next_attempt_at <= due_at`).

        The loop reads the due ones at every tick: the SQL store reads them through a partial
        index on (next_attempt_at, position) of the pending entries, so an entry waiting for its
        retry, and the history of done ones, cost nothing per tick."""
        ...

    def mark_done(self, keys: Sequence[str], at: Timestamp) -> None: ...

    def record_failures(self, failures: Sequence[OutboxFailure]) -> None:
        """Write each failed attempt on its entry, if it is still pending and has seen fewer
        attempts (two carriers of one entry, or a replay, never move its count back)."""
        ...

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
        """Events with seq > `after_seq` (of one account, or all), in seq order, at most `limit`.

        Every filter that is set must match, and they are applied by the store, so a filtered
        read costs what it returns, not the log: `since`/`until` keep `since <= at < until` (the
        SQL store has an index on `at`); `object_kind`, `object_id` (an index on account, object,
        seq), `object_prefix` (ids that start with it: a cluster and its nodes `<cluster>-n<k>`)
        and `reason` are exact; `before_seq` keeps seq < it. The answer is the first `limit`
        matches in seq order — so a caller resumes from the last seq it got — or, with `newest`,
        the last `limit` (still in seq order: the tail of the log, for a page of recent events).
        """
        ...

    def latest_seq(self, account_id: str | None = None) -> int:
        """The largest seq (of one account's events, or of all), 0 when there is none.

        Every event up to it is committed, so following from it misses nothing later."""
        ...

    def usage(
        self,
        *,
        account_id: str | None = None,
        subject_id: str | None = None,
        since: Timestamp | None = None,
        until: Timestamp | None = None,
        last: int | None = None,
    ) -> list[UsageRecord]:
        """Usage records, oldest first (by interval start, then subject and kind): of one
        account and/or one subject, whose interval starts in [since, until), and only the newest
        `last` of those. Read through an index (the account's by interval start, the subject's
        key, the fleet's by interval start): O(records returned), not O(history), except a
        fleet-wide read with no window (the whole table)."""
        ...

    def usage_totals(
        self,
        *,
        account_id: str | None = None,
        subject_id: str | None = None,
        since: Timestamp | None = None,
        until: Timestamp | None = None,
    ) -> list[UsageTotal]:
        """`core.metering.usage_totals` of what `usage` returns for the same filters, summed by
        the store: a window's or a subject's rows are summed where they are, and only the totals
        (a few per account) come back; for all time (no subject, no window, or since 0) they are
        the totals the store keeps as it inserts records, O(lines). An invoice is made from them
        (`core.rating.invoice_of`)."""
        ...

    def usage_by_interval(
        self, *, since: Timestamp | None = None, until: Timestamp | None = None
    ) -> list[IntervalUsage]:
        """`core.metering.usage_by_interval` of the fleet's records whose interval starts in
        [since, until), summed by the store (through its index on the interval start): a day
        of 10,000 GPUs metered every minute is 14 million records but 1,440 intervals."""
        ...

    def metered_through(
        self, subject_ids: Collection[str] | None = None
    ) -> dict[MeterKey, Timestamp]:
        """Up to when each subject's usage is in the store (of `subject_ids` only, if given: a
        read by key, so the live state loads the watermarks it needs, not the history's)."""
        ...

    def metering_watermark(self) -> Timestamp | None:
        """The latest watermark of any subject (None before the first record): a takeover
        looks for usage still to meter in the events since then."""
        ...

    def volumes(self, account_id: str | None = None) -> list[VolumeRecord]: ...

    def volume(self, account_id: str, name: str) -> VolumeRecord | None:
        """The account's volume of that name (a deleted one too) by its primary key; None if
        there never was one."""
        ...

    def accounts(self) -> list[AccountRecord]:
        """Every account, by id."""
        ...

    def account(self, account_id: str) -> AccountRecord:
        """One account; `NotFound` if there is none."""
        ...

    def api_key(self, key_hash: str) -> ApiKeyRecord | None:
        """The key with that hash, if any."""
        ...

    def api_keys(self, account_id: str | None = None) -> list[ApiKeyRecord]:
        """Keys (of one account, or all), oldest first; admin keys have no account."""
        ...

    def ledger(
        self,
        account_id: str | None = None,
        *,
        kind: LedgerKind | None = None,
        since: Timestamp | None = None,
        until: Timestamp | None = None,
        last: int | None = None,
    ) -> list[LedgerEntry]:
        """Balance movements (of one account, or all), in time then key order: of one kind, at
        a time in [since, until), and only the newest `last` of those. An account's are read
        through its (account, at) index: O(entries returned) for a window or `last`."""
        ...

    def balances(self) -> dict[str, Decimal]:
        """Every account's balance that has ledger entries: the exact sum of its entries.

        Kept by the store as entries are inserted (in the same transaction), so a read costs
        O(accounts), not O(ledger)."""
        ...

    def balance(self, account_id: str) -> Decimal:
        """One account's balance (0 if it has no ledger entries), without reading the others."""
        ...

    def balances_of(self, account_ids: Collection[str]) -> dict[str, Decimal]:
        """`balance` of each of these accounts (0 if it has no ledger entries), in one read:
        a metering pass charges hundreds of accounts per commit. O(len(account_ids))."""
        ...

    def clusters(
        self, *, account_id: str | None = None, include_deleted: bool = False
    ) -> list[StoredCluster]:
        """Every cluster that is not deleted (or every one), by id, with its version."""
        ...

    def cluster(self, cluster_id: str) -> StoredCluster:
        """One cluster (deleted ones too); `NotFound` if there is none."""
        ...

    def nodes(
        self, *, cluster_id: str | None = None, include_removed: bool = False
    ) -> list[StoredNode]:
        """Every node that is not removed (or every one), by id, with its version."""
        ...

    def node(self, node_id: str) -> StoredNode:
        """One node (removed ones too), by its primary key; `NotFound` if there is none."""
        ...

    def webhook_endpoints(self, account_id: str | None = None) -> list[WebhookEndpoint]:
        """Endpoints that are not deleted (of one account, or all), by id."""
        ...

    def webhook_deliveries(
        self, *, endpoint_id: str, pending_only: bool = False, limit: int = 1000
    ) -> list[WebhookDelivery]:
        """An endpoint's deliveries in the order they go out: by seq, then creation, then id."""
        ...

    def webhook_delivery(self, delivery_id: str) -> WebhookDelivery:
        """One delivery as stored now, with its version; `NotFound` if there is none."""
        ...

    def webhook_attempts(self, delivery_id: str) -> list[WebhookAttempt]:
        """Every attempt of a delivery, in order."""
        ...

    def try_lead(self, owner: str) -> bool:
        """Take (or keep) the single-writer lock: only one loop may act on a store."""
        ...

    def release_lead(self, owner: str) -> None: ...

    def close(self) -> None: ...

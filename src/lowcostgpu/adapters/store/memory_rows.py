"""The in-memory store's reads of instance pages and its webhook records (see `MemoryStore`).

Kept beside `memory` and `memory_reads` so that those stay the classes of the port's methods.
The queries here scan every row (a memory store holds a test's or a simulation's instances, not a
production history) and order exactly as the SQL store's indexes do, so both answer the same.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from lowcostgpu.adapters.store import cluster_rows, rows
from lowcostgpu.domain.capacity import Timestamp
from lowcostgpu.domain.status import LIVE_INSTANCE_STATUSES, InstanceStatus
from lowcostgpu.ports.store import EventRecord
from lowcostgpu.ports.webhooks import (
    WebhookAttempt,
    WebhookChanges,
    WebhookDelivery,
    WebhookEndpoint,
    fan_out,
)

Row = Mapping[str, Any]
_LIVE = frozenset(s.value for s in LIVE_INSTANCE_STATUSES)


def live(instances: Iterable[Row]) -> list[Row]:
    """The rows of live instances, by id (as `ix_instances_active` gives them). O(all rows)."""
    return sorted((r for r in instances if r["status"] in _LIVE), key=lambda r: r["id"])


def page(
    instances: Iterable[Row],
    account_id: str,
    limit: int,
    before: tuple[Timestamp, str] | None,
    statuses: frozenset[InstanceStatus] | None,
    include_deleted: bool,
) -> list[Row]:
    """One account's rows by (created_at, id) descending, strictly before `before`, at most
    `limit` — what `SqlStore.instances_page` reads. O(all rows) plus a sort of the account's."""
    if limit <= 0:
        return []
    wanted = None if statuses is None else {s.value for s in statuses}
    found = [
        r
        for r in instances
        if r["account_id"] == account_id
        and (before is None or (r["created_at"], r["id"]) < before)
        and (
            r["status"] in wanted
            if wanted is not None
            else include_deleted or r["status"] != rows.DELETED
        )
    ]
    found.sort(key=lambda r: (r["created_at"], r["id"]), reverse=True)
    return found[:limit]


def naming_volume(instances: Iterable[Row], account_id: str, name: str) -> list[str]:
    """The ids of an account's non-deleted rows naming volume `name`, by id (as
    `ix_instances_account_volume` gives them). O(all rows)."""
    return sorted(
        r["id"]
        for r in instances
        if r["account_id"] == account_id
        and r["volume_name"] == name
        and r["status"] != rows.DELETED
    )


class Webhooks:
    """The webhook records (immutable values, kept as they are)."""

    def __init__(self) -> None:
        self.endpoints: dict[str, WebhookEndpoint] = {}
        self.deliveries: dict[str, WebhookDelivery] = {}
        self.attempts: dict[tuple[str, int], WebhookAttempt] = {}

    def deliveries_after(
        self, changes: WebhookChanges, new_events: list[tuple[EventRecord, int]]
    ) -> dict[str, WebhookDelivery]:
        """The deliveries a commit writes, each at its new version: the ones it carries, then
        those its new events fan out to (to the endpoints as of after it, as the SQL store does);
        `StaleWrite` with nothing changed if one is not at the version it was read at."""
        eps = list({**self.endpoints, **{e.id: e for e in changes.endpoints}}.values())
        fanned = [d for e, seq in new_events for d in fan_out(eps, e, seq)]
        after: dict[str, WebhookDelivery] = {}
        for d in (*changes.deliveries, *fanned):
            found = after.get(d.id) or self.deliveries.get(d.id)
            if (0 if found is None else found.version) != d.version:
                raise cluster_rows.stale("webhook delivery", d.id, d.version or None)
            after[d.id] = replace(d, version=d.version + 1)
        return after

    def write(self, changes: WebhookChanges, deliveries: dict[str, WebhookDelivery]) -> None:
        """Write what `deliveries_after` checked: nothing here can fail."""
        self.endpoints.update((e.id, e) for e in changes.endpoints)
        self.deliveries.update(deliveries)
        for a in changes.attempts:
            self.attempts.setdefault((a.delivery_id, a.n), a)

"""The records that the store and the webhooks share: events and the webhook records.

A store commit (`ports.store_records.Commit`) carries webhook records and the store's reads
(`ports.store`) return them; `ports.webhooks` turns an event into the deliveries it fans out to.
Both need these dataclasses, and neither needs the other: kept here, below both, the two modules
do not import each other (an import-linter contract in pyproject.toml keeps it so). Import them
from `ports.store` or `ports.webhooks` as before; both re-export them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from lowcostgpu.domain.capacity import Timestamp
from lowcostgpu.domain.events import EventType, Reason


@dataclass(frozen=True, slots=True)
class EventRecord:
    """An immutable event; `key` deduplicates an event written twice after a crash."""

    key: str
    at: Timestamp
    account_id: str
    object_kind: str
    object_id: str
    type: EventType
    reason: Reason
    message: str
    data: Mapping[str, Any] = field(default_factory=dict)
    seq: int | None = None  # assigned by the store: the order of events


EndpointStatus = Literal["enabled", "disabled", "deleted"]
DeliveryStatus = Literal["pending", "delivered"]


@dataclass(frozen=True, slots=True)
class WebhookEndpoint:
    """Where an account's events go. `reasons` empty: every event. `secret` never leaves the
    server after creation (responses and logs show `id` and `url` only)."""

    id: str
    account_id: str
    url: str
    secret: str
    created_at: Timestamp
    reasons: tuple[str, ...] = ()
    status: EndpointStatus = "enabled"
    disabled_reason: str = ""


@dataclass(frozen=True, slots=True)
class WebhookDelivery:
    """One event (or test message) for one endpoint; `message_id` is the stable `webhook-id`."""

    id: str
    endpoint_id: str
    account_id: str
    message_id: str
    seq: int  # the event's seq: deliveries to an endpoint go out in this order (0: a test)
    payload: Mapping[str, Any]
    created_at: Timestamp
    next_attempt_at: Timestamp
    status: DeliveryStatus = "pending"
    attempts: int = 0
    first_failure_at: Timestamp | None = None
    delivered_at: Timestamp | None = None
    last_error: str = ""
    # The stored row's version when this was read (0: not stored yet). A write of the delivery
    # lands only if the row is still at it, and leaves it at version + 1; otherwise `StaleWrite`.
    version: int = 0


@dataclass(frozen=True, slots=True)
class WebhookAttempt:
    """One try of a delivery: what the endpoint answered (or why it could not be reached)."""

    delivery_id: str
    n: int  # 1, 2, …: unique per delivery
    at: Timestamp
    status_code: int | None
    latency_ms: int
    response_excerpt: str = ""  # at most 1 KB
    error: str = ""


@dataclass(frozen=True, slots=True)
class WebhookChanges:
    """The webhook part of a store commit: endpoints upserted by id; deliveries written at the
    version they carry (0: inserted, the id must be new; else updated only if the stored row is
    still at that version, or the whole commit is a `StaleWrite`); attempts inserted unless
    (delivery, n) exists."""

    endpoints: tuple[WebhookEndpoint, ...] = ()
    deliveries: tuple[WebhookDelivery, ...] = ()
    attempts: tuple[WebhookAttempt, ...] = field(default_factory=tuple)

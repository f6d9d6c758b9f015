"""Webhook records of the store: endpoints, the delivery outbox, and every attempt.

Deliveries are the outbox of events to endpoints: the store writes one per matching endpoint in
the same transaction as the event (see `fan_out`), so no committed event can be lost to a crash
before it was queued. A delivery stays `pending` until an endpoint answered 2xx; the schedule of
the next try is data (`next_attempt_at`), so a restarted server picks it up where it was.

Deliveries are written like instances, at the version they were read: the worker's outcome of an
attempt and a user's replay both read-modify-write the same row, and the one that writes second
must see that it lost (`StaleWrite`) rather than silently undo the other's write.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from lowcostgpu.ports.records import DeliveryStatus as DeliveryStatus
from lowcostgpu.ports.records import EndpointStatus as EndpointStatus
from lowcostgpu.ports.records import EventRecord as EventRecord
from lowcostgpu.ports.records import WebhookAttempt as WebhookAttempt
from lowcostgpu.ports.records import WebhookChanges as WebhookChanges
from lowcostgpu.ports.records import WebhookDelivery as WebhookDelivery
from lowcostgpu.ports.records import WebhookEndpoint as WebhookEndpoint


def event_payload(e: EventRecord, seq: int) -> dict[str, Any]:
    """The JSON body of an event's webhook (Standard Webhooks: `type`, `timestamp`, `data`)."""
    return {
        "type": f"{e.object_kind}.{e.reason}",
        "timestamp": e.at,
        "data": {
            "seq": seq,
            "at": e.at,
            "type": str(e.type),
            "reason": str(e.reason),
            "object_kind": e.object_kind,
            "object_id": e.object_id,
            "message": e.message,
            "data": dict(e.data),
        },
    }


def fan_out(
    endpoints: list[WebhookEndpoint], event: EventRecord, seq: int
) -> list[WebhookDelivery]:
    """The deliveries a newly stored event makes: one per endpoint of its account that wants it.

    Disabled endpoints get them too: re-enabling one delivers what it missed, in order.
    """
    return [
        WebhookDelivery(
            id=f"{ep.id}.{seq}",
            endpoint_id=ep.id,
            account_id=ep.account_id,
            message_id=event.key,
            seq=seq,
            payload=event_payload(event, seq),
            created_at=event.at,
            next_attempt_at=event.at,
        )
        for ep in endpoints
        if ep.account_id == event.account_id
        and ep.status != "deleted"
        and (not ep.reasons or str(event.reason) in ep.reasons)
    ]


@dataclass(frozen=True, slots=True)
class SendResult:
    """What one POST to an endpoint came to; `status_code` None: no answer (refused, timeout)."""

    status_code: int | None
    latency_ms: int
    response_excerpt: str = ""
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300


class WebhookSender(Protocol):
    """Signs and posts webhook messages (Standard Webhooks), refusing addresses it must not call."""

    def check_url(self, url: str) -> None:
        """`InvalidRequest` for a URL that is not http(s) or resolves to a refused range."""
        ...

    def send(
        self, url: str, secret: str, message_id: str, timestamp: int, body: str
    ) -> SendResult: ...

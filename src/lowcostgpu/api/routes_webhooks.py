"""Webhooks: endpoints of the caller's account, their deliveries, test, replay, enable.

The secret is in the answer to `POST /v1/webhooks` only (shown once); no other answer carries it.
An endpoint of another account is a 404 like one that never existed.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field

from lowcostgpu.api.context import AccountId
from lowcostgpu.app.webhooks import Webhooks
from lowcostgpu.domain import errors
from lowcostgpu.ports.webhooks import WebhookAttempt, WebhookDelivery, WebhookEndpoint

router = APIRouter(prefix="/v1", tags=["webhooks"])


def _service(request: Request) -> Webhooks:
    service: Webhooks | None = getattr(request.app.state, "webhooks", None)
    if service is None:
        raise errors.Unavailable("webhooks are not served here", hint="use `lowcostgpu serve`")
    return service


class WebhookIn(BaseModel):
    url: str = Field(description="where events are POSTed (https://…)")
    reasons: list[str] = Field(default=[], description="only these reasons; empty: every event")


class WebhookOut(BaseModel):
    id: str
    url: str
    reasons: list[str]
    status: str
    disabled_reason: str
    created_at: int

    @classmethod
    def of(cls, e: WebhookEndpoint) -> WebhookOut:
        return cls(
            id=e.id,
            url=e.url,
            reasons=list(e.reasons),
            status=e.status,
            disabled_reason=e.disabled_reason,
            created_at=e.created_at,
        )


class CreatedWebhook(WebhookOut):
    secret: str = Field(description="shown once: verify signatures with it")


class AttemptOut(BaseModel):
    n: int
    at: int
    status_code: int | None
    latency_ms: int
    response_excerpt: str
    error: str

    @classmethod
    def of(cls, a: WebhookAttempt) -> AttemptOut:
        return cls(
            n=a.n,
            at=a.at,
            status_code=a.status_code,
            latency_ms=a.latency_ms,
            response_excerpt=a.response_excerpt,
            error=a.error,
        )


class DeliveryOut(BaseModel):
    id: str
    message_id: str
    seq: int
    status: str
    attempts: int
    next_attempt_at: int
    delivered_at: int | None
    last_error: str
    payload: dict[str, Any]
    tries: list[AttemptOut]

    @classmethod
    def of(cls, d: WebhookDelivery, tries: list[WebhookAttempt]) -> DeliveryOut:
        return cls(
            id=d.id,
            message_id=d.message_id,
            seq=d.seq,
            status=d.status,
            attempts=d.attempts,
            next_attempt_at=d.next_attempt_at,
            delivered_at=d.delivered_at,
            last_error=d.last_error,
            payload=dict(d.payload),
            tries=[AttemptOut.of(a) for a in tries],
        )


@router.post("/webhooks", status_code=201)
def create(request: Request, account_id: AccountId, body: WebhookIn) -> CreatedWebhook:
    """A new endpoint; its signing secret is in this answer only."""
    e = _service(request).create(account_id, body.url, tuple(body.reasons))
    return CreatedWebhook(**WebhookOut.of(e).model_dump(), secret=e.secret)


@router.get("/webhooks")
def listing(request: Request, account_id: AccountId) -> list[WebhookOut]:
    return [WebhookOut.of(e) for e in _service(request).store.webhook_endpoints(account_id)]


@router.delete("/webhooks/{webhook_id}")
def delete(request: Request, account_id: AccountId, webhook_id: str) -> WebhookOut:
    return WebhookOut.of(_service(request).delete(account_id, webhook_id))


@router.post("/webhooks/{webhook_id}/enable")
def enable(request: Request, account_id: AccountId, webhook_id: str) -> WebhookOut:
    """Enable a disabled endpoint: what it missed goes out now, in order."""
    return WebhookOut.of(_service(request).enable(account_id, webhook_id))


@router.post("/webhooks/{webhook_id}/test", status_code=202)
def test(request: Request, account_id: AccountId, webhook_id: str) -> DeliveryOut:
    """Queue a `webhook.test` message ahead of the endpoint's queue."""
    return DeliveryOut.of(_service(request).test(account_id, webhook_id), [])


@router.get("/webhooks/{webhook_id}/deliveries")
def deliveries(request: Request, account_id: AccountId, webhook_id: str) -> list[DeliveryOut]:
    """Every delivery, in the order they go out, with every attempt."""
    service = _service(request)
    found = service.deliveries(account_id, webhook_id)
    return [DeliveryOut.of(d, service.store.webhook_attempts(d.id)) for d in found]


@router.post("/webhooks/{webhook_id}/deliveries/{delivery_id}/replay", status_code=202)
def replay(
    request: Request, account_id: AccountId, webhook_id: str, delivery_id: str
) -> DeliveryOut:
    d = _service(request).replay(account_id, webhook_id, delivery_id)
    return DeliveryOut.of(d, [])

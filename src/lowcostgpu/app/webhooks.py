"""Webhooks: endpoints per account, and the worker that empties the delivery outbox.

The store writes a pending delivery per matching endpoint in the same transaction as each event,
so the worker only has to carry them out: per endpoint, strictly in order (the next delivery is
not sent before the previous one got a 2xx), at least once (a delivery is marked delivered only
after the answer; one in flight when the server died is still pending after the restart), with
exponential backoff and jitter stored as `next_attempt_at`. An endpoint failing for longer than
`disable_after_s` is disabled with a `WebhookDisabled` event; enabling it resumes its backlog.

A delivery has two writers: the worker (an attempt's outcome) and the user (replay, enable), and
both read, decide, then write. Every such write carries the version it read, so the second of two
overlapping writes gets `StaleWrite` instead of undoing the first: the user's is decided again on
what is stored now; the worker's, for an attempt that was in flight while a replay landed, leaves
the delivery as the replay wrote it (pending, due now: sent again) and only records the attempt.
"""

from __future__ import annotations

import base64
import json
import logging
import random
import secrets
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TypeVar

from lowcostgpu.domain import errors
from lowcostgpu.domain.events import EventType, Reason, event_type_of, iso_utc
from lowcostgpu.ports.clock import Clock
from lowcostgpu.ports.store import EventRecord, Store
from lowcostgpu.ports.store_records import Commit
from lowcostgpu.ports.webhooks import (
    SendResult,
    WebhookAttempt,
    WebhookChanges,
    WebhookDelivery,
    WebhookEndpoint,
    WebhookSender,
)

log = logging.getLogger(__name__)

T = TypeVar("T")
# How often a read-modify-write of a delivery is tried: each `StaleWrite` means another write of
# it landed in between (there are two writers, the worker and the user), so a few are plenty.
_TRIES = 5


@dataclass(frozen=True, slots=True)
class WebhookPolicy:
    """Retry schedule: first_backoff_s · 2^(n-1), capped, ±jitter; disable after a long outage."""

    first_backoff_s: float = 30.0
    max_backoff_s: float = 3600.0
    jitter: float = 0.2
    disable_after_s: int = 24 * 3600
    poll_s: float = 0.5  # how often the worker looks for due deliveries
    timeout_s: float = 5.0  # one send, connect to last byte read: a slow endpoint's cost
    workers: int = 16  # endpoints served at once (each strictly in order, one send in flight)
    per_account_workers: int = 4  # of those, at most this many for one account's endpoints

    def check(self) -> None:
        """`ConfigError` for a schedule the worker cannot keep (checked when a server starts)."""
        if not (0 < self.first_backoff_s <= self.max_backoff_s):
            raise errors.ConfigError(
                f"webhook backoff {self.first_backoff_s:g} s must be above 0 and at most "
                f"{self.max_backoff_s:g} s",
                hint="e.g. --webhook-backoff-s 30",
            )
        if not (self.timeout_s > 0 and self.poll_s > 0):
            raise errors.ConfigError(
                f"webhook timeout {self.timeout_s:g} s and poll interval {self.poll_s:g} s "
                "must be above 0 s",
                hint="the defaults are 5 s and 0.5 s",
            )
        if not (1 <= self.per_account_workers <= self.workers):
            raise errors.ConfigError(
                f"webhook workers: {self.per_account_workers} per account of {self.workers} "
                "must be at least 1 and at most the total",
                hint="the defaults are 4 of 16",
            )

    def backoff_s(self, attempts: int, rng: random.Random) -> int:
        doubled: float = self.first_backoff_s * 2.0 ** max(0, attempts - 1)
        base = min(self.max_backoff_s, doubled)
        return max(1, round(base * (1 + rng.uniform(-self.jitter, self.jitter))))


def new_secret() -> str:
    return "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()


class Webhooks:
    def __init__(
        self,
        store: Store,
        sender: WebhookSender,
        clock: Clock,
        policy: WebhookPolicy | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.store, self.sender, self.clock = store, sender, clock
        self.policy = policy or WebhookPolicy()
        self.rng = rng or random.Random()

    # --- endpoints --------------------------------------------------------------------------

    def create(self, account_id: str, url: str, reasons: tuple[str, ...]) -> WebhookEndpoint:
        self.sender.check_url(url)
        unknown = sorted(set(reasons) - {str(r) for r in Reason})
        if unknown:
            raise errors.InvalidRequest(
                f"unknown event reason(s) {', '.join(unknown)}",
                hint="one of: " + ", ".join(sorted(str(r) for r in Reason)),
            )
        endpoint = WebhookEndpoint(
            id="wh-" + secrets.token_hex(6),
            account_id=account_id,
            url=url,
            secret=new_secret(),
            created_at=self.clock.now(),
            reasons=tuple(sorted(set(reasons))),
        )
        self.store.commit(Commit(webhooks=WebhookChanges(endpoints=(endpoint,))))
        return endpoint

    def owned(self, account_id: str, endpoint_id: str) -> WebhookEndpoint:
        for e in self.store.webhook_endpoints(account_id):
            if e.id == endpoint_id:
                return e
        raise errors.NotFound(f"no webhook {endpoint_id}", hint="`lowcostgpu webhooks ls`")

    def delete(self, account_id: str, endpoint_id: str) -> WebhookEndpoint:
        gone = replace(self.owned(account_id, endpoint_id), status="deleted")
        self.store.commit(Commit(webhooks=WebhookChanges(endpoints=(gone,))))
        return gone

    def enable(self, account_id: str, endpoint_id: str) -> WebhookEndpoint:
        """Enable again: its backlog (kept while disabled) goes out now, in order."""
        return _retried(lambda: self._enable(account_id, endpoint_id))

    def _enable(self, account_id: str, endpoint_id: str) -> WebhookEndpoint:
        endpoint = replace(
            self.owned(account_id, endpoint_id), status="enabled", disabled_reason=""
        )
        now = self.clock.now()
        pending = self.store.webhook_deliveries(endpoint_id=endpoint_id, pending_only=True)
        due = tuple(replace(d, next_attempt_at=now, first_failure_at=None) for d in pending[:1])
        event = _endpoint_event(
            endpoint,
            Reason.WEBHOOK_ENABLED,
            now,
            "webhook enabled: undelivered events are sent now",
        )
        changes = WebhookChanges(endpoints=(endpoint,), deliveries=due)
        self.store.commit(Commit(webhooks=changes, events=[event]))
        return endpoint

    def test(self, account_id: str, endpoint_id: str) -> WebhookDelivery:
        """A `webhook.test` message, sent ahead of the endpoint's queue."""
        endpoint = self.owned(account_id, endpoint_id)
        now, token = self.clock.now(), secrets.token_hex(6)
        payload = {"type": "webhook.test", "timestamp": now, "data": {"endpoint": endpoint.id}}
        delivery = WebhookDelivery(
            f"{endpoint.id}.test-{token}", endpoint.id, account_id, f"msg_test_{token}", 0,
            payload, now, now,
        )  # fmt: skip
        self.store.commit(Commit(webhooks=WebhookChanges(deliveries=(delivery,))))
        return delivery

    def deliveries(self, account_id: str, endpoint_id: str) -> list[WebhookDelivery]:
        return self.store.webhook_deliveries(endpoint_id=self.owned(account_id, endpoint_id).id)

    def replay(self, account_id: str, endpoint_id: str, delivery_id: str) -> WebhookDelivery:
        """Send a delivery again (delivered or not), at its place in the endpoint's order.

        Written at the version read: should the worker write the delivery in between (the
        outcome of an attempt), it is read again and replayed on top of that, and should the
        replay land while an attempt is in flight, the worker keeps it (see `_record`).
        """
        return _retried(lambda: self._replay(account_id, endpoint_id, delivery_id))

    def _replay(self, account_id: str, endpoint_id: str, delivery_id: str) -> WebhookDelivery:
        endpoint = self.owned(account_id, endpoint_id)
        missing = errors.NotFound(
            f"no delivery {delivery_id} of webhook {endpoint_id}",
            hint=f"`lowcostgpu webhooks deliveries {endpoint_id}` lists them",
        )
        try:
            d = self.store.webhook_delivery(delivery_id)
        except errors.NotFound:
            raise missing from None
        if d.endpoint_id != endpoint.id:
            raise missing
        again = replace(d, status="pending", next_attempt_at=self.clock.now())
        self.store.commit(Commit(webhooks=WebhookChanges(deliveries=(again,))))
        return replace(again, version=again.version + 1)

    # --- the worker -------------------------------------------------------------------------

    def deliver_due(self, limit: int = 100) -> int:
        """Carry out what is due, endpoint after endpoint (in order per endpoint); the number of
        attempts made. The served worker (`webhook_pool`) runs endpoints in parallel instead."""
        made = 0
        for endpoint in self.store.webhook_endpoints():
            if made >= limit:
                break
            if endpoint.status == "enabled":
                made += self.deliver_endpoint(endpoint, limit - made)
        return made

    def next_due(self, endpoint: WebhookEndpoint) -> WebhookDelivery | None:
        """The endpoint's next delivery if it is due now (the head of its queue only)."""
        if endpoint.status != "enabled":
            return None
        pending = self.store.webhook_deliveries(endpoint_id=endpoint.id, pending_only=True, limit=1)
        if not pending or pending[0].next_attempt_at > self.clock.now():
            return None
        return pending[0]

    def deliver_endpoint(self, endpoint: WebhookEndpoint, limit: int = 100) -> int:
        """One endpoint's due deliveries, strictly in order, until one fails (it waits for its
        backoff) or none is due; the number of attempts made."""
        made = 0
        while made < limit:
            due = self.next_due(endpoint)
            if due is None:
                break
            made += 1
            endpoint, ok = self._attempt(endpoint, due)
            if not ok:
                break
        return made

    def _send(self, endpoint: WebhookEndpoint, d: WebhookDelivery, now: int) -> SendResult:
        """The sender's answer; whatever it raises is this delivery's failure, recorded on its
        attempt and retried with backoff — it never reaches (and stops) the worker."""
        try:
            body = json.dumps(d.payload, sort_keys=True, separators=(",", ":"))
            return self.sender.send(endpoint.url, endpoint.secret, d.message_id, now, body)
        except Exception as exc:
            log.warning("webhook %s: the send of %s raised %r", endpoint.id, d.id, exc)
            return SendResult(None, 0, error=f"{type(exc).__name__}: {exc}"[:500])

    def _attempt(
        self, endpoint: WebhookEndpoint, d: WebhookDelivery
    ) -> tuple[WebhookEndpoint, bool]:
        now = self.clock.now()
        result = self._send(endpoint, d, now)
        n = d.attempts + 1
        attempt = _attempt_record(d.id, n, self.clock.now(), result)
        if result.ok:
            done = replace(d, status="delivered", attempts=n, delivered_at=attempt.at)
            self._record(done, attempt)
            return endpoint, True
        first = d.first_failure_at if d.first_failure_at is not None else now
        why = result.error or f"HTTP {result.status_code}"
        retry = replace(
            d,
            attempts=n,
            first_failure_at=first,
            last_error=why,
            next_attempt_at=now + self.policy.backoff_s(n, self.rng),
        )
        if now - first < self.policy.disable_after_s:
            self._record(retry, attempt)
            return endpoint, False
        endpoint = replace(endpoint, status="disabled", disabled_reason=why)
        message = (
            f"webhook disabled: deliveries failing since {iso_utc(first)} ({why}); "
            f"`lowcostgpu webhooks enable {endpoint.id}` resumes them, the undelivered first"
        )
        event = _endpoint_event(endpoint, Reason.WEBHOOK_DISABLED, now, message)
        self._record(retry, attempt, endpoint, event)
        return endpoint, False

    def _record(
        self,
        outcome: WebhookDelivery,
        attempt: WebhookAttempt,
        disabled: WebhookEndpoint | None = None,
        event: EventRecord | None = None,
    ) -> None:
        """Write an attempt's outcome at the version its delivery was read before sending.

        `StaleWrite`: the delivery was written while the request was in flight, by a replay
        (or an enable). Writing the outcome anyway would undo that write, and the replay the
        user asked for would never go out. So the delivery stays as that write left it (a replay:
        pending, due now, so it is sent again, in its place in the order) and the attempt is only
        counted and recorded: at least once, at the cost of one extra send, which receivers
        deduplicate by its `webhook-id`. The endpoint is written only to disable it: the worker
        never rewrites what it did not decide (a concurrent delete or enable stays).
        """
        endpoints = () if disabled is None else (disabled,)
        events = [] if event is None else [event]

        def commit(delivery: WebhookDelivery) -> None:
            changes = WebhookChanges(
                endpoints=endpoints, deliveries=(delivery,), attempts=(attempt,)
            )
            self.store.commit(Commit(webhooks=changes, events=events))

        try:
            commit(outcome)
        except errors.StaleWrite:
            log.info(
                "delivery %s was written during attempt %d: kept as written", outcome.id, attempt.n
            )
            _retried(lambda: commit(self._counted(outcome.id, attempt.n)))

    def _counted(self, delivery_id: str, n: int) -> WebhookDelivery:
        """The delivery as stored now, with attempt `n` counted (and nothing else changed)."""
        now = self.store.webhook_delivery(delivery_id)
        return replace(now, attempts=max(now.attempts, n))


def _retried(write: Callable[[], T]) -> T:
    """Run a read-modify-write of a delivery again on `StaleWrite`: it reads anew each time, so it
    decides on what is stored now; the last try's `StaleWrite` goes to the caller."""
    for _ in range(_TRIES - 1):
        try:
            return write()
        except errors.StaleWrite:
            continue
    return write()


def _attempt_record(delivery_id: str, n: int, at: int, r: SendResult) -> WebhookAttempt:
    return WebhookAttempt(
        delivery_id, n, at, r.status_code, r.latency_ms, r.response_excerpt[:1024], r.error
    )


def _endpoint_event(ep: WebhookEndpoint, reason: Reason, at: int, message: str) -> EventRecord:
    return EventRecord(
        key=f"{ep.id}.{reason}.{at}.{secrets.token_hex(4)}",
        at=at,
        account_id=ep.account_id,
        object_kind="webhook",
        object_id=ep.id,
        type=event_type_of(reason) if reason else EventType.NORMAL,
        reason=reason,
        message=message,
        data={"url": ep.url, "disabled_reason": ep.disabled_reason},
    )

"""The served webhook worker: endpoints in parallel, each endpoint strictly in order.

Deliveries to one endpoint wait for each other (event n+1 is not sent before n got its 2xx), but
deliveries to different endpoints must not: one sequential worker let three hanging endpoints of
one tenant delay another tenant's `Preempted` notice by 32.7 s. So a dispatcher looks for
endpoints with a delivery due and hands each to a thread of its own, with at most one thread per
endpoint (the order), at most `workers` threads in all (bounded), and at most
`per_account_workers` for one account's endpoints, so no tenant can take every thread however
many hanging endpoints it creates. A send is bounded by the sender's timeout, so a slow endpoint
costs its own thread a few seconds and nobody else anything.

The threads are daemons: a server stopping does not wait for a send in flight (that delivery is
still pending in the store and goes out again after the restart: at least once).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from lowcostgpu.app.webhooks import Webhooks
from lowcostgpu.ports.webhooks import WebhookEndpoint

log = logging.getLogger(__name__)
RUN_LIMIT = 100  # attempts one thread makes for its endpoint before handing back
FAILED_RUN_BACKOFF_S = (1.0, 60.0)  # an endpoint whose run raised waits 1 s, 2 s, … 60 s


@dataclass
class _Busy:
    """Which endpoints have a thread now, and the account of each (for the per-account cap)."""

    accounts: dict[str, str] = field(default_factory=dict)  # endpoint id -> account id
    threads: dict[str, threading.Thread] = field(default_factory=dict)
    failures: dict[str, int] = field(default_factory=dict)  # runs in a row that raised
    not_before: dict[str, float] = field(default_factory=dict)  # monotonic

    def of_account(self, account_id: str) -> int:
        return sum(1 for a in self.accounts.values() if a == account_id)


class WebhookPool:
    def __init__(self, hooks: Webhooks, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.hooks = hooks
        self.policy = hooks.policy
        self.monotonic = monotonic
        self.wake = threading.Event()  # a thread finished: look again now, not at the next poll
        self._busy = _Busy()
        self._lock = threading.Lock()
        self._passes = 0

    def run(self, stopping: threading.Event, leading: Callable[[], bool]) -> None:
        """The dispatcher: hand due endpoints to threads while this server leads, until stopped."""
        while not stopping.is_set():
            if leading():
                self.dispatch()
            self.wake.wait(self.policy.poll_s)
            self.wake.clear()

    def stop(self) -> None:
        self.wake.set()

    def in_flight(self) -> int:
        with self._lock:
            return len(self._busy.accounts)

    def dispatch(self) -> int:
        """Start a thread for each endpoint with a delivery due, as the caps allow; how many."""
        endpoints = self.hooks.store.webhook_endpoints()
        if endpoints:  # a different first endpoint each pass: the caps favour no one
            self._passes += 1
            k = self._passes % len(endpoints)
            endpoints = endpoints[k:] + endpoints[:k]
        started = 0
        for endpoint in endpoints:
            if self._full():
                break
            if self._may_start(endpoint) and self.hooks.next_due(endpoint) is not None:
                self._start(endpoint)
                started += 1
        return started

    def _full(self) -> bool:
        with self._lock:
            return len(self._busy.accounts) >= self.policy.workers

    def _may_start(self, endpoint: WebhookEndpoint) -> bool:
        with self._lock:
            busy = self._busy
            return (
                endpoint.status == "enabled"
                and endpoint.id not in busy.accounts
                and busy.not_before.get(endpoint.id, 0.0) <= self.monotonic()
                and busy.of_account(endpoint.account_id) < self.policy.per_account_workers
            )

    def _start(self, endpoint: WebhookEndpoint) -> None:
        thread = threading.Thread(
            target=self._deliver, args=(endpoint,), name=f"webhook-{endpoint.id}", daemon=True
        )
        with self._lock:
            self._busy.accounts[endpoint.id] = endpoint.account_id
            self._busy.threads[endpoint.id] = thread
        thread.start()

    def _deliver(self, endpoint: WebhookEndpoint) -> None:
        """One endpoint's due deliveries; a run that raises (the store, say) is logged and the
        endpoint waits a little before its next run — its deliveries stay pending, nothing else
        is affected."""
        failed = False
        try:
            self.hooks.deliver_endpoint(endpoint, RUN_LIMIT)
        except Exception:
            failed = True
            self._log_failure(endpoint)
        finally:
            self._done(endpoint, failed)

    def _log_failure(self, endpoint: WebhookEndpoint) -> None:
        with self._lock:
            first = self._busy.failures.get(endpoint.id, 0) == 0
        if first:
            log.exception("webhook %s: delivering failed; retrying with backoff", endpoint.id)
        else:
            log.warning("webhook %s: delivering failed again; retrying with backoff", endpoint.id)

    def _done(self, endpoint: WebhookEndpoint, failed: bool) -> None:
        first_s, max_s = FAILED_RUN_BACKOFF_S
        with self._lock:
            busy = self._busy
            busy.accounts.pop(endpoint.id, None)
            busy.threads.pop(endpoint.id, None)
            if failed:
                n = busy.failures[endpoint.id] = busy.failures.get(endpoint.id, 0) + 1
                busy.not_before[endpoint.id] = self.monotonic() + min(max_s, first_s * 2 ** (n - 1))
            else:
                busy.failures.pop(endpoint.id, None)
                busy.not_before.pop(endpoint.id, None)
        self.wake.set()

    def join(self, timeout_s: float) -> None:
        """Wait up to `timeout_s` in all for the sends in flight (a stopping server)."""
        deadline = self.monotonic() + timeout_s
        with self._lock:
            threads = list(self._busy.threads.values())
        for thread in threads:
            thread.join(max(0.0, deadline - self.monotonic()))

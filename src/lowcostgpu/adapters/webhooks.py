"""Posting webhooks: Standard Webhooks signatures (the `standardwebhooks` library), httpx, and
a URL check before every send (`webhook_urls`: no loopback, private or link-local networks unless
the operator allows them). The secret is only ever used to sign: it is not logged.

A send never raises and never takes longer than `timeout_s` once connected: an endpoint is a
stranger's server, and whatever it does (refuse, hang, drip one byte at a time, answer with a
gigabyte) must come back as a `SendResult` the worker records, in bounded time and memory.
httpx's own timeouts bound each connect and each read, not the whole exchange, so a watchdog
shuts the connection's socket down at the deadline (found through httpcore's `trace` hook).
"""

from __future__ import annotations

import socket
import threading
import time
from contextlib import suppress
from datetime import UTC, datetime
from typing import Any

import httpx
from standardwebhooks import Webhook

from lowcostgpu.adapters.webhook_urls import check_url
from lowcostgpu.ports.webhooks import SendResult

EXCERPT_BYTES = 1024
DEFAULT_TIMEOUT_S = 5.0
_CONNECTED = ("connection.connect_tcp.complete", "connection.start_tls.complete")


class HttpWebhookSender:
    def __init__(
        self, *, allow_private: bool = False, timeout_s: float = DEFAULT_TIMEOUT_S
    ) -> None:
        self.allow_private = allow_private
        self.timeout_s = timeout_s

    def check_url(self, url: str) -> None:
        check_url(url, allow_private=self.allow_private)

    def send(self, url: str, secret: str, message_id: str, timestamp: int, body: str) -> SendResult:
        started = time.monotonic()
        watchdog = _Watchdog(self.timeout_s)
        try:
            self.check_url(url)
            at = datetime.fromtimestamp(timestamp, tz=UTC)
            headers = {
                "content-type": "application/json",
                "webhook-id": message_id,
                "webhook-timestamp": str(timestamp),
                "webhook-signature": Webhook(secret).sign(message_id, at, body),
            }
            status, excerpt = self._post(url, body, headers, watchdog)
        except Exception as exc:  # any failure is this delivery's, never the sender's
            why = f"timed out after {self.timeout_s:g} s" if watchdog.fired else _why(exc)
            return SendResult(None, _ms_since(started), error=why[:500])
        finally:
            watchdog.cancel()
        return SendResult(status, _ms_since(started), excerpt)

    def _post(
        self, url: str, body: str, headers: dict[str, str], watchdog: _Watchdog
    ) -> tuple[int, str]:
        """The answer's status and the start of its body (the rest is never read)."""
        extensions = {"trace": watchdog.trace}
        with (
            httpx.Client(timeout=self.timeout_s, follow_redirects=False) as client,
            client.stream("POST", url, content=body, headers=headers, extensions=extensions) as r,
        ):
            chunks, size = [], 0
            for chunk in r.iter_raw():
                chunks.append(chunk)
                size += len(chunk)
                if size >= EXCERPT_BYTES:
                    break
        excerpt = b"".join(chunks)[:EXCERPT_BYTES].decode("utf-8", "replace")
        return r.status_code, excerpt


class _Watchdog:
    """Shuts down the sockets of one send at its deadline, which ends any blocked read."""

    def __init__(self, timeout_s: float) -> None:
        self.fired = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(timeout_s, self._fire)
        self._timer.daemon = True
        self._timer.start()

    def trace(self, name: str, info: dict[str, Any]) -> None:
        if name in _CONNECTED:
            stream = info.get("return_value")
            sock = stream.get_extra_info("socket") if stream is not None else None
            if isinstance(sock, socket.socket):
                with self._lock:
                    self._sockets.append(sock)
                    fired = self.fired
                if fired:  # connected just after the deadline
                    _shut(sock)

    def _fire(self) -> None:
        with self._lock:
            self.fired = True
            found = list(self._sockets)
        for sock in found:
            _shut(sock)

    def cancel(self) -> None:
        self._timer.cancel()


def _shut(sock: socket.socket) -> None:
    with suppress(OSError):  # already closed
        sock.shutdown(socket.SHUT_RDWR)


def _why(exc: Exception) -> str:
    text = str(exc) or type(exc).__name__
    return text if text.startswith(type(exc).__name__) else f"{type(exc).__name__}: {text}"


def _ms_since(started: float) -> int:
    return int((time.monotonic() - started) * 1000)

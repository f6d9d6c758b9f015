"""Posting webhooks: Standard Webhooks signatures (the `standardwebhooks` library), httpx with
timeouts, and no calls into loopback, private or link-local networks unless the operator allows
them (`serve --allow-private-webhooks`), so a customer's URL cannot reach the control plane's
own neighbourhood. The secret is only ever used to sign: it is not logged."""

from __future__ import annotations

import ipaddress
import socket
import time
from datetime import UTC, datetime
from urllib.parse import urlsplit

import httpx
from standardwebhooks import Webhook

from lowcostgpu.domain.errors import InvalidRequest
from lowcostgpu.ports.webhooks import SendResult

EXCERPT_BYTES = 1024


class HttpWebhookSender:
    def __init__(self, *, allow_private: bool = False, timeout_s: float = 10.0) -> None:
        self.allow_private = allow_private
        self.timeout_s = timeout_s

    def check_url(self, url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise InvalidRequest(
                f"webhook URL {url!r} is not an http(s) URL", hint="e.g. https://example.com/hook"
            )
        if self.allow_private:
            return
        try:
            infos = socket.getaddrinfo(parts.hostname, parts.port or 443, proto=socket.IPPROTO_TCP)
        except OSError as exc:
            raise InvalidRequest(
                f"webhook host {parts.hostname!r} does not resolve: {exc.strerror or exc}",
                hint="use a public host name",
            ) from None
        for info in infos:
            address = ipaddress.ip_address(info[4][0])
            if not address.is_global:
                raise InvalidRequest(
                    f"webhook URL {url!r} resolves to {address}, a private/loopback address",
                    hint="use a public URL (the operator may allow private ones: "
                    "serve --allow-private-webhooks)",
                )

    def send(self, url: str, secret: str, message_id: str, timestamp: int, body: str) -> SendResult:
        started = time.monotonic()
        try:
            self.check_url(url)
            at = datetime.fromtimestamp(timestamp, tz=UTC)
            signature = Webhook(secret).sign(message_id, at, body)
            headers = {
                "content-type": "application/json",
                "webhook-id": message_id,
                "webhook-timestamp": str(timestamp),
                "webhook-signature": signature,
            }
            response = httpx.post(
                url, content=body, headers=headers, timeout=self.timeout_s, follow_redirects=False
            )
        except (httpx.HTTPError, InvalidRequest) as exc:
            return SendResult(None, _ms_since(started), error=f"{type(exc).__name__}: {exc}"[:500])
        excerpt = response.content[:EXCERPT_BYTES].decode("utf-8", "replace")
        return SendResult(response.status_code, _ms_since(started), excerpt)


def _ms_since(started: float) -> int:
    return int((time.monotonic() - started) * 1000)

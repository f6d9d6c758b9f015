"""Request bodies capped in size, as a plain ASGI middleware (no Starlette stream wrapping).

A 10 MB body was once read whole into memory and parsed; now any body over `max_bytes` is
refused with 413 and a readable error — at once when `Content-Length` says so, and otherwise
(chunked uploads) as soon as the bytes received pass the cap, before the application sees any
of it. Bodies under the cap are read here and replayed to the application unchanged.
"""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send


class BodyLimit:
    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_bytes:
            await self._refuse(send, f"{declared} bytes")
            return
        messages: list[Message] = []
        size = 0
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":
                break  # http.disconnect: let the application see it
            size += len(message.get("body", b""))
            if size > self.max_bytes:
                await self._refuse(send, f"more than {self.max_bytes} bytes")
                return
            if not message.get("more_body", False):
                break
        await self.app(scope, _replay(messages, receive), send)

    async def _refuse(self, send: Send, size: str) -> None:
        body = json.dumps(
            {
                "code": "payload_too_large",
                "message": f"the request body has {size}; at most {self.max_bytes} are taken",
                "hint": "send less: a launch's command and env, or any body, fit in 1 MiB",
            }
        ).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),  # the rest of the body is not read
        ]
        await send({"type": "http.response.start", "status": 413, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None  # the server refuses a malformed length itself
    return None


def _replay(messages: list[Message], receive: Receive) -> Receive:
    """A `receive` that hands out the buffered messages first, then the server's own."""
    pending = list(messages)

    async def replayed() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replayed

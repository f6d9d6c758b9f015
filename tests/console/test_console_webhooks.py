"""Webhooks from the console: an endpoint added from the form shows its secret once, its
deliveries reach a real receiver, and Replay sends one again (a second attempt, same id)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest
from console_server import Server, sign_in


class _Receiver(BaseHTTPRequestHandler):
    got: ClassVar[list[str]] = []

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.got.append(self.headers["webhook-id"])
        self.send_response(204)
        self.end_headers()

    def log_message(self, *_: Any) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[tuple[str, list[str]]]:
    got: list[str] = []
    handler = type("Handler", (_Receiver,), {"got": got})
    http = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=http.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{http.server_port}/hooks", got
    http.shutdown()


def test_a_webhook_added_in_the_console_delivers_and_replays(
    server: Server, page: Any, receiver: tuple[str, list[str]]
) -> None:
    url, got = receiver
    _, key, client = server.account("hooks")
    sign_in(page, server.url, key)
    page.goto(f"{server.url}/console/#/webhooks")
    page.fill("input[name=url]", url)
    page.fill("input[name=reasons]", "Queued")
    page.click("form button[type=submit]")
    secret = page.locator(".notice .secret")
    secret.wait_for()
    assert secret.inner_text().startswith("whsec_")
    page.locator("#webhooks a").first.click()
    page.wait_for_selector("h1 .badge:text('enabled')")
    with client:
        client.launch(gpu="h100-sxm", type="interruptible", command=["sleep", "30"])
    page.locator("#deliveries .badge:text('delivered')").wait_for()
    assert len(got) == 1
    page.locator("#deliveries button:text('Replay')").click()
    page.locator("#deliveries td", has_text="#2").wait_for()
    assert len(got) == 2 and got[0] == got[1]  # the same webhook-id: receivers deduplicate
    assert "whsec_" not in page.inner_text("main")  # the secret was shown once, on creation

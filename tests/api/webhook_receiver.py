"""A real webhook receiver on 127.0.0.1 for the tests: verifies every request with the
`standardwebhooks` library (not our code), records what it got, and can fail or be down."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from standardwebhooks import Webhook


@dataclass
class Received:
    webhook_id: str
    payload: dict[str, Any]
    at: float = field(default_factory=time.time)  # when it arrived (wall clock, seconds)


@dataclass
class Receiver:
    port: int
    secret: str = ""
    failing: int = 0  # answer 500 to this many requests first
    hold_s: float = 0.0  # keep the next request waiting this long (a delivery "in flight")
    got: list[Received] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)  # signatures that did not verify
    arrived: threading.Event = field(default_factory=threading.Event)  # a request came in
    _server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def start(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                receiver.arrived.set()
                hold, receiver.hold_s = receiver.hold_s, 0.0
                time.sleep(hold)
                try:
                    Webhook(receiver.secret).verify(body, dict(self.headers.items()))
                except Exception as exc:  # any failure to verify is recorded and refused
                    receiver.refused.append(str(exc))
                    self._answer(400, b"bad signature")
                    return
                if receiver.failing > 0:
                    receiver.failing -= 1
                    self._answer(500, b"x" * 5000)
                    return
                receiver.got.append(Received(self.headers["webhook-id"], json.loads(body)))
                self._answer(204, b"")

            def _answer(self, code: int, body: bytes) -> None:
                self.send_response(code)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def seqs(self) -> list[int]:
        return [r.payload["data"]["seq"] for r in self.got if "seq" in r.payload["data"]]

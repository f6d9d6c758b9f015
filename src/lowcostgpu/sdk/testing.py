"""A stand-in metadata endpoint on 127.0.0.1, to test a workload's interruption handling locally.

    with serve_metadata() as endpoint:
        env = {"LOWCOSTGPU_METADATA_URL": endpoint.url, "LOWCOSTGPU_TOKEN": endpoint.token}
        ... start the job, set endpoint.notice = {...}, send SIGTERM, read endpoint.requests ...

It records every request and answers like the contract says; it is a real HTTP server (stdlib).
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class FakeMetadata:
    """State of the endpoint; tests set `notice`, `fleet`, `status_override`, `delay_s`."""

    token: str = "secret-token"
    notice: dict[str, Any] | None = None
    fleet: dict[str, Any] = field(
        default_factory=lambda: {
            "interruptions_per_hour": 0.0,
            "median_time_between_interruptions_s": None,
        }
    )
    status_override: int | None = None
    delay_s: float = 0.0
    requests: list[Recorded] = field(default_factory=list)
    url: str = ""

    def posted(self, path: str) -> list[Any]:
        return [r.body for r in self.requests if r.method == "POST" and r.path == path]


def _handler(state: FakeMetadata) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _answer(self, status: int, payload: Any = None) -> None:
            raw = b"" if payload is None else json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            # A client that gave up (a timeout test) has nobody left to read the answer.
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self.wfile.write(raw)

        def _handle(self, method: str) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            body = json.loads(raw) if raw else None
            state.requests.append(Recorded(method, self.path, dict(self.headers), body))
            if state.delay_s:
                time.sleep(state.delay_s)
            if self.headers.get("Authorization") != f"Bearer {state.token}":
                return self._answer(401, {"error": "bad token"})
            if state.status_override is not None:
                return self._answer(state.status_override, {"error": "forced"})
            self._route(method)

        def _route(self, method: str) -> None:
            if method == "GET" and self.path == "/interruption":
                if state.notice is None:
                    return self._answer(404, {"error": "no notice"})
                return self._answer(200, state.notice)
            if method == "GET" and self.path == "/fleet":
                return self._answer(200, state.fleet)
            if method == "POST" and self.path == "/checkpoint":
                return self._answer(204)
            if method == "POST" and self.path == "/complete":
                return self._answer(200, {"ok": True})
            return self._answer(404, {"error": "unknown path"})

        def do_GET(self) -> None:
            self._handle("GET")

        def do_POST(self) -> None:
            self._handle("POST")

    return Handler


@contextmanager
def serve_metadata() -> Iterator[FakeMetadata]:
    state = FakeMetadata()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    server.daemon_threads = True
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()


class ManualClock:
    """A clock that only moves when told, for `Checkpointer(clock=...)` in tests."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

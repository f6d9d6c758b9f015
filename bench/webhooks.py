"""How long one tenant's webhook waits while another tenant's endpoints hang.

    .venv/bin/python bench/webhooks.py                       # 0, 3 and 12 hanging endpoints
    .venv/bin/python bench/webhooks.py --hanging 3 --repeats 10

A served plane (in this process, on a temporary data directory) with two tenants: "slow" has N
endpoints that take every delivery and never answer; "prompt" has one endpoint that answers at
once. Each repeat queues a test message to N fresh slow endpoints, waits until their sends hang
(at most `per_account_workers` at once: the pool's cap per account), then queues one to the
prompt endpoint and times until it arrives. Before the worker pool, deliveries
went out one endpoint after another and three hanging endpoints delayed another tenant's
`Preempted` by 32.7 s; the figure to watch is that the delay does not grow with N.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from lowcostgpu.api.server import start
from lowcostgpu.app.webhooks import WebhookPolicy
from lowcostgpu.bootstrap.serve import ServeOptions
from lowcostgpu.client.api import Client

ADMIN_KEY = "lcg_admin_bench-webhooks-0123456789"


class Endpoints:
    """`/hang…` never answers (until closed); anything else answers 204 and is timed."""

    def __init__(self) -> None:
        self.closing = threading.Event()
        self.hanging = 0
        self.arrived = threading.Event()
        self._lock = threading.Lock()
        endpoints = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length", 0)))
                if self.path.startswith("/hang"):
                    with endpoints._lock:
                        endpoints.hanging += 1
                    endpoints.closing.wait(600)
                    return
                endpoints.arrived.set()
                self.send_response(204)
                self.end_headers()

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.closing.set()
        self.server.shutdown()


def _wait(what: str, check: Any, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.005)


def measure(hanging: int, repeats: int, timeout_s: float) -> list[float]:
    endpoints = Endpoints()
    with tempfile.TemporaryDirectory() as tmp:
        options = ServeOptions(
            data_dir=Path(tmp) / "data",
            port=_free_port(),
            admin_key=ADMIN_KEY,
            allow_private_webhooks=True,
            webhook_policy=WebhookPolicy(poll_s=0.5, timeout_s=timeout_s),
        )
        running = start(options)
        try:
            with Client(running.url, ADMIN_KEY) as admin:
                slow = Client(running.url, admin.create_account("slow")["api_key"])
                prompt = Client(running.url, admin.create_account("prompt")["api_key"])
            prompt_id = prompt.create_webhook(f"{endpoints.base}/prompt")["id"]
            cap = min(hanging, options.webhook_policy.per_account_workers)
            delays = []
            for r in range(repeats):  # fresh slow endpoints each time: none in its backoff
                slow_ids = [
                    slow.create_webhook(f"{endpoints.base}/hang-{r}-{i}")["id"]
                    for i in range(hanging)
                ]
                before = endpoints.hanging
                for hook in slow_ids:
                    slow.webhook_action(hook, "test")
                _wait("the slow sends", lambda b=before: endpoints.hanging >= b + cap)
                endpoints.arrived.clear()
                asked = time.monotonic()
                prompt.webhook_action(prompt_id, "test")
                _wait("the prompt delivery", endpoints.arrived.is_set)
                delays.append(time.monotonic() - asked)
                for hook in slow_ids:
                    slow.webhook_action(hook, "rm")
                _wait("the slow sends to time out", lambda: running.webhooks.in_flight() == 0)
            return delays
        finally:
            endpoints.close()
            running.stop()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hanging", type=int, nargs="+", default=[0, 3, 12])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--timeout-s", type=float, default=2.0, help="the sender's timeout")
    args = parser.parse_args()
    print("| hanging endpoints (other tenant) | deliveries | median delay | worst delay |")
    print("|---|---|---|---|")
    for n in args.hanging:
        delays = measure(n, args.repeats, args.timeout_s)
        print(f"| {n} | {len(delays)} | {statistics.median(delays):.3f} s | {max(delays):.3f} s |")


if __name__ == "__main__":
    main()

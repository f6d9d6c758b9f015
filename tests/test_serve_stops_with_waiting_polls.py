"""`lowcostgpu serve` stops within seconds of a SIGTERM while long-polls wait (each would hold
the exit for its whole `wait_s` otherwise: 59 s with one `wait_s=60` poll before)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from contextlib import suppress
from pathlib import Path

import httpx

from lowcostgpu.api.server import SHUTDOWN_GRACE_S

ADMIN_KEY = "lcg_admin_test-key-0123456789abcdef"
START_DEADLINE_S = 60.0
STOP_DEADLINE_S = SHUTDOWN_GRACE_S + 12  # far below the polls' 60 s, above the grace


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_sigterm_stops_the_server_within_seconds_while_polls_wait(tmp_path: Path) -> None:
    port = _port()
    url = f"http://127.0.0.1:{port}"
    cli = Path(sys.executable).parent / "lowcostgpu"
    args = ["serve", "--data-dir", str(tmp_path / "data"), "--port", str(port)]
    server = subprocess.Popen([str(cli), *args, "--admin-key", ADMIN_KEY], env=os.environ.copy())
    try:
        deadline = time.monotonic() + START_DEADLINE_S
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/healthz", timeout=2).json().get("leading"):
                    break
            except (httpx.HTTPError, ValueError):
                time.sleep(0.1)
        admin = {"authorization": f"Bearer {ADMIN_KEY}"}
        made = httpx.post(f"{url}/v1/accounts", json={"name": "w"}, headers=admin, timeout=30)
        key = {"authorization": f"Bearer {made.json()['api_key']}"}
        polls = [
            threading.Thread(target=lambda: _ask(f"{url}/v1/events?wait_s=60", key), daemon=True)
            for _ in range(5)
        ]
        for poll in polls:
            poll.start()
        time.sleep(1)  # they reach the server (were they not waiting yet, the exit is quicker)
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=STOP_DEADLINE_S)  # raises TimeoutExpired past the deadline
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


def _ask(url: str, headers: dict[str, str]) -> None:
    with suppress(httpx.HTTPError):  # cut at the stop: a client asks again, from its cursor
        httpx.get(url, headers=headers, timeout=90)

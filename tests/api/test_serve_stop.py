"""`lowcostgpu serve` stops within seconds on SIGTERM or Ctrl-C, however busy, and loses nothing.

A real `serve` process is made busy the ways that used to hold it: a webhook endpoint that takes
deliveries and never answers, long-polls (`GET /v1/events?wait_s=60`) waiting, a workload
running. After the signal it must exit with code 0 before a generous deadline (a wait with a
deadline, not a timing assertion), and a restart on the same data directory must read back
everything that was committed.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from api_server import ADMIN_KEY, FLEET, free_port

from lowcostgpu.client.api import Client
from signal_race import signal_on_every_line

EXIT_DEADLINE_S = 15.0
LONG_POLLS = 4


def until(what: str, check: Callable[[], bool], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _serve(data_dir: Path, fleet: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    argv = [str(Path(sys.executable).parent / "lowcostgpu"), "serve", "--data-dir", str(data_dir)]
    argv += ["--fleet", str(fleet), "--port", str(port), "--admin-key", ADMIN_KEY]
    argv += ["--allow-private-webhooks"]
    with log.open("ab") as out:
        server = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"

    def leading() -> bool:
        assert server.poll() is None, log.read_text()
        try:
            return bool(httpx.get(f"{url}/healthz", timeout=1).json().get("leading"))
        except (httpx.HTTPError, ValueError):
            return False

    until("the server to lead", leading)
    return server


class Silent:
    """An endpoint that takes every delivery and never answers (until the test ends)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.arrived = threading.Event()
        silent = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                silent.arrived.set()
                silent.release.wait(120)

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def stop(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


def _long_polls(url: str, key: str, after: int) -> list[threading.Thread]:
    def poll() -> None:
        with suppress(httpx.HTTPError):  # cut by the stop: expected
            httpx.get(
                f"{url}/v1/events",
                params={"after": after, "wait_s": 60},
                headers={"authorization": f"Bearer {key}"},
                timeout=90,
            )

    threads = [threading.Thread(target=poll, daemon=True) for _ in range(LONG_POLLS)]
    for t in threads:
        t.start()
    return threads


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "Ctrl-C"])
def test_a_busy_server_stops_within_seconds_and_keeps_what_it_committed(
    tmp_path: Path, sig: signal.Signals
) -> None:
    (tmp_path / "fleet.toml").write_text(FLEET)
    data, fleet, log = tmp_path / "data", tmp_path / "fleet.toml", tmp_path / "serve.log"
    port, silent = free_port(), Silent()
    url = f"http://127.0.0.1:{port}"
    server = _serve(data, fleet, port, log)
    try:
        with Client(url, ADMIN_KEY) as admin:
            account = admin.create_account("busy")
            admin.topup(account["id"], "10.00")
        client = Client(url, account["api_key"])
        hook = client.create_webhook(silent.url)
        client.webhook_action(hook["id"], "test")
        until("a delivery to hang", silent.arrived.is_set)
        launched = client.launch(gpu="a100-sxm4", type="interruptible", command=["sleep", "600"])
        until("the workload to run", lambda: client.instance(launched["id"])["status"] == "running")
        events = client.events(0, 1000)
        client_deliveries = client.deliveries(hook["id"])
        polls = _long_polls(url, account["api_key"], max(e["seq"] or 0 for e in events))
        time.sleep(1)  # let the long-polls reach the server (they wait 60 s there)
        asked_at = time.monotonic()
        server.send_signal(sig)
        try:
            code = server.wait(timeout=EXIT_DEADLINE_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"serve still running {EXIT_DEADLINE_S} s after {sig.name}")
        print(f"{sig.name} to exit, busy: {time.monotonic() - asked_at:.2f} s")
        assert code == 0, log.read_text()
        assert "Traceback" not in log.read_text(), log.read_text()
        for t in polls:  # each long-poll was answered or cut, none left hanging
            t.join(5)
            assert not t.is_alive()
        server = _serve(data, fleet, port, log)
        again = Client(url, account["api_key"])
        assert again.instance(launched["id"])["status"] == "running"  # adopted, not lost
        assert [h["id"] for h in again.webhooks()] == [hook["id"]]
        sent = again.deliveries(hook["id"])  # the test message, whose send the stop cut, first
        assert sent[0]["message_id"].startswith("msg_test_") and sent[0]["status"] == "pending"
        assert {d["id"] for d in client_deliveries} <= {d["id"] for d in sent}  # all kept
        seen = {e["seq"] for e in again.events(0, 1000)}
        assert {e["seq"] for e in events} <= seen
        again.stop(launched["id"])
        until("the workload to stop", lambda: again.instance(launched["id"])["status"] != "running")
    finally:
        silent.stop()
        server.kill()
        server.wait()


def test_a_stop_signal_on_any_line_of_the_main_threads_wait_is_seen_and_never_hangs() -> None:
    """The main thread waits on the stop Event between its checks; a handler that set it there
    could wait on the Event's own lock, held by the thread it interrupted: `serve` would ignore
    SIGTERM until SIGKILL. The signal lands on every line of that wait in turn."""
    result = signal_on_every_line(
        """
        from lowcostgpu.api.server import _stop_signals
        for k in range(1, 60):
            with _stop_signals() as asked:
                signal_at_line(k, asked.wait, asked.wait)
        """
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "all woke"

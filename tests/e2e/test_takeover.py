"""A second server takes the lead in the middle of a drain: the drain ends as promised.

Two `lowcostgpu serve` on one store and one data directory: the first leads, the second stands
by. An on-demand launch reclaims an interruptible workload that ignores SIGTERM, and the leader
is SIGKILLed during the grace period. The standby takes the lead, loads the live state (the
draining instance and its deadline are in it), SIGKILLs the workload at the deadline — not
before — requeues it, and starts the on-demand instance that waited for its GPUs.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from pathlib import Path
from typing import Any

import httpx
from test_crash_safety import Server, check_invariants

from waiting import wait_until

GRACE_S = 15  # the leader is killed inside it: long enough for a loaded machine to get there
STUBBORN = "import signal, time; signal.signal(signal.SIGTERM, lambda *a: None); time.sleep(600)"


def _status(server: Server, instance_id: str) -> str:
    return str(server.call("GET", f"/v1/instances/{instance_id}")["status"])


def _launch(server: Server, kind: str, command: list[str]) -> str:
    body = {"gpu": "a100-sxm4", "type": kind, "gpus": 4, "command": command}
    if kind == "interruptible":
        body["grace_period_s"] = GRACE_S
    return str(server.call("POST", "/v1/instances", json=body)["id"])


def _events(server: Server, instance_id: str) -> list[dict[str, Any]]:
    return list(server.call("GET", f"/v1/instances/{instance_id}/events"))


def _processes_of(instance_ids: set[str]) -> list[int]:
    """Live processes whose workload environment names one of these instances (not the
    sandbox's own bwrap processes, which carry that environment too)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if os.readlink(entry / "exe").endswith("/bwrap"):
                continue
            environ = (entry / "environ").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        names = {
            e.split(b"=", 1)[1].decode()
            for e in environ
            if e.startswith(b"LOWCOSTGPU_INSTANCE_ID=")
        }
        if state != "Z" and names & instance_ids:
            found.append(int(entry.name))
    return found


def test_a_standby_takes_the_lead_mid_drain_and_keeps_the_deadline(
    tmp_path: Path, store_url: str
) -> None:
    first, second = Server(tmp_path, store_url), Server(tmp_path, store_url)
    second.starts = 100  # its own log files
    victim = urgent = ""
    try:
        first.start()
        first.sign_up()
        second.start(lead=False)
        second.headers, second.account_id = first.headers, first.account_id
        victim = _launch(first, "interruptible", [sys.executable, "-c", STUBBORN])
        wait_until(lambda: _status(first, victim) == "running", what="the victim runs")
        urgent = _launch(first, "on-demand", [sys.executable, "-c", "import time; time.sleep(600)"])
        assert _status(first, victim) == "interrupting"
        first.kill()  # mid-drain: SIGTERM sent, the deadline GRACE_S away
        wait_until(
            lambda: httpx.get(f"{second.url}/healthz", timeout=30).json()["leading"],
            what="the standby leads",
        )
        wait_until(lambda: _status(second, urgent) == "running", what="the on-demand one runs")
        assert _status(second, victim) in ("queued", "starting", "running")
        reasons = {e["reason"]: e for e in _events(second, victim)}
        preempted, killed = reasons["Preempted"], reasons["Killed"]
        assert killed["at"] >= preempted["data"]["deadline"]  # the grace was kept in full
        if _status(second, victim) == "queued":  # its stubborn process is gone, not left behind
            wait_until(lambda: not _processes_of({victim}), what="the victim's process gone")
        check_invariants(second)
    finally:
        for server in (first, second):
            if server.proc is not None and server.proc.poll() is None:
                server.kill()
        for pid in _processes_of({victim, urgent} - {""}):
            with contextlib.suppress(ProcessLookupError):  # gone with its sandbox already
                os.kill(pid, signal.SIGKILL)

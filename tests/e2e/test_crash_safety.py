"""Crash safety: `lowcostgpu serve` is SIGKILLed at random moments while it reclaims, drains and
requeues real workloads; after every restart nothing is lost, doubled or left behind.

Runs against SQLite and PostgreSQL. The number of kill/restart rounds is
`LOWCOSTGPU_CRASH_ROUNDS` (default 8 per store); what held is written in docs/reliability.md.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from functools import partial
from itertools import combinations, pairwise
from pathlib import Path
from typing import Any

import httpx
import pytest

from waiting import wait_until

HERE = Path(__file__).parent
WORKLOAD = HERE / "ckpt_workload.py"
ROUNDS = int(os.environ.get("LOWCOSTGPU_CRASH_ROUNDS", "8"))
STEPS = 300  # 15 s of work per instance at 0.05 s a step
METERING_INTERVAL_S = 60
MIN_RUNTIME_S = 2
ADMIN_KEY = "lcg_admin_crash-safety-0123456789"
HOLDING = {"starting", "running", "interrupting", "stopping"}
FLEET = """
[[region]]
name = "eu-west"
  [[region.hosts]]
  name = "gpu-box"
  gpu_type = "a100-sxm4"
  gpus = 4
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    def __init__(self, tmp: Path, db: str) -> None:
        self.tmp, self.db, self.port = tmp, db, free_port()
        self.data = tmp / "data"
        (tmp / "fleet.toml").write_text(FLEET)
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = f"http://127.0.0.1:{self.port}"
        self.starts = 0
        self.account_id = ""
        self.headers: dict[str, str] = {}

    def start(self, *, lead: bool = True) -> None:
        """Start `serve` and wait until it answers and (with `lead`) runs the loop."""
        self.starts += 1
        log = (self.tmp / f"server-{self.starts}.log").open("wb")
        argv = [sys.executable, "-m", "lowcostgpu", "serve", "--data-dir", str(self.data)]
        argv += ["--db", self.db, "--fleet", str(self.tmp / "fleet.toml")]
        argv += ["--port", str(self.port), "--metering-interval-s", str(METERING_INTERVAL_S)]
        argv += ["--admin-key", ADMIN_KEY]
        # A restart after an interruption is never reclaimed inside its minimum runtime (the
        # default policy's rule): a short one, so that on-demand work reclaims again and again
        # within the test's minutes.
        argv += ["--min-runtime-s", str(MIN_RUNTIME_S)]
        self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).json()["leading"] or not lead:
                    return
            except (httpx.HTTPError, ValueError):
                pass
            assert self.proc.poll() is None, (self.tmp / f"server-{self.starts}.log").read_text()
            time.sleep(0.1)
        raise AssertionError("the server did not start and take the lead within 60 s")

    def sign_up(self) -> None:
        """An account with credit, whose key every later call uses."""
        admin = {"authorization": f"Bearer {ADMIN_KEY}"}
        created = self.call("POST", "/v1/accounts", json={"name": "crash"}, headers=admin)
        self.account_id = created["id"]
        self.call(
            "POST", f"/v1/accounts/{self.account_id}/topup", json={"amount": "100"}, headers=admin
        )
        self.headers = {"authorization": f"Bearer {created['api_key']}"}

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def call(self, method: str, path: str, **kw: Any) -> Any:
        kw.setdefault("headers", self.headers)
        response = httpx.request(method, f"{self.url}{path}", timeout=30, **kw)
        assert response.status_code < 500, response.text
        return response.json() if response.content else None


def workload_processes(server: Server) -> dict[str, list[int]]:
    """Live workload processes of `server`'s test by instance id, read from /proc (not the
    sandbox's own bwrap processes, which carry the workload's environment too).

    A workload is known by its program and by the test's folder among its arguments (`launch`):
    a test running beside this one (pytest-xdist) has workloads of the same program."""
    found: dict[str, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if os.readlink(entry / "exe").endswith("/bwrap"):
                continue
            argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
            if str(WORKLOAD) not in argv or str(server.tmp) not in argv:
                continue
            environ = (entry / "environ").read_bytes().split(b"\0")
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if stat.rsplit(")", 1)[1].split()[0] == "Z":
            continue
        for item in environ:
            if item.startswith(b"LOWCOSTGPU_INSTANCE_ID="):
                found.setdefault(item.split(b"=", 1)[1].decode(), []).append(int(entry.name))
    return found


def orphans(server: Server) -> list[str]:
    """Instances with a live workload process that neither hold GPUs nor just released them."""
    status = {i["id"]: i["status"] for i in server.call("GET", "/v1/instances")}
    allowed = HOLDING | {"interrupted", "stopped"}
    return [i for i in workload_processes(server) if status.get(i) not in allowed]


def check_invariants(server: Server) -> list[dict[str, Any]]:
    instances: list[dict[str, Any]] = server.call("GET", "/v1/instances")
    holding = [i for i in instances if i["status"] in HOLDING]
    for a, b in combinations(holding, 2):
        if a["host_id"] == b["host_id"] and set(a["gpu_indices"]) & set(b["gpu_indices"]):
            # Only an on-demand start waiting for its draining victim may share GPUs with it.
            pair = {a["status"], b["status"]}
            assert pair in ({"starting", "interrupting"}, {"starting", "stopping"}), (a, b)
    processes = workload_processes(server)
    status = {i["id"]: i["status"] for i in instances}
    for instance_id, pids in processes.items():
        assert len(pids) == 1, f"{instance_id} runs twice: {pids}"
        assert status.get(instance_id) in HOLDING | {"interrupted", "stopped"}, (
            f"orphan workload of {instance_id} ({status.get(instance_id)})"
        )
    return instances


@pytest.fixture
def server(tmp_path: Path, store_url: str) -> Iterator[Server]:
    srv = Server(tmp_path, store_url)
    yield srv
    if srv.proc is not None and srv.proc.poll() is None:
        srv.kill()
    for pids in workload_processes(srv).values():
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):  # gone with its sandbox already
                os.kill(pid, signal.SIGKILL)
    subprocess.run(
        ["sh", "-c", f"grep -F '{tmp_path}' /proc/mounts | cut -d' ' -f2 | xargs -r umount"]
    )


def launch(server: Server, name: str, kind: str, gpus: int) -> str:
    body = {
        "gpu": "a100-sxm4",
        "type": kind,
        "gpus": gpus,
        # The test's folder marks its workloads (`workload_processes`); the program ignores it.
        "command": [sys.executable, str(WORKLOAD), str(STEPS), str(server.tmp)],
        "volume": f"{name}:1GB",
        "env": {"PYTHONPATH": os.pathsep.join(sys.path)},
    }
    created = server.call("POST", "/v1/instances", json=body)
    assert "id" in created, created
    return str(created["id"])


def test_kill_the_server_at_random_moments_and_lose_nothing(server: Server) -> None:
    rng = random.Random(20261130)
    server.start()
    server.sign_up()
    work = [launch(server, f"job{n}", "interruptible", 2) for n in range(3)]
    on_demand: list[str] = []
    for _ in range(ROUNDS):
        active = [
            i for i in on_demand if server.call("GET", f"/v1/instances/{i}")["status"] in HOLDING
        ]
        if active and rng.random() < 0.5:
            server.call("POST", f"/v1/instances/{active[0]}/stop")
        elif not active:
            response = httpx.post(
                f"{server.url}/v1/instances",
                json={
                    "gpu": "a100-sxm4",
                    "type": "on-demand",
                    "gpus": 4,
                    "command": [sys.executable, "-c", "import time; time.sleep(600)"],
                },
                timeout=30,
                headers=server.headers,
            )
            assert response.status_code in (201, 409), response.text
            if response.status_code == 201:
                on_demand.append(response.json()["id"])
        time.sleep(rng.uniform(0.05, 2.5))
        server.kill()
        server.start()
        time.sleep(1.5)  # pacing: the restarted server gets on with the work before the next kill
        # An effect the killed server had committed but not carried out (the SIGKILL of a
        # requeued victim) is carried out at the new leader's first ticks: wait for that, then
        # every invariant must hold.
        wait_until(lambda: not orphans(server), what="the restarted server to end its orphans")
        check_invariants(server)
    for i in on_demand:
        if server.call("GET", f"/v1/instances/{i}")["status"] in HOLDING:
            server.call("POST", f"/v1/instances/{i}/stop")
    finished = _wait_for(server, work, {"succeeded"}, deadline_s=240)
    check_invariants(server)
    _check_resumes_and_meter(server, finished)


def _wait_for(
    server: Server, ids: list[str], statuses: set[str], deadline_s: float
) -> dict[str, dict[str, Any]]:
    def reached() -> dict[str, dict[str, Any]] | None:
        states = {i: server.call("GET", f"/v1/instances/{i}") for i in ids}
        return states if all(s["status"] in statuses for s in states.values()) else None

    return wait_until(reached, deadline_s, f"all of {ids} {statuses}", poll_s=0.5)


def _check_resumes_and_meter(server: Server, finished: dict[str, dict[str, Any]]) -> None:
    runs_of: dict[str, list[dict[str, Any]]] = {}
    for instance_id, inst in finished.items():
        name = inst["volume"].split(":")[0]
        volume = server.data / "volumes" / server.account_id / name
        runs = [json.loads(line) for line in (volume / "runs.jsonl").read_text().splitlines()]
        assert runs[-1]["step"] == STEPS
        for before, after in pairwise(runs):
            assert after["resumed"] == before["step"], (
                "a restart did not resume from the checkpoint"
            )
            assert after["restart"] > before["restart"]
        runs_of[instance_id] = runs
    interrupted_runs = sum(len(runs) - 1 for runs in runs_of.values())
    assert interrupted_runs >= 1, "no work was ever interrupted: the test proved nothing"

    # Metering closes an interval once it has ended: wait until each instance is metered
    # through its last run's end (within a second: the server's clock is read in whole seconds).
    def metered(instance_id: str) -> dict[str, Any] | None:
        usage: dict[str, Any] = server.call("GET", f"/v1/instances/{instance_id}/usage")
        through = usage["metered_through"]
        ended = runs_of[instance_id][-1]["stop"]
        return usage if through is not None and through >= ended - 1 else None

    worst_s = 0.0
    for instance_id, runs in runs_of.items():
        real_s = sum((r["sigterm"] or r["stop"]) - r["start"] for r in runs)
        gpus = finished[instance_id]["gpus"]
        usage = wait_until(
            partial(metered, instance_id),
            3 * METERING_INTERVAL_S,
            f"{instance_id} metered through its end",
            poll_s=1,
        )
        off_s = abs(usage["gpu_seconds"] - gpus * real_s)
        assert off_s <= gpus * METERING_INTERVAL_S, (instance_id, usage, real_s)
        worst_s = max(worst_s, off_s / gpus)
    print(
        f"\ncrash-safety: {ROUNDS} kills, {server.starts} starts, {len(runs_of)} jobs, "
        f"{interrupted_runs} interrupted runs resumed from their checkpoint, "
        f"worst meter error {worst_s:.1f} s per GPU"
    )

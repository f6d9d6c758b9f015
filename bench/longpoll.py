"""Long-polls that cost nothing (issue 16): ordinary requests while 500 long-polls wait.

    .venv/bin/python bench/longpoll.py                  # 500 polls of 5 accounts, 3 event rounds
    .venv/bin/python bench/longpoll.py --polls 100 --requests 200 --json out.json

A real server in this process (SQLite store, reconcile loop leading, local runtime, uvicorn, as
`lowcostgpu serve` builds them) and `--polls` long-polls (`GET /v1/events?wait_s=60`) from a
child process of httpx async clients, spread over `--accounts` accounts (the per-account cap of
waiting polls is `api.longpoll.MAX_WAITING_PER_ACCOUNT`). Figures:

- `ordinary-0`, `ordinary-N`: latency of `GET /v1/instances/{id}` (with an account key), one
  request at a time, before the polls and while all N of them wait; `healthz-N` likewise;
- `event-N`: from just before a store commit of one event per poller account to the moment
  each poll has its answer (in the child: one monotonic clock on Linux), over `--rounds` rounds;
  every poll must get every round's event once, in order (checked in the child); `answered-N`:
  the same up to the server's answer (the route's page is ready), the server's part of it;
- the server process's thread count and RSS while the polls wait.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import suppress
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from lowcostgpu.api import routes_events
from lowcostgpu.api.app import create_app
from lowcostgpu.app.accounts import Accounts
from lowcostgpu.app.launch import LaunchRequest
from lowcostgpu.bootstrap.serve import ServeOptions, build
from lowcostgpu.domain.events import EventType, Reason
from lowcostgpu.ports.store import EventRecord
from lowcostgpu.ports.store_records import Commit

sys.path.insert(0, str(Path(__file__).parent))
from plane_support import free_port, load1, rss_mb

FLEET = """
[[region]]
name = "eu-west"
  [[region.hosts]]
  name = "box"
  gpu_type = "a100-sxm4"
  gpus = 8
"""
WAIT_S = 60


def percentiles(values_s: list[float]) -> dict[str, float]:
    ordered = sorted(values_s)
    if not ordered:
        return {"n": 0}

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(len(ordered) * q))] * 1000, 2)

    return {"n": len(ordered), "p50_ms": at(0.5), "p99_ms": at(0.99), "max_ms": at(1.0)}


def more_files() -> None:
    """Two sockets a poll (both ends) need more descriptors than a default soft limit."""
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


class Server:
    """The served plane in threads of this process; `api` is the app (its watch is read).

    `answered` collects when each waiting poll had its page (monotonic s): its route's wait is
    wrapped, so the server's part of an event's delay is told apart from the clients'."""

    def __init__(self, tmp: Path) -> None:
        self.answered: list[float] = []
        waiting = routes_events._wait

        async def timed(*args: Any) -> Any:
            page = await waiting(*args)
            self.answered.append(time.monotonic())
            return page

        routes_events._wait = timed  # type: ignore[assignment]
        (tmp / "fleet.toml").write_text(FLEET)
        port = free_port()
        options = ServeOptions(data_dir=tmp / "data", fleet=tmp / "fleet.toml", port=port)
        self.wired, self.loop, runtime = build(options)
        self.plane = self.wired.plane
        threading.Thread(target=self.loop.run, name="reconcile-loop", daemon=True).start()
        self.accounts = Accounts(self.plane.store, self.plane.clock, self.plane.ids)
        self.api = create_app(
            self.plane,
            runtime,
            self.wired.tokens,
            lambda: self.loop.leading,
            accounts=self.accounts,
        )
        config = uvicorn.Config(self.api, host="127.0.0.1", port=port, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="uvicorn", daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with suppress(httpx.HTTPError, ValueError):
                if httpx.get(f"{self.url}/healthz", timeout=5).json().get("leading"):
                    return
            time.sleep(0.1)
        raise SystemExit("the server did not start")

    def waiting(self) -> int:
        watch = getattr(self.api.state, "event_watch", None)
        return watch.waiting if watch is not None else 0

    def until_waiting(self, n: int, timeout_s: float = 120) -> None:
        deadline = time.monotonic() + timeout_s
        while self.waiting() < n:
            if time.monotonic() > deadline:
                raise SystemExit(f"only {self.waiting()} of {n} polls wait after {timeout_s} s")
            time.sleep(0.02)

    def stop(self) -> None:
        for report in self.plane.runtime.observe():
            with suppress(Exception):
                self.plane.runtime.kill(report.allocation_id)
        self.server.should_exit = True
        self.loop.stop()
        self.thread.join(timeout=30)


def ordinary(url: str, key: str, path: str, n: int) -> list[float]:
    """Latencies (s) of `n` GETs of `path`, one at a time, on one connection."""
    out = []
    with httpx.Client(base_url=url, headers={"authorization": f"Bearer {key}"}, timeout=60) as c:
        for _ in range(n):
            t = time.perf_counter()
            c.get(path).raise_for_status()
            out.append(time.perf_counter() - t)
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    more_files()
    with tempfile.TemporaryDirectory() as tmp:
        srv = Server(Path(tmp))
        try:
            return measure(srv, args)
        finally:
            srv.stop()


def measure(srv: Server, args: argparse.Namespace) -> dict[str, Any]:
    reader, key = srv.accounts.create_account("bench-reader")
    srv.accounts.topup(reader.id, "100.00")
    launched = srv.plane.launch(
        LaunchRequest(reader.id, "a100-sxm4", "interruptible", command=("sleep", "3600"))
    )
    path = f"/v1/instances/{launched.state.id}"
    result: dict[str, Any] = {"polls": args.polls, "accounts": args.accounts, "load1": load1()}
    result["ordinary-0"] = percentiles(ordinary(srv.url, key, path, args.requests))
    pollers = [srv.accounts.create_account(f"bench-poller-{a}") for a in range(args.accounts)]
    keys = [pollers[i % args.accounts][1] for i in range(args.polls)]
    job = {"url": srv.url, "keys": keys, "after": srv.plane.store.latest_seq()}
    child = subprocess.Popen(
        [sys.executable, __file__, "--pollers-child"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdin is not None and child.stdout is not None
    child.stdin.write(json.dumps({**job, "rounds": args.rounds}))
    child.stdin.close()
    srv.until_waiting(args.polls)
    result["threads"] = threading.active_count()
    result["rss_mb"] = round(rss_mb())
    result[f"ordinary-{args.polls}"] = percentiles(ordinary(srv.url, key, path, args.requests))
    result[f"healthz-{args.polls}"] = percentiles(ordinary(srv.url, key, "/healthz", args.requests))
    result.update(rounds(srv, args, [record.id for record, _ in pollers], child))
    return result


def rounds(
    srv: Server, args: argparse.Namespace, accounts: list[str], child: subprocess.Popen[str]
) -> dict[str, Any]:
    """`--rounds` commits of one event per poller account, each once every poll waits again."""
    assert child.stdout is not None
    starts: list[float] = []
    commits: list[float] = []  # how long each round's commit took (part of the event's delay)
    answered: list[float] = []  # from the commit to the server's answer of each waiting poll
    for r in range(args.rounds):
        while r and (line := child.stdout.readline()).strip() != f"round {r}":  # it is in
            if not line:
                raise SystemExit(f"the pollers ended before round {r}: see their stderr")
        srv.until_waiting(args.polls)  # and every poll waits again
        srv.answered.clear()
        starts.append(time.monotonic())
        events = [
            EventRecord(f"bench-{r}-{a}", 0, a, "instance", "i-bench", EventType.NORMAL,
                        Reason.STARTED, f"round {r}")
            for a in accounts
        ]  # fmt: skip
        srv.plane.store.commit(Commit(events=events))
        commits.append(time.monotonic() - starts[-1])
        deadline = time.monotonic() + 120
        while len(srv.answered) < args.polls and time.monotonic() < deadline:
            time.sleep(0.01)
        answered.extend(at - starts[-1] for at in srv.answered)
    got = json.loads(child.stdout.read().splitlines()[-1])
    child.wait(timeout=60)
    latencies = [at - starts[r] for arrivals in got["arrivals"] for r, at in enumerate(arrivals)]
    return {
        f"event-{args.polls}": percentiles(latencies),
        f"answered-{args.polls}": percentiles(answered),
        "commit": percentiles(commits),
        "problems": got["problems"],
    }


def pollers_child() -> None:
    """The long-polls: each asks from the job's cursor, `rounds` times from its last seq; prints
    when each answer came (monotonic s, per poll and round) and anything out of order."""
    more_files()
    job = json.loads(sys.stdin.read())
    rounds = job["rounds"]
    arrivals: list[list[float]] = [[] for _ in job["keys"]]
    problems: list[str] = []
    told: list[int] = []

    async def poll(c: httpx.AsyncClient, i: int, key: str) -> None:
        after = job["after"]
        headers = {"authorization": f"Bearer {key}"}
        while len(arrivals[i]) < rounds:
            params = {"after": after, "wait_s": WAIT_S}
            try:
                r = await c.get("/v1/events", params=params, headers=headers)
            except httpx.TransportError as exc:  # counted, and asked again as a client would
                problems.append(f"poll {i}: {exc!r} after {len(arrivals[i])} events")
                continue
            if r.status_code != 200:
                problems.append(f"poll {i}: {r.status_code} {r.text[:200]}")
                return
            now = time.monotonic()
            for e in r.json():
                if e["seq"] <= after:
                    problems.append(f"poll {i}: seq {e['seq']} again (after {after})")
                after = e["seq"]
                arrivals[i].append(now)
            done = min(len(a) for a in arrivals)
            if done > len(told):  # every poll has this round's event: the parent may go on
                told.append(done)
                print(f"round {done}", flush=True)

    async def main() -> None:
        # One client (one connection) a poll: httpcore's pool rescans its requests at every
        # response, so 500 polls through one pool took seconds to read their answers.
        clients = [httpx.AsyncClient(base_url=job["url"], timeout=WAIT_S + 30) for _ in job["keys"]]
        try:
            await asyncio.gather(*(poll(clients[i], i, k) for i, k in enumerate(job["keys"])))
        finally:
            await asyncio.gather(*(c.aclose() for c in clients))

    asyncio.run(main())
    short = sum(1 for a in arrivals if len(a) != rounds)
    if short:
        problems.append(f"{short} polls did not get {rounds} events")
    print(json.dumps({"arrivals": arrivals, "problems": problems}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--polls", type=int, default=500)
    parser.add_argument("--accounts", type=int, default=5)
    parser.add_argument("--requests", type=int, default=1000, help="ordinary requests per figure")
    parser.add_argument("--rounds", type=int, default=3, help="events each poll waits for")
    parser.add_argument("--json", type=Path, help="write the figures here too")
    parser.add_argument("--pollers-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.pollers_child:
        pollers_child()
        return
    result = run(args)
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

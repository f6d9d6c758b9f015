"""The served plane (issue 15): decisions through the real ControlPlane on SQLite and PostgreSQL.

    .venv/bin/python bench/plane.py --quick                 # ~1/50 scale, smoke test (< 2 min)
    .venv/bin/python bench/plane.py                         # the issue's scales (slow today)
    .venv/bin/python bench/plane.py --stores sqlite --running 100 --queued 900 --history 0 --http

A fleet of `--hosts` 8-GPU hosts in one pool (eu-west/a100-sxm4, the shipped catalog), seeded
straight into a real `SqlStore` (see bench/plane_support.py) with `--running` running 1-GPU
instances (a fifth on-demand, the rest interruptible) and `--queued` queued interruptible ones,
plus `--history` finished instances of other accounts (half succeeded, half deleted). The
runtime reports like `LocalRuntime` does (`FakeRuntime`, whose workloads exit on SIGTERM like
the templates): every workload at `observe`, and what changed at `changes_since`. The clock is
a `FixedClock` the bench advances (1 s per tick; fixed during a burst of launches) so that
ticks are deterministic and comparable between runs; the idle figure of an empty server uses
the wall clock, as `serve` does.

Figures (one line each; `--json FILE` writes them all):
- `tick`: one `plane.step()` with every running workload reporting (`tick-first`: the first
  tick), as at the loop's full look; `tick-changes`: one with only what changed reported, as
  between full looks (`app.runtime_reports.ReportObserver`);
- `launch-int`: `plane.launch` of a 1-GPU interruptible instance (the fleet is full: queued);
- `launch-od`: `plane.launch` of a 1-GPU on-demand instance that reclaims interruptible work;
- `takeover`: a new process opens the store, builds the plane and makes its first decision
  (its first `tick()`, after `load()` if the plane has one); RSS is that process's;
- `http-launch`: POST /v1/instances from `--clients` concurrent httpx clients (the real API under
  uvicorn, with the reconcile loop leading; its note gives the CPU per launch of the server
  process, without PostgreSQL's own, and of the clients' process, without its start-up, and how
  many launches a store commit carried on average, where the plane has group commit); each
  client's first launch is a warm-up, not timed; `http-launch-metering`: the same while a
  metering pass runs (the clock is moved past the next interval as the timed launches begin:
  what the launches of the minute's busiest second see);
  `http-list`: GET /v1/instances of an account with 10 instances while the others hold
  everything else;
- `idle-empty`, `idle-live`: % of one core the process uses over `--idle-s` of wall time with
  the reconcile loop running and no requests, on an empty store and on the seeded one.

Every figure samples until its count or `--budget-s` is reached, whichever comes first (today's
code is far too slow at the issue's scales: `n` says how many samples there were).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from lowcostgpu.adapters.clock import FixedClock, SystemClock
from lowcostgpu.adapters.fakes import FakeVolumes
from lowcostgpu.adapters.files import load_catalog
from lowcostgpu.adapters.store import SqlStore
from lowcostgpu.api.app import create_app
from lowcostgpu.app.accounts import Accounts
from lowcostgpu.app.launch import LaunchRequest
from lowcostgpu.app.loop import ReconcileLoop
from lowcostgpu.app.plane import ControlPlane, PlaneConfig
from lowcostgpu.bootstrap.wiring import Wired, wire
from lowcostgpu.domain.errors import InsufficientCapacity
from lowcostgpu.domain.status import InstanceStatus
from lowcostgpu.ports.clock import Clock
from plane_support import (
    PG_URL,
    BenchRuntime,
    CountingIds,
    fleet,
    free_port,
    load1,
    peak_rss_mb,
    pg_schema,
    rss_mb,
    seed,
)

SECRET = b"bench-plane-secret-0123456789abcdef"
GPU = "a100-sxm4"
COMMAND = ("python", "train.py")
HEADER = ("figure", "store", "live", "history", "n", "p50_ms", "p99_ms", "per_s", "rss_mb", "load1")


@dataclass
class Figure:
    figure: str
    store: str
    live: int
    history: int
    n: int
    p50_ms: float
    p99_ms: float
    per_s: float
    rss_mb: float
    load1: float
    note: str = ""

    def line(self) -> str:
        cells = [
            f"{self.figure:<20}",
            f"{self.store:<6}",
            f"{self.live:>7}",
            f"{self.history:>8}",
            f"{self.n:>5}",
            f"{self.p50_ms:>9.2f}",
            f"{self.p99_ms:>9.2f}",
            f"{self.per_s:>9.1f}",
            f"{self.rss_mb:>7.0f}",
            f"{self.load1:>5.2f}",
        ]
        return "  ".join(cells) + (f"  {self.note}" if self.note else "")


def header() -> str:
    widths = (20, 6, 7, 8, 5, 9, 9, 9, 7, 5)
    return "  ".join(
        f"{h:<{w}}" if i < 2 else f"{h:>{w}}"
        for i, (h, w) in enumerate(zip(HEADER, widths, strict=True))
    )


def percentile(sorted_s: list[float], q: float) -> float:
    if not sorted_s:
        return float("nan")
    return sorted_s[min(len(sorted_s) - 1, int(len(sorted_s) * q))]


class Exhausted(Exception):
    """Nothing left to sample (no interruptible work left to reclaim)."""


def sample(fn: Callable[[], object], count: int, budget_s: float) -> tuple[list[float], float]:
    """Latencies (s) of up to `count` calls, stopping once `budget_s` is spent; and the wall."""
    out: list[float] = []
    started = time.perf_counter()
    deadline = started + budget_s
    while len(out) < count and (not out or time.perf_counter() < deadline):
        t = time.perf_counter()
        try:
            fn()
        except Exhausted:
            break
        out.append(time.perf_counter() - t)
    return out, time.perf_counter() - started


@dataclass
class Where:
    store: str  # sqlite | pg
    live: int
    history: int


class Report:
    def __init__(self) -> None:
        self.figures: list[Figure] = []

    def add(
        self,
        name: str,
        where: Where,
        lat_s: list[float],
        wall_s: float,
        *,
        rss: float | None = None,
        note: str = "",
    ) -> Figure:
        lat = sorted(lat_s)
        fig = Figure(
            name,
            where.store,
            where.live,
            where.history,
            len(lat),
            percentile(lat, 0.5) * 1000,
            percentile(lat, 0.99) * 1000,
            len(lat) / wall_s if wall_s > 0 else float("nan"),
            rss if rss is not None else rss_mb(),
            load1(),
            note,
        )
        self.figures.append(fig)
        print(fig.line(), flush=True)
        return fig


# --- building the plane -------------------------------------------------------------------------


def build(store: SqlStore, runtime: BenchRuntime, clock: Clock, hosts: int) -> Wired:
    return wire(
        store=store,
        runtime=runtime,
        volumes=FakeVolumes(),
        clock=clock,
        ids=CountingIds(),
        hosts=fleet(hosts),
        catalog=load_catalog(),
        secret=SECRET,
        metadata_url="http://127.0.0.1:9/v1/metadata",
        config=PlaneConfig(),
    )


@contextmanager
def database(kind: str, tmp: Path, tag: str) -> Iterator[str]:
    if kind == "sqlite":
        yield f"sqlite:///{tmp / f'{tag}.db'}"
    else:
        with pg_schema(PG_URL) as url:
            yield url


def live_count(plane: ControlPlane) -> int:
    snapshot = getattr(plane, "snapshot", None)
    if snapshot is not None:
        return len(snapshot().instances)
    return sum(
        1
        for s in plane.store.instances()
        if s.state.status not in (InstanceStatus.SUCCEEDED, InstanceStatus.FAILED)
    )


# --- the figures --------------------------------------------------------------------------------


def ticks(plane: ControlPlane, clock: FixedClock, where: Where, args: Any, report: Report) -> None:
    t = time.perf_counter()
    plane.tick()
    gc.freeze()  # what a server does once the live state is loaded (app.decider.Decider.loaded)
    report.add("tick-first", where, [time.perf_counter() - t], time.perf_counter() - t)
    step = getattr(plane, "step", plane.tick)  # the decision step, without the metering pass
    observer = getattr(plane, "observer", None)

    def one() -> None:
        clock.advance(1)
        if observer is not None:
            observer.missed()  # every workload reported, as at a full look (app.runtime_reports)
        step()

    lat, wall = sample(one, args.ticks, args.budget_s)
    report.add("tick", where, lat, wall, note=f"{len(plane.runtime.observe())} reporting")
    if observer is not None:

        def changes() -> None:
            clock.advance(1)
            step()

        lat, wall = sample(changes, args.ticks, args.budget_s)
        report.add("tick-changes", where, lat, wall, note="only what changed is reported")
    meter_if_due = getattr(plane, "meter_if_due", None)
    if meter_if_due is None:
        return
    passes: list[float] = []
    for _ in range(args.meter_passes):
        while not plane._meter or not plane._meter.due(clock.now() + 1):
            clock.advance(1)
            step()
        clock.advance(1)
        step()
        t = time.perf_counter()
        meter_if_due()
        passes.append(time.perf_counter() - t)
    report.add("meter-pass", where, passes, sum(passes), note="off the decision lock, per interval")


def launches(plane: ControlPlane, where: Where, args: Any, report: Report) -> None:
    accounts = [f"acct-live-{a:03d}" for a in range(16)]
    n = iter(range(10**9))

    def interruptible() -> None:
        account = accounts[next(n) % len(accounts)]
        plane.launch(LaunchRequest(account, GPU, "interruptible", command=COMMAND))

    lat, wall = sample(interruptible, args.launches, args.budget_s)
    report.add("launch-int", where, lat, wall)
    reclaimed = 0

    def on_demand() -> None:
        nonlocal reclaimed
        account = accounts[next(n) % len(accounts)]
        try:
            got = plane.launch(LaunchRequest(account, GPU, "on-demand", command=COMMAND))
        except InsufficientCapacity:
            raise Exhausted from None
        reclaimed += bool(got.state.waiting_for)

    lat, wall = sample(on_demand, args.on_demand, args.budget_s)
    report.add("launch-od", where, lat, wall, note=f"{reclaimed} reclaimed")


def takeover(url: str, where: Where, args: Any, now: int, report: Report) -> None:
    """A second process takes the store over: its plane's first decision on the live state."""
    cmd = [sys.executable, __file__, "--takeover-of", url, "--hosts", str(args.hosts)]
    cmd += ["--now", str(now)]
    try:
        done = subprocess.run(
            cmd, capture_output=True, text=True, timeout=args.budget_s * 3, env=os.environ.copy()
        )
    except subprocess.TimeoutExpired:
        report.add("takeover", where, [], 1.0, note=f"did not finish in {args.budget_s * 3:.0f}s")
        return
    if done.returncode != 0:
        report.add("takeover", where, [], 1.0, note="failed: " + done.stderr.strip()[-300:])
        return
    got = json.loads(done.stdout.strip().splitlines()[-1])
    report.add(
        "takeover",
        where,
        [got["seconds"]],
        got["seconds"],
        rss=got["peak_rss_mb"],
        note=f"rss after {got['rss_mb']:.0f} MiB; {got['how']}",
    )


def takeover_child(url: str, hosts: int, now: int) -> None:
    store = SqlStore.open(url)
    clock = FixedClock(now)
    runtime = BenchRuntime(now=clock.now)
    # The runtime knows its workloads already (a local runtime's state dir survives a restart).
    runtime.adopt([s.state for s in store.live_instances()])
    started = time.perf_counter()
    plane = build(store, runtime, clock, hosts).plane
    how = "first tick"
    for name in ("load", "snapshot"):  # a plane that keeps its live state loads it here
        load = getattr(plane, name, None)
        if callable(load):
            t = time.perf_counter()
            load()
            how = f"{name}() {time.perf_counter() - t:.2f}s, then the first tick"
            break
    plane.tick()
    seconds = time.perf_counter() - started
    out = {"seconds": seconds, "rss_mb": rss_mb(), "peak_rss_mb": peak_rss_mb(), "how": how}
    print(json.dumps(out))
    store.close()


def first_tick(loop: ReconcileLoop, timeout_s: float = 300) -> None:
    """Wait for the loop's first tick: a loop that takes the lead loads the live state first
    (seconds at 110,000 live), which is a takeover's cost (`takeover`), not a request's."""
    deadline = time.monotonic() + timeout_s
    while loop.ticks < 1 and time.monotonic() < deadline:
        time.sleep(0.05)


@contextmanager
def serving(wired: Wired, runtime: BenchRuntime) -> Iterator[tuple[str, Accounts, ReconcileLoop]]:
    """The real API under uvicorn, with the reconcile loop leading, in threads of this process."""
    plane = wired.plane
    loop = ReconcileLoop(plane, owner=f"bench:{os.getpid()}")
    loop_thread = threading.Thread(target=loop.run, name="reconcile-loop", daemon=True)
    loop_thread.start()
    accounts = Accounts(plane.store, plane.clock, plane.ids)
    api = create_app(plane, runtime, wired.tokens, lambda: loop.leading, accounts=accounts)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(api, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, name="uvicorn", daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        with suppress(httpx.HTTPError, ValueError):
            if httpx.get(f"{url}/healthz", timeout=5).json().get("leading"):
                break
        time.sleep(0.1)
    first_tick(loop)
    try:
        yield url, accounts, loop
    finally:
        server.should_exit = True
        loop.stop()
        thread.join(timeout=10)
        loop_thread.join(timeout=30)


def http(
    wired: Wired, runtime: BenchRuntime, clock: FixedClock, where: Where, args: Any, report: Report
) -> None:
    with serving(wired, runtime) as (url, accounts, loop):
        keys = []
        for c in range(args.clients):
            record, key = accounts.create_account(f"bench-client-{c}")
            accounts.topup(record.id, "1000.00")
            keys.append(key)
        http_launches(wired, url, keys, "http-launch", where, args, report)
        meter = wired.plane._meter
        if meter is not None:

            def metering() -> None:  # the next interval closes: the loop's next tick meters
                clock.advance(meter.interval_s)
                wired.plane.wake.set()

            passes = loop.ticks
            http_launches(wired, url, keys, "http-launch-metering", where, args, report, metering)
            if loop.ticks == passes:
                print("# http-launch-metering: the loop did not tick during the run", flush=True)

        record, key = accounts.create_account("bench-list")
        for _ in range(10):
            wired.plane.launch(LaunchRequest(record.id, GPU, "interruptible", command=COMMAND))
        with httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=120
        ) as c:

            def listing() -> None:
                r = c.get("/v1/instances")
                r.raise_for_status()
                assert len(r.json()) == 10, len(r.json())

            lat, wall = sample(listing, args.list, args.budget_s)
        report.add("http-list", where, lat, wall, note="10 of the account's instances")


def http_launches(
    wired: Wired,
    url: str,
    keys: list[str],
    name: str,
    where: Where,
    args: Any,
    report: Report,
    at_start: Callable[[], None] | None = None,
) -> None:
    """One `http-launch` figure: the clients in a process of their own (as real clients: in
    this one they would share the server's interpreter lock and slow it down). Each client's
    first launch is a warm-up, not timed (its key's first look-up, its connection, FastAPI's
    first build of a router's routes: one-off costs, ~20 ms a router here); `at_start` runs
    once they all have warmed up, as the timed launches begin."""
    job = {"url": url, "keys": keys, "n": args.http_launches, "budget_s": args.budget_s}
    batcher = getattr(wired.plane, "_batcher", None)  # group commit, where the plane has it
    child = subprocess.Popen(
        [sys.executable, __file__, "--clients-child"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdin is not None and child.stdout is not None
    child.stdin.write(json.dumps(job) + "\n")
    child.stdin.flush()
    if child.stdout.readline().strip() != "warm":
        raise RuntimeError(f"the clients' process failed (exit {child.wait()})")
    cpu0 = time.process_time()
    batches0 = (batcher.batches, batcher.carried) if batcher is not None else None
    child.stdin.write("go\n")
    child.stdin.flush()
    if at_start is not None:
        at_start()
    out, _ = child.communicate()
    if child.returncode != 0:
        raise RuntimeError(f"the clients' process failed (exit {child.returncode})")
    result = json.loads(out)
    lat, errors, wall = result["lat"], result["errors"], result["wall"]
    server_ms = 1000 * (time.process_time() - cpu0) / max(1, len(lat))
    client_ms = 1000 * result["cpu"] / max(1, len(lat))
    note = f"{args.clients} clients; cpu/launch: server {server_ms:.2f} ms"
    note += f", clients {client_ms:.2f} ms"
    if batcher is not None and batches0 is not None:
        batches = batcher.batches - batches0[0]
        note += f"; {(batcher.carried - batches0[1]) / max(1, batches):.1f} per commit"
    if at_start is not None:
        note += "; a metering pass from the start"
    if errors:
        note += f"; {len(errors)} errors, the first: {errors[0]}"
    report.add(name, where, lat, wall, note=note)


def clients_child() -> None:
    """The HTTP clients: one thread and one connection each. Each makes one launch untimed (the
    warm-up), then, once all have and "go" is read from stdin, launches until `n` launches or
    the budget; prints "warm", then their latencies (s), errors, wall time and CPU time (s:
    from "go" on) as JSON."""
    job = json.loads(sys.stdin.readline())
    lat: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    warm = threading.Barrier(len(job["keys"]) + 1)
    go = threading.Event()
    body = {"gpu": GPU, "type": "interruptible", "command": list(COMMAND)}
    deadline = 0.0

    def client(key: str) -> None:
        headers = {"Authorization": f"Bearer {key}"}
        with httpx.Client(base_url=job["url"], headers=headers, timeout=120) as c:
            c.post("/v1/instances", json=body).raise_for_status()
            warm.wait()
            go.wait()
            while time.perf_counter() < deadline:
                with lock:
                    if len(lat) + len(errors) >= job["n"]:
                        return
                t = time.perf_counter()
                try:
                    r = c.post("/v1/instances", json=body)
                    ok, why = r.status_code == 201, f"{r.status_code} {r.text[:120]}"
                except httpx.HTTPError as exc:
                    ok, why = False, repr(exc)
                with lock:
                    (lat.append(time.perf_counter() - t) if ok else errors.append(why))

    threads = [threading.Thread(target=client, args=(k,)) for k in job["keys"]]
    for th in threads:
        th.start()
    warm.wait()
    print("warm", flush=True)
    sys.stdin.readline()
    started, cpu0 = time.perf_counter(), time.process_time()
    deadline = started + job["budget_s"]
    go.set()
    for th in threads:
        th.join()
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu0
    print(json.dumps({"lat": lat, "errors": errors, "wall": wall, "cpu": cpu}))


def idle(plane: ControlPlane, where: Where, name: str, seconds: float, report: Report) -> None:
    """% of one core used by this process with the loop running and nothing asked of it."""
    loop = ReconcileLoop(plane, owner=f"bench-idle:{os.getpid()}")
    thread = threading.Thread(target=loop.run, name="reconcile-loop", daemon=True)
    thread.start()
    first_tick(loop)  # the lead taken: the live state loaded again, as a new leader does
    time.sleep(min(2.0, seconds / 3))
    ticks0, cpu0, wall0 = loop.ticks, time.process_time(), time.perf_counter()
    time.sleep(seconds)
    cpu, wall, done = time.process_time() - cpu0, time.perf_counter() - wall0, loop.ticks - ticks0
    loop.stop()
    thread.join(timeout=300)
    share = 100 * cpu / wall
    note = f"{share:.2f} % of a core; {done} ticks in {wall:.1f}s"
    fig = report.add(name, where, [], wall, note=note)
    fig.per_s = done / wall  # ticks per second
    fig.p50_ms = fig.p99_ms = float("nan")


# --- one scale ----------------------------------------------------------------------------------


def run_scale(
    kind: str, running: int, queued: int, history: int, args: Any, tmp: Path, report: Report
) -> None:
    tag = f"{kind}-{running}-{queued}-{history}"
    print(f"# {kind}: {running:,} running + {queued:,} queued, history {history:,}", flush=True)
    with database(kind, tmp, tag) as url:
        store = SqlStore.open(url)
        now = int(time.time())
        clock = FixedClock(now)
        runtime = BenchRuntime(now=clock.now)
        hosts = fleet(args.hosts)
        seeded = seed(store, hosts, running=running, queued=queued, history=history, now=now)
        if kind == "pg":  # what autovacuum does after a bulk load: the planner's statistics
            with store._engine.begin() as conn:
                conn.exec_driver_sql("ANALYZE")
        runtime.adopt(seeded.running)
        wired = build(store, runtime, clock, args.hosts)
        plane = wired.plane
        where = Where(kind, running + queued, history)
        try:
            ticks(plane, clock, where, args, report)
            launches(plane, where, args, report)
            clock.advance(1)
            plane.tick()  # the reclaimed leave, the on-demand start
            where = Where(kind, live_count(plane), history)
            takeover(url, where, args, clock.now(), report)
            if args.http:
                http(wired, runtime, clock, where, args, report)
            if args.idle_s > 0:
                idle(plane, where, "idle-live", args.idle_s, report)
        finally:
            store.close()


def run_idle_empty(kind: str, args: Any, tmp: Path, report: Report) -> None:
    with database(kind, tmp, f"{kind}-empty") as url:
        store = SqlStore.open(url)
        clock = SystemClock()
        runtime = BenchRuntime(now=clock.now)
        plane = build(store, runtime, clock, args.hosts).plane
        try:
            idle(plane, Where(kind, 0, 0), "idle-empty", args.idle_s, report)
        finally:
            store.close()


def ints(text: str) -> list[int]:
    return [int(x.replace("_", "")) for x in text.split(",") if x]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stores", default="sqlite,pg", help="sqlite and/or pg (comma-separated)")
    parser.add_argument("--hosts", type=int, default=1250, help="8-GPU hosts in the pool")
    parser.add_argument("--running", default="10000", help="running instances, per scale")
    parser.add_argument("--queued", default="100000", help="queued, zipped with --running")
    parser.add_argument("--history", default="0,100000,1000000", help="finished instances")
    parser.add_argument("--ticks", type=int, default=50)
    parser.add_argument("--meter-passes", type=int, default=3, help="metering passes timed")
    parser.add_argument("--launches", type=int, default=1000, help="interruptible launches")
    parser.add_argument("--on-demand", type=int, default=200, help="on-demand launches (reclaim)")
    parser.add_argument("--http", action="store_true", help="also through the API under uvicorn")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--http-launches", type=int, default=1000)
    parser.add_argument("--list", type=int, default=200, help="GET /v1/instances samples")
    parser.add_argument("--idle-s", type=float, default=10.0, help="0: no idle figures")
    parser.add_argument("--budget-s", type=float, default=60.0, help="sampling time per figure")
    parser.add_argument("--quick", action="store_true", help="~1/50 scale, everything, < 2 min")
    parser.add_argument("--json", type=Path, help="write the figures to this file")
    parser.add_argument("--takeover-of", help=argparse.SUPPRESS)
    parser.add_argument("--clients-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--now", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    # `timeout` (or ^C) ends the run through the `finally`s: PostgreSQL schemas are dropped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.takeover_of:
        takeover_child(args.takeover_of, args.hosts, args.now)
        return
    if args.clients_child:
        clients_child()
        return
    if args.quick:
        args.hosts, args.running, args.queued, args.history = 25, "200", "2000", "0,20000"
        args.ticks, args.launches, args.on_demand, args.list = 10, 100, 20, 50
        args.http, args.http_launches, args.idle_s, args.budget_s = True, 200, 3.0, 10.0
    running, queued = ints(args.running), ints(args.queued)
    if len(running) != len(queued):
        parser.error("--running and --queued take as many values each")
    report = Report()
    print(f"fleet: {args.hosts} hosts x 8 GPUs; cpus: {os.cpu_count()}; load1 {load1():.2f}")
    print(header(), flush=True)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-plane-") as tmp:
        for kind in args.stores.split(","):
            if args.idle_s > 0:
                run_idle_empty(kind, args, Path(tmp), report)
            for r, q in zip(running, queued, strict=True):
                for h in ints(args.history):
                    run_scale(kind, r, q, h, args, Path(tmp), report)
    print(f"# done in {time.perf_counter() - started:.0f}s; load1 {load1():.2f}")
    if args.json:
        meta = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
        out = {"args": meta, "figures": [asdict(f) for f in report.figures]}
        args.json.write_text(json.dumps(out, indent=1, default=str) + "\n")


if __name__ == "__main__":
    main()

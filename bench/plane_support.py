"""What bench/plane.py builds on: the runtime, the fleet, the seeded states, the databases.

The states are written straight into the store (one `Store.commit` per batch of instances), each
instance stepped through the pure lifecycle as the engine would have stepped it — a running one
enqueued, placed on its GPU and started (and, for half of them, checkpointed); a queued one
enqueued; a finished one run to its exit and, for a share of them, deleted — so that the plane
loads valid records without deciding 110,000 launches first. Their metering watermarks are
written with them, so the first tick does not bill hours of past usage.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Literal

import psycopg

from lowcostgpu.adapters.fakes import FakeRuntime
from lowcostgpu.core import lifecycle
from lowcostgpu.core.lifecycle import (
    CheckpointReported,
    DeleteRequested,
    Enqueued,
    InstanceState,
    LifecycleEvent,
    Placed,
    WorkloadExited,
    WorkloadStarted,
)
from lowcostgpu.core.metering import MeterKey, closed_until
from lowcostgpu.core.snapshot import allocation_id_for
from lowcostgpu.domain.capacity import CapacityClass, Host, PoolKey, Timestamp
from lowcostgpu.ports.runtime import WorkloadReport, WorkloadStart
from lowcostgpu.ports.store import Store
from lowcostgpu.ports.store_records import Commit, InstanceWrite, LaunchRecord, LedgerEntry

PG_URL = "postgresql://postgres@127.0.0.1:5432/test"
POOL = PoolKey("eu-west", "a100-sxm4")
ARGV = ("python", "train.py")
BATCH = 5_000  # instances per seeding commit
LIVE_ACCOUNTS = 100
HISTORY_ACCOUNTS = 1_000


class BenchRuntime(FakeRuntime):
    """`FakeRuntime` (every workload reported at every `observe`, as `LocalRuntime` does) whose
    workloads behave like the templates: on SIGTERM they checkpoint and exit (code 0) — seen at
    the next `observe` — instead of waiting for the SIGKILL at the end of their grace."""

    def __init__(self, *, now: Callable[[], Timestamp]) -> None:
        super().__init__(now=now)
        self._terminating: set[str] = set()

    def signal(self, allocation_id: str, signal: Literal["SIGTERM"]) -> None:
        super().signal(allocation_id, signal)
        self._terminating.add(allocation_id)

    def observe(self) -> list[WorkloadReport]:
        self._leave()
        return super().observe()

    def changes_since(self, cursor: int | None) -> tuple[list[WorkloadReport], int]:
        self._leave()
        return super().changes_since(cursor)

    def _leave(self) -> None:
        """The workloads told to stop have checkpointed and exited by the next look."""
        for allocation_id in sorted(self._terminating):
            if self.phase_of(allocation_id) == "running":
                self.finish(allocation_id, 0)
        self._terminating.clear()

    def adopt(self, states: Sequence[InstanceState]) -> None:
        """Workloads that run already (seeded, or found by a runtime after a restart)."""
        for s in states:
            if s.allocation_id is None or s.host_id is None:
                continue
            start = WorkloadStart(
                s.id, s.allocation_id, s.host_id, s.gpu_indices, s.restart_count, ARGV
            )
            self.start(start)


def fleet(hosts: int, gpus_per_host: int = 8, pool: PoolKey = POOL) -> list[Host]:
    return [Host(f"h{i:05d}", pool, gpus_per_host) for i in range(hosts)]


Steps = Sequence[tuple[LifecycleEvent, Timestamp]]


def _steps(state: InstanceState, events: Steps) -> InstanceState:
    for event, at in events:
        state = lifecycle.step(state, event, at).state
    return state


@dataclass
class Seeded:
    running: list[InstanceState] = field(default_factory=list)
    queued: int = 0
    history: int = 0
    seconds: float = 0.0


def seed(
    store: Store,
    hosts: Sequence[Host],
    *,
    running: int,
    queued: int,
    history: int,
    now: Timestamp,
    deleted_share: float = 0.5,
    on_demand_share: float = 0.2,
    interval_s: int = 60,
    say: Callable[[str], None] = print,
) -> Seeded:
    """Write `running` 1-GPU running instances (filling the hosts in order; every
    1/on_demand_share-th on-demand, the rest interruptible, started 10 min to 2 h ago, half
    checkpointed since), `queued` interruptible 1-GPU instances and `history` finished ones of
    other accounts; top up the live accounts."""
    gpus = [(h.id, g) for h in hosts for g in range(h.gpu_count)]
    if running > len(gpus):
        raise SystemExit(f"{running} running instances do not fit on {len(gpus)} GPUs")
    started = time.perf_counter()
    out = Seeded()
    every_od = round(1 / on_demand_share) if on_demand_share > 0 else 0
    watermark = closed_until(now, interval_s)

    def live_account(i: int) -> str:
        return f"acct-live-{i % LIVE_ACCOUNTS:03d}"

    topups = [
        LedgerEntry(f"topup:bench:{a}", live_account(a), now - 86_400, "topup", Decimal("1e9"))
        for a in range(LIVE_ACCOUNTS)
    ]
    store.commit(Commit(ledger=topups))

    def write(states: list[InstanceState], meter: dict[MeterKey, Timestamp]) -> None:
        writes = [
            InstanceWrite(s, None, LaunchRecord(s.id, s.account_id, ARGV, created_at=now))
            for s in states
        ]
        store.commit(Commit(instances=writes, metered_through=meter))

    batch: list[InstanceState] = []
    meter: dict[MeterKey, Timestamp] = {}
    for i in range(running):
        host_id, gpu = gpus[i]
        od = every_od and i % every_od == 0
        cls = CapacityClass.ON_DEMAND if od else CapacityClass.INTERRUPTIBLE
        base = InstanceState(f"i-r{i:07d}", live_account(i), hosts[0].pool, 1, cls)
        placed = now - 600 - (i * 7919) % 6600
        events: list[tuple[LifecycleEvent, Timestamp]] = [
            (Enqueued(), placed),
            (Placed(allocation_id_for(base.id, placed), host_id, (gpu,)), placed),
            (WorkloadStarted(), placed),
        ]
        if i % 2 == 0:
            events.append((CheckpointReported(100), now - (i * 31) % 1800))
        state = _steps(base, events)
        batch.append(state)
        meter[(state.id, "gpu")] = watermark
        out.running.append(state)
        if len(batch) >= BATCH:
            write(batch, meter)
            batch, meter = [], {}
    for i in range(queued):
        base = InstanceState(
            f"i-q{i:07d}", live_account(i), hosts[0].pool, 1, CapacityClass.INTERRUPTIBLE
        )
        batch.append(_steps(base, [(Enqueued(), now - 100_000 + i % 99_000)]))
        if len(batch) >= BATCH:
            write(batch, meter)
            batch, meter = [], {}
    if batch:
        write(batch, meter)
    out.queued = queued
    say(f"  seeded {running:,} running + {queued:,} queued in {time.perf_counter() - started:.1f}s")
    seed_history(store, hosts, history, now, deleted_share, say)
    out.history = history
    out.seconds = time.perf_counter() - started
    return out


def seed_history(
    store: Store,
    hosts: Sequence[Host],
    history: int,
    now: Timestamp,
    deleted_share: float,
    say: Callable[[str], None] = print,
) -> None:
    """`history` finished instances of other accounts: succeeded, and a share of them deleted."""
    if history <= 0:
        return
    started = time.perf_counter()
    t0 = now - 30 * 86_400
    cls = CapacityClass.INTERRUPTIBLE
    first = InstanceState("i-h-template", "acct-hist-0", hosts[0].pool, 1, cls)
    alloc = allocation_id_for(first.id, t0)
    done = _steps(
        first,
        [
            (Enqueued(), t0),
            (Placed(alloc, hosts[0].id, (0,)), t0),
            (WorkloadStarted(), t0),
            (WorkloadExited(0), t0 + 3600),
        ],
    )
    gone = _steps(done, [(DeleteRequested(), t0 + 3700)])
    every_deleted = round(1 / deleted_share) if deleted_share > 0 else 0
    batch: list[InstanceWrite] = []
    meter: dict[MeterKey, Timestamp] = {}
    for i in range(history):
        iid = f"i-h{i:08d}"
        account = f"acct-hist-{i % HISTORY_ACCOUNTS:04d}"
        at = t0 + (i * 13) % (25 * 86_400)
        alloc = allocation_id_for(iid, at)
        template = gone if every_deleted and i % every_deleted == 0 else done
        run = replace(template.runs[0], allocation_id=alloc, started_at=at, billed_until=at + 3600)
        state = replace(
            template,
            id=iid,
            account_id=account,
            enqueued_at=at,
            allocation_id=None,
            host_id=None,
            runs=(run,),
        )
        launch = LaunchRecord(iid, account, ARGV, created_at=at)
        batch.append(InstanceWrite(state, None, launch))
        meter[(iid, "gpu")] = closed_until(at + 3600, 60) + 60
        if len(batch) >= BATCH:
            store.commit(Commit(instances=batch, metered_through=meter))
            batch, meter = [], {}
    if batch:
        store.commit(Commit(instances=batch, metered_through=meter))
    say(f"  seeded {history:,} finished in {time.perf_counter() - started:.1f}s")


@contextmanager
def pg_schema(base: str = PG_URL) -> Iterator[str]:
    """A schema of its own on the test database, dropped afterwards (others' tests untouched)."""
    name = f"bench_plane_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{name}"')
    try:
        yield f"{base}?options=-csearch_path%3D{name}"
    finally:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{name}" CASCADE')


def rss_mb() -> float:
    """Resident set size now (VmRSS), in MiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def peak_rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def load1() -> float:
    return os.getloadavg()[0]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class CountingIds:
    def __init__(self, tag: str = "") -> None:
        self.n = 0
        self.tag = tag

    def new_id(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}-{self.tag}{self.n:07d}"

"""Scheduler benchmark: decisions per second and latency per decision on a fleet of 10,000 GPUs.

The fleet has the shape of the Alibaba GPU trace (ATC'23 "Beware of Fragmentation", the node list
in shared/data/alibaba-gpu-v2023): its GPU types in the same proportions, scaled to 10,000 GPUs on
8-GPU hosts. 100,000 interruptible tickets wait in the queues, with GPU counts drawn from the
trace's best-effort pods; a stream of on-demand arrivals (GPU counts from its latency-sensitive
pods) and departures follows. A *decision* is one call of the pure core (on-demand placement
with victim choice, or one queue pass for a pool after GPUs were freed) together with applying
its plan to the snapshot. The last line printed is `decisions/s=… p50_ms=… p99_ms=…`.

Run: `make bench` (or `.venv/bin/python bench/scheduler.py --events 20000`); `--policy NAME`
measures another victim policy (`core.policies.POLICY_NAMES`; the default is the scheduler's).
"""

from __future__ import annotations

import argparse
import csv
import gc
import random
import statistics
import time
import zlib
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from lowcostgpu.core.policies import DEFAULT_POLICY_NAME, POLICY_NAMES, policy_by_name
from lowcostgpu.core.queue import schedule_pool
from lowcostgpu.core.scheduler import SchedulerConfig, place_on_demand
from lowcostgpu.core.snapshot import FleetSnapshot, apply_plan, enqueue, release
from lowcostgpu.core.state import Plan, Request, Ticket
from lowcostgpu.domain.capacity import Allocation, Host, PoolKey
from lowcostgpu.domain.errors import InsufficientCapacity

TRACE = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "alibaba-gpu-v2023"
FALLBACK_GPU_SHARES = {"G2": 4392, "T4": 842, "G3": 312, "P100": 265, "V100M32": 204}


def gpu_shares(trace: Path) -> Counter[str]:
    """GPUs per type in the trace's node list (the published totals if the file is absent)."""
    path = trace / "openb_node_list_gpu_node.csv"
    if not path.exists():
        return Counter(FALLBACK_GPU_SHARES)
    shares: Counter[str] = Counter()
    with path.open() as f:
        for row in csv.DictReader(f):
            if row["model"] and int(row["gpu"]) > 0:
                shares[row["model"]] += int(row["gpu"])
    return shares


def pod_gpu_counts(trace: Path, qos: str) -> list[int]:
    path = trace / "openb_pod_list_default.csv"
    if not path.exists():
        return [1] * 97 + [2, 4, 8]
    with path.open() as f:
        return [
            min(8, int(r["num_gpu"]))
            for r in csv.DictReader(f)
            if r["qos"] == qos and int(r["num_gpu"]) > 0
        ]


def build_fleet(total_gpus: int, shares: Counter[str]) -> list[Host]:
    hosts: list[Host] = []
    all_gpus = sum(shares.values())
    for gpu_type, count in sorted(shares.items()):
        n_hosts = max(1, round(total_gpus * count / all_gpus / 8))
        pool = PoolKey("trace", gpu_type.lower())
        hosts += [Host(f"{gpu_type.lower()}-{i:04d}", pool, 8) for i in range(n_hosts)]
    return hosts


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.rng = random.Random(args.seed)
        self.config = SchedulerConfig(min_runtime_s=300, policy=policy_by_name(args.policy))
        self.latencies_s: list[float] = []
        self.now = 1_000_000
        shares = gpu_shares(TRACE)
        self.hosts = build_fleet(args.gpus, shares)
        self.pools = sorted({h.pool for h in self.hosts})
        weights = [sum(h.gpu_count for h in self.hosts if h.pool == p) for p in self.pools]
        self.pool_weights = weights
        self.be_sizes = pod_gpu_counts(TRACE, "BE")
        self.ls_sizes = pod_gpu_counts(TRACE, "LS")
        tickets = [
            Ticket(f"t{i}", self._pool(), self.rng.choice(self.be_sizes), self.now - 100_000 + i)
            for i in range(args.tickets)
        ]
        self.snap = FleetSnapshot.build(self.hosts, tickets=tickets)
        self.counter = 0

    def _pool(self) -> PoolKey:
        return self.rng.choices(self.pools, weights=self.pool_weights)[0]

    def decide(self, decision: Callable[[], Plan]) -> Plan:
        started = time.perf_counter()
        plan = decision()
        self.snap = apply_plan(self.snap, plan, self.now)
        self.latencies_s.append(time.perf_counter() - started)
        return plan

    def fill(self) -> int:
        """Fill the fleet from the queue, then age it: a fleet does not start in one second.

        Each allocation gets a start within the past two hours and, for half of them, a
        checkpoint reported within the past 30 minutes. The fill is not timed as decisions.
        """
        placed = 0
        for pool in self.pools:
            plan = schedule_pool(self.snap, pool, self.now, self.config)
            self.snap = apply_plan(self.snap, plan, self.now)
            placed += len(plan.placements)
        aged = []
        for a in self.snap.allocations():
            started = self.now - self.rng.randint(600, 7200)
            checkpoint = self.now - self.rng.randint(0, 1800) if self.rng.random() < 0.5 else None
            aged.append(replace(a, started_at=started, last_checkpoint_at=checkpoint))
        self.snap = FleetSnapshot.build(self.hosts, aged, self.snap.tickets())
        return placed

    def on_demand(self) -> None:
        self.counter += 1
        request = Request(f"od{self.counter}", self._pool(), self.rng.choice(self.ls_sizes))
        try:
            plan = self.decide(lambda: place_on_demand(self.snap, request, self.now, self.config))
        except InsufficientCapacity:
            return
        for pre in plan.preemptions:  # victims leave within their grace, then requeue
            victim = self.snap.allocation(pre.allocation_id, pre.host_id)
            self.snap = release(self.snap, pre.allocation_id, pre.host_id)
            back = Ticket(victim.subject_id, victim.pool, victim.gpus, self.now - 200_000)
            self.snap = enqueue(self.snap, back)

    def departure(self) -> None:
        host = self.snap.hosts[self.rng.choice(self.hosts).id]
        done = [a for a in host.allocations if not a.draining and not a.waits_for]
        if not done:
            return
        self.snap = release(self.snap, self.rng.choice(done).id, host.host.id)
        pool = host.host.pool
        self.decide(lambda: schedule_pool(self.snap, pool, self.now, self.config))

    def run(self, events: int, on_demand_share: float) -> None:
        refreshed = self.now
        for _ in range(events):
            self.now += self.rng.randint(1, 5)
            if self.now - refreshed >= CHECKPOINT_REFRESH_S:
                self.report_checkpoints()
                refreshed = self.now
            if self.rng.random() < on_demand_share:
                self.on_demand()
            else:
                self.departure()

    def report_checkpoints(self) -> None:
        """Workloads keep checkpointing while the stream runs (not timed as decisions).

        Half the allocations (by id) checkpoint every 10 minutes, at a phase of their own; their
        reports since the last refresh are applied at once, host by host.
        """
        changed: dict[str, list[Allocation]] = {}
        for state in self.snap.hosts.values():
            allocs = [_checkpointed(a, self.now) for a in state.allocations]
            if allocs != list(state.allocations):
                changed[state.host.id] = allocs
        self.snap = self.snap.with_host_allocations(changed)


CHECKPOINT_INTERVAL_S = 600
CHECKPOINT_REFRESH_S = 300


def _checkpointed(a: Allocation, now: int) -> Allocation:
    phase = zlib.crc32(a.id.encode())
    if a.draining or a.waits_for or phase % 2:
        return a
    since_start = now - a.started_at
    if since_start < CHECKPOINT_INTERVAL_S:
        return a
    last = now - (since_start + phase) % CHECKPOINT_INTERVAL_S
    return a if a.last_checkpoint_at == last else replace(a, last_checkpoint_at=last)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=10_000)
    parser.add_argument("--tickets", type=int, default=100_000)
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--on-demand-share", type=float, default=0.3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--policy", choices=POLICY_NAMES, default=DEFAULT_POLICY_NAME)
    parser.add_argument("--profile", action="store_true", help="print a cProfile of the run")
    args = parser.parse_args()
    bench = Bench(args)
    total_gpus = sum(h.gpu_count for h in bench.hosts)
    print(f"policy: {bench.config.policy.name}")
    print(f"fleet: {total_gpus} GPUs on {len(bench.hosts)} hosts in {len(bench.pools)} pools")
    started = time.perf_counter()
    placed = bench.fill()
    # The initial fleet and queue are long-lived: move them out of the collector's way, as a
    # server does after start-up, so that a full collection does not walk 100,000 tickets.
    gc.collect()
    gc.freeze()
    print(f"initial fill: {placed} tickets placed in {time.perf_counter() - started:.2f}s")
    started = time.perf_counter()
    if args.profile:
        import cProfile

        cProfile.runctx(
            "bench.run(args.events, args.on_demand_share)", globals(), locals(), sort="tottime"
        )
    else:
        bench.run(args.events, args.on_demand_share)
    wall_s = time.perf_counter() - started
    lat = sorted(bench.latencies_s)
    decisions = len(lat)
    p50 = statistics.median(lat) * 1000
    p99 = lat[min(decisions - 1, int(decisions * 0.99))] * 1000
    queued = sum(1 for _ in bench.snap.tickets())
    print(f"events: {args.events} in {wall_s:.2f}s wall; decisions: {decisions}; queued: {queued}")
    print(
        f"decisions/s={decisions / sum(lat):.0f} p50_ms={p50:.3f} p99_ms={p99:.3f} "
        f"max_ms={lat[-1] * 1000:.3f}"
    )


if __name__ == "__main__":
    main()

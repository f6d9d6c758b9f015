"""Statements, round trips and CPU per launch through the real ControlPlane (issue 15).

    .venv/bin/python bench/store_round_trips.py --store pg                # interruptible, queued
    .venv/bin/python bench/store_round_trips.py --store sqlite --on-demand  # each one reclaims

A small world (bench/plane_support.py: `--hosts` 8-GPU hosts, all GPUs running, nothing queued)
so that it starts in seconds; a launch's commit does not grow with the world (docs/performance.md,
"Against the issue's goals"). Counts every statement SQLAlchemy sends (`before_cursor_execute`)
and every transaction (`begin`), and, on PostgreSQL, the CPU the server's backends spent for this
process (its pooled connections, from /proc): on a 2-core machine the server's CPU is taken from
the plane's, so launches per CPU-second of both is the figure that does not depend on the load.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import event

from lowcostgpu.adapters.clock import FixedClock
from lowcostgpu.adapters.store import SqlStore
from lowcostgpu.app.launch import LaunchRequest
from plane import COMMAND, GPU, build
from plane_support import PG_URL, BenchRuntime, fleet, pg_schema, seed


@contextmanager
def database(kind: str) -> Iterator[str]:
    if kind == "pg":
        with pg_schema(PG_URL) as url:
            yield url
    else:
        with tempfile.TemporaryDirectory(prefix="bench-rt-") as tmp:
            yield f"sqlite:///{Path(tmp) / 'store.db'}"


class Backends:
    """The PostgreSQL backends of a store's pooled connections, and the CPU they used."""

    def __init__(self, store: SqlStore) -> None:
        self.pids: set[int] = set()
        event.listen(store._engine, "connect", self._connected)
        store._engine.dispose()  # every pooled connection is made again, and seen

    def _connected(self, dbapi: Any, _record: Any) -> None:
        cur = dbapi.cursor()
        cur.execute("SELECT pg_backend_pid()")
        self.pids.add(cur.fetchone()[0])
        cur.close()

    def cpu_s(self) -> float:
        ticks = 0
        for pid in self.pids:
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except FileNotFoundError:
                continue
            ticks += int(fields[11]) + int(fields[12])  # utime, stime
        return ticks / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", choices=("pg", "sqlite"), default="pg")
    parser.add_argument("--hosts", type=int, default=125)
    parser.add_argument("--launches", type=int, default=1000)
    parser.add_argument("--on-demand", action="store_true", help="on-demand launches (reclaim)")
    args = parser.parse_args()
    kind = "on-demand" if args.on_demand else "interruptible"
    with database(args.store) as url:
        store = SqlStore.open(url)
        now = int(time.time())
        clock = FixedClock(now)
        runtime = BenchRuntime(now=clock.now)
        hosts = fleet(args.hosts)
        seeded = seed(store, hosts, running=args.hosts * 8, queued=0, history=0, now=now)
        runtime.adopt(seeded.running)
        plane = build(store, runtime, clock, args.hosts).plane
        plane.tick()
        backends = Backends(store) if args.store == "pg" else None
        statements: Counter[str] = Counter()
        transactions, pings = [0], [0]
        dialect = store._engine.dialect
        ping = dialect.do_ping

        def counted_ping(dbapi_connection: Any) -> bool:
            pings[0] += 1
            return ping(dbapi_connection)

        dialect.do_ping = counted_ping  # type: ignore[method-assign]

        def counted(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
            statements[statement.split("\n")[0][:90]] += 1

        def began(_conn: Any) -> None:
            transactions[0] += 1

        accounts = [f"acct-live-{a:03d}" for a in range(16)]

        def launch(i: int) -> None:
            plane.launch(LaunchRequest(accounts[i % 16], GPU, kind, command=COMMAND))

        for i in range(20):  # warm: SQLAlchemy's compiled cache, psycopg's prepared statements
            launch(i)
        pings[0] = 0
        event.listen(store._engine, "before_cursor_execute", counted)
        event.listen(store._engine, "begin", began)
        n = args.launches if kind == "interruptible" else min(args.launches, args.hosts * 5)
        wall, cpu = time.perf_counter(), time.process_time()
        server = backends.cpu_s() if backends else 0.0
        for i in range(n):
            launch(i)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        server = (backends.cpu_s() - server) if backends else 0.0
        sent = sum(statements.values())
        # PostgreSQL: psycopg sends BEGIN and COMMIT each on its own; SQLite's are in `sent`
        trips = sent + pings[0] + (2 * transactions[0] if args.store == "pg" else 0)
        print(
            f"{args.store} {kind}: {n} launches, {n / wall:.0f}/s; per launch: {sent / n:.2f} "
            f"statements in {transactions[0] / n:.2f} transactions, {pings[0] / n:.2f} pings, "
            f"{trips / n:.2f} round trips; {cpu / n * 1e6:.0f} us CPU here + "
            f"{server / n * 1e6:.0f} us in the server = {n / (cpu + server):.0f} launches per "
            f"CPU-s; load1 {os.getloadavg()[0]:.2f}"
        )
        for text, count in statements.most_common():
            print(f"  {count / n:5.2f}  {text}")
        store.close()


if __name__ == "__main__":
    main()

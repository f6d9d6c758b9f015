"""Shared by the store suite: three backends and builders of records.

The backends: the in-memory fake, SQLite in a temp dir, PostgreSQL.

PostgreSQL is the server at 127.0.0.1:5432 (trust auth, database `test`). Each test gets a schema
of its own (selected through the connection's search_path), dropped afterwards, so runs are
independent and may run in parallel. No server: the PostgreSQL cases skip, unless `CI` is set,
where they fail.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from alembic import command

from lowcostgpu.adapters.store import MemoryStore, SqlStore
from lowcostgpu.adapters.store.engine import parse_url
from lowcostgpu.adapters.store.migrate import alembic_config
from lowcostgpu.adapters.store.schema import metadata
from lowcostgpu.core.lifecycle import InstanceState, Run
from lowcostgpu.domain.capacity import CapacityClass, PoolKey
from lowcostgpu.domain.status import InstanceStatus
from lowcostgpu.ports.store import Store
from lowcostgpu.ports.store_records import LaunchRecord

PG_URL = os.environ.get("LOWCOSTGPU_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
BACKENDS = ["memory", "sqlite", "postgresql"]
TABLES = frozenset(metadata.tables)


@cache
def _pg_problem() -> str | None:
    try:
        with psycopg.connect(PG_URL, connect_timeout=3):
            return None
    except psycopg.Error as e:
        return f"no PostgreSQL at {PG_URL}: {str(e).strip().splitlines()[0]}"


def require_pg() -> None:
    problem = _pg_problem()
    if problem is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"{problem} (CI is set, so the PostgreSQL store must be tested)")
    pytest.skip(problem)


@contextmanager
def pg_schema() -> Iterator[str]:
    """A store URL on a fresh schema of its own; the schema is dropped afterwards."""
    require_pg()
    name = f"t_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{name}"')
    try:
        yield f"{PG_URL}?options=-csearch_path%3D{name}"
    finally:
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{name}" CASCADE')


@contextmanager
def store_at_revision(
    revision: str, dialect: str, directory: Path
) -> Iterator[tuple[str, sa.Engine]]:
    """A database migrated only up to `revision` (SQLite in `directory`, or a fresh PostgreSQL
    schema), for a migration test to fill old-shaped rows into; its URL and an engine on it."""
    url = pg_schema() if dialect == "postgresql" else _sqlite_url(directory)
    with url as found:
        engine = sa.create_engine(parse_url(found).url)
        try:
            with engine.begin() as conn:
                command.upgrade(alembic_config(conn), revision)
            yield found, engine
        finally:
            engine.dispose()


@contextmanager
def _sqlite_url(directory: Path) -> Iterator[str]:
    yield f"sqlite:///{directory / 'store.db'}"


def sqlite_plan_of_instances_read(directory: Path, read: Callable[[SqlStore], object]) -> str:
    """SQLite's query plan of the one statement on `instances` that `read` sends through a
    fresh store: the very statement, parameters included, not a hand-written copy of it."""
    return sqlite_plan_of_read(directory, read, "instances")


def sqlite_plan_of_read(directory: Path, read: Callable[[SqlStore], object], table: str) -> str:
    """`sqlite_plan_of_instances_read` for the one statement on `table`."""
    store = SqlStore.open(f"sqlite:///{directory / 'store.db'}")
    sent: list[tuple[str, Any]] = []

    def record(conn: Any, cursor: Any, statement: str, params: Any, *_: Any) -> None:
        if f"FROM {table}" in statement:
            sent.append((statement, params))

    try:
        sa.event.listen(store._engine, "before_cursor_execute", record)
        read(store)
        [(statement, params)] = sent
        with store._engine.connect() as conn:
            plan = [str(r) for r in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {statement}", params)]
    finally:
        store.close()
    return " ".join(plan)


@dataclass
class Backend:
    """Opens stores on one database (several objects: as several servers would)."""

    name: str
    url: str | None  # None: the memory fake
    opened: list[Store] = field(default_factory=list)

    def open(self) -> Store:
        store: Store = MemoryStore() if self.url is None else SqlStore.open(self.url)
        self.opened.append(store)
        return store

    def close_all(self) -> None:
        for s in self.opened:
            s.close()


def empty_tables(url: str) -> None:
    """Delete every row (DELETE: much faster than TRUNCATE or a new schema on tiny tables)."""
    engine = sa.create_engine(parse_url(url).url)
    try:
        with engine.begin() as conn:
            for table in sorted(TABLES):
                conn.execute(sa.text(f'DELETE FROM "{table}"'))
    finally:
        engine.dispose()


class Databases:
    """Migrated databases, made once per test session and reset for each test.

    Migrating costs ~0.1 s (SQLite) to ~0.4 s (PostgreSQL: a schema, DDL, a drop); so each test
    gets a copy of a migrated SQLite file, and the session's PostgreSQL schema with its tables
    emptied. The migration itself is tested on fresh databases in test_store_sql.py.
    """

    def __init__(self, root: Path) -> None:
        self._root = root
        self._sqlite_template: Path | None = None
        self._pg: str | None = None  # the URL of the session's schema
        self._stack = ExitStack()

    def sqlite(self, directory: Path) -> str:
        if self._sqlite_template is None:
            template = self._root / "template.db"
            SqlStore.open(f"sqlite:///{template}").close()
            self._sqlite_template = template
        target = directory / f"store-{uuid.uuid4().hex[:8]}.db"
        shutil.copyfile(self._sqlite_template, target)
        return f"sqlite:///{target}"

    def postgresql(self) -> str:
        require_pg()
        if self._pg is None:
            url = self._stack.enter_context(pg_schema())
            SqlStore.open(url).close()
            self._pg = url
        empty_tables(self._pg)
        return self._pg

    def backend(self, name: str, directory: Path) -> Backend:
        if name == "memory":
            return Backend(name, None)
        return Backend(name, self.sqlite(directory) if name == "sqlite" else self.postgresql())

    def close(self) -> None:
        self._stack.close()


# --- builders -------------------------------------------------------------------------------

POOL = PoolKey("eu-west", "H100")


def state(instance_id: str = "i-1", **changes: object) -> InstanceState:
    base: dict[str, object] = {
        "id": instance_id,
        "account_id": "acct-1",
        "pool": POOL,
        "gpus": 1,
        "capacity_class": CapacityClass.INTERRUPTIBLE,
    }
    return InstanceState(**{**base, **changes})  # type: ignore[arg-type]


def rich_state(instance_id: str = "i-rich") -> InstanceState:
    """Every field away from its default, nested runs included."""
    return InstanceState(
        id=instance_id,
        account_id="acct-ü",
        pool=PoolKey("us-east", "A100-80GB"),
        gpus=4,
        capacity_class=CapacityClass.ON_DEMAND,
        status=InstanceStatus.INTERRUPTING,
        auto_requeue=False,
        grace_period_s=45,
        enqueued_at=1_700_000_000,
        restart_count=2,
        placement_count=3,
        allocation_id="alloc-7",
        host_id="host-3",
        gpu_indices=(5, 1, 3, 0),
        waiting_for=frozenset({"alloc-2", "alloc-10"}),
        started_at=1_700_000_100,
        notice_at=1_700_000_200,
        deadline=1_700_000_245,
        drain_reason="reclaim",
        preempted_for="i-other",
        stop_requested=True,
        last_checkpoint_step=1234,
        last_checkpoint_at=1_700_000_190,
        interruption_count=2,
        last_interrupted_at=1_700_000_050,
        exit_code=-15,
        failure_reason="line 1\nline 2 «quoted»",
        completed_reported=True,
        runs=(Run("alloc-1", 1_699_999_000, 1_699_999_500), Run("alloc-7", 1_700_000_100)),
    )


def launch(instance_id: str = "i-1", **changes: object) -> LaunchRecord:
    base: dict[str, object] = {"instance_id": instance_id, "account_id": "acct-1", "argv": ("run",)}
    return LaunchRecord(**{**base, **changes})  # type: ignore[arg-type]

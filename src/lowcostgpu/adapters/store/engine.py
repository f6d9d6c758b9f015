"""Turning a `--db` URL into a ready SQLAlchemy engine, and checking a SQLite path first.

Two kinds of URL are accepted: `sqlite:///PATH` (the embedded default: WAL journal, a busy
timeout, foreign keys on, synchronous=FULL so a commit survives power loss too; transactions that
write begin IMMEDIATE so two writers queue instead of deadlocking on a lock upgrade) and
`postgresql://...` (the psycopg 3 driver; a pooled connection that sat idle for
`PING_AFTER_IDLE_S` is pinged before it is handed out, and replaced if the server dropped it).
The data directory is checked before anything is created, so a bad one fails with a clear error
and leaves nothing behind.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import URL, Engine, make_url
from sqlalchemy.exc import ArgumentError, DisconnectionError

from lowcostgpu.adapters.store.errors import StoreUnavailable
from lowcostgpu.domain.errors import InvalidRequest

SQLITE_BUSY_TIMEOUT_MS = 10_000
PING_AFTER_IDLE_S = 1.0
"""A PostgreSQL connection back in the pool for longer than this is pinged at its next checkout.

SQLAlchemy's `pool_pre_ping` pings at every checkout: a round trip per transaction, one of the
nine a launch's commit made (measured, docs/performance.md). A connection used a moment ago was
alive then; one that sat idle is where a restarted server or a dropped link shows, and that one
is still pinged. A connection that breaks within the second fails its statement instead
(`StoreUnavailable`), and SQLAlchemy replaces it."""
_CHECKED_IN_AT = "lowcostgpu_checked_in_at"
SQLITE_POOL_SIZE = 40
"""SQLite connections kept open: as many as the API's worker threads (anyio's default limit, 40)
that may read at once. With SQLAlchemy's default of 5, the 6th reader opened a connection (a file
open, four pragmas, the schema parsed at its first statement) and closed it again after use."""
WRITE = "lowcostgpu_write"
"""Execution option: this transaction writes (SQLite begins it IMMEDIATE)."""

_URL_HINT = "use sqlite:///PATH/TO/store.db or postgresql://USER@HOST:PORT/DATABASE"


@dataclass(frozen=True, slots=True)
class Target:
    url: URL
    shown: str  # the URL with its password hidden, for messages
    sqlite_path: Path | None  # None: PostgreSQL


def parse_url(text: str) -> Target:
    """The store URL `text`, normalized to a driver SQLAlchemy has; `InvalidRequest` otherwise."""
    try:
        url = make_url(text.strip())
    except ArgumentError:
        raise InvalidRequest(f"not a database URL: {text!r}", hint=_URL_HINT) from None
    shown = url.render_as_string(hide_password=True)
    if url.drivername in ("postgresql", "postgres", "postgresql+psycopg"):
        url = url.set(drivername="postgresql+psycopg")
        if not url.database:
            raise InvalidRequest(f"no database named in {shown}", hint=_URL_HINT)
        return Target(url, shown, None)
    if url.drivername in ("sqlite", "sqlite+pysqlite"):
        if not url.database or url.database == ":memory:" or url.database.startswith("file:"):
            raise InvalidRequest(
                f"{shown} names no database file",
                hint="give a file path, e.g. sqlite:////var/lib/lowcostgpu/store.db",
            )
        return Target(url.set(drivername="sqlite+pysqlite"), shown, Path(url.database))
    raise InvalidRequest(f"unsupported database {url.drivername!r} in {shown}", hint=_URL_HINT)


def check_sqlite_path(path: Path) -> None:
    """Fail clearly, before anything is created, if the database file cannot be made or written."""
    directory = path.parent.absolute()
    if not directory.is_dir():
        what = "is not a directory" if directory.exists() else "does not exist"
        raise StoreUnavailable(
            f"the data directory {directory} {what}",
            hint="create it (mkdir -p) or choose another data directory",
        )
    if path.exists() and not path.is_file():
        raise StoreUnavailable(
            f"the database path {path} exists but is not a file",
            hint="point the store at a file path, not at a directory",
        )
    if not os.access(directory, os.W_OK | os.X_OK):
        raise StoreUnavailable(
            f"the data directory {directory} is not writable by this user",
            hint="fix its permissions or choose another data directory",
        )
    if path.exists() and not os.access(path, os.R_OK | os.W_OK):
        raise StoreUnavailable(
            f"the database file {path} is not readable and writable by this user",
            hint="fix its permissions or choose another data directory",
        )


def create_engine(target: Target) -> Engine:
    if target.sqlite_path is None:
        engine = sa.create_engine(target.url, connect_args={"connect_timeout": 5})
        event.listen(engine, "checkin", _checked_in)
        event.listen(engine, "checkout", _ping_if_idle(engine.dialect))
        return engine
    engine = sa.create_engine(
        target.url,
        connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000},
        pool_size=SQLITE_POOL_SIZE,
        max_overflow=SQLITE_POOL_SIZE,
    )
    event.listen(engine, "connect", _sqlite_connect)
    event.listen(engine, "begin", _sqlite_begin)
    return engine


def _checked_in(_dbapi_connection: Any, record: Any) -> None:
    record.info[_CHECKED_IN_AT] = time.monotonic()


def _ping_if_idle(dialect: sa.Dialect) -> Callable[[Any, Any, Any], None]:
    """A checkout hook: ping a connection idle for `PING_AFTER_IDLE_S` or more; a dead one is
    refused with `DisconnectionError`, so that the pool drops it and hands out a fresh one."""

    def ping(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        since = record.info.get(_CHECKED_IN_AT)
        if since is None or time.monotonic() - since < PING_AFTER_IDLE_S:
            return  # new, or used a moment ago
        try:
            dialect.do_ping(dbapi_connection)
        except Exception as e:  # whatever the driver raises for a dead link
            raise DisconnectionError(f"a pooled connection failed its ping: {e}") from e

    return ping


def _sqlite_connect(dbapi_connection: Any, _record: Any) -> None:
    # Let SQLAlchemy's begin (below) issue BEGIN, instead of pysqlite's own implicit one.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA synchronous=FULL")
    cursor.close()


def _sqlite_begin(conn: sa.Connection) -> None:
    writes = conn.get_execution_options().get(WRITE, False)
    conn.exec_driver_sql("BEGIN IMMEDIATE" if writes else "BEGIN")


def lead_path(db: Path) -> Path:
    """The file whose lock is the single-writer lead of the SQLite database `db`."""
    return db.with_name(db.name + ".lead")


def remove_sqlite_files(path: Path) -> None:
    """Leave no partial state behind when a fresh database could not be set up."""
    for p in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        p.unlink(missing_ok=True)

"""Turning a `--db` URL into a ready SQLAlchemy engine, and checking a SQLite path first.

Two kinds of URL are accepted: `sqlite:///PATH` (the embedded default: WAL journal, a busy
timeout, foreign keys on, synchronous=FULL so a commit survives power loss too; transactions that
write begin IMMEDIATE so two writers queue instead of deadlocking on a lock upgrade) and
`postgresql://...` (the psycopg 3 driver). The data directory is checked before anything is
created, so a bad one fails with a clear error and leaves nothing behind.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import URL, Engine, make_url
from sqlalchemy.exc import ArgumentError

from lowcostgpu.adapters.store.errors import StoreUnavailable
from lowcostgpu.domain.errors import InvalidRequest

SQLITE_BUSY_TIMEOUT_MS = 10_000
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
        return sa.create_engine(target.url, pool_pre_ping=True, connect_args={"connect_timeout": 5})
    engine = sa.create_engine(target.url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000})
    event.listen(engine, "connect", _sqlite_connect)
    event.listen(engine, "begin", _sqlite_begin)
    return engine


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

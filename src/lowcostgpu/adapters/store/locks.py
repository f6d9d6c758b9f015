"""The single-writer lock: only one reconcile loop may act on a store at a time.

Both kinds are released by the operating system or the server when the holding process dies,
however it dies (SIGKILL included), so a restarted server never waits for a lock nobody holds:
- SQLite: an exclusive `flock` on `<database>.lead` next to the database file. `flock` locks
  belong to one open file, so a second store object (in this process or another) is refused.
  The descriptor is not inherited by workloads started later (Python opens it close-on-exec).
- PostgreSQL: a session-level advisory lock held on a connection of its own, kept open while
  the lead is held. Its key is derived from the database and schema, so stores in different
  schemas (parallel test runs) do not contend.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
from pathlib import Path
from typing import Protocol

import sqlalchemy as sa


class Lead(Protocol):
    def try_acquire(self) -> bool: ...
    def release(self) -> None: ...


def advisory_key(name: str, conn: sa.Connection) -> int:
    """A signed 64-bit advisory-lock key for `name` in the connection's database and schema."""
    where = conn.execute(sa.text("SELECT current_database() || '.' || current_schema()")).scalar()
    digest = hashlib.blake2b(f"lowcostgpu:{name}:{where}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


class FileLead:
    def __init__(self, path: Path) -> None:
        self._path = path
        self._fd: int | None = None

    def try_acquire(self) -> bool:
        if self._fd is not None:
            return True
        fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())  # for a human wondering who holds it
        return True

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)  # closing the only descriptor releases the flock


class AdvisoryLead:
    def __init__(self, engine: sa.Engine) -> None:
        self._engine = engine
        self._conn: sa.Connection | None = None

    def try_acquire(self) -> bool:
        if self._conn is not None:
            if self._alive(self._conn):
                return True
            self._drop()  # the session ended, and the server released its lock with it
        conn = self._engine.connect().execution_options(isolation_level="AUTOCOMMIT")
        try:
            key = advisory_key("lead", conn)
            got = conn.execute(sa.text("SELECT pg_try_advisory_lock(:k)"), {"k": key}).scalar()
        except BaseException:
            conn.close()
            raise
        if not got:
            conn.close()
            return False
        self._conn = conn
        return True

    def release(self) -> None:
        if self._conn is None:
            return
        try:
            key = advisory_key("lead", self._conn)
            self._conn.execute(sa.text("SELECT pg_advisory_unlock(:k)"), {"k": key})
        except sa.exc.DBAPIError:
            pass  # the session is gone, and its lock with it
        finally:
            self._drop()

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.invalidate()  # never hand a lock-holding session back to the pool
                conn.close()
            except sa.exc.DBAPIError:
                pass

    @staticmethod
    def _alive(conn: sa.Connection) -> bool:
        try:
            conn.execute(sa.text("SELECT 1"))
        except sa.exc.DBAPIError:
            return False
        return True

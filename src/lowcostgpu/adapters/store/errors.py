"""Store failures in the control plane's error tree, and the one place driver errors are translated.

Callers above the store never see a SQLAlchemy or psycopg exception: `translated` turns each into
a `StoreUnavailable` that names the database (password hidden) and says what to do.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import exc

from lowcostgpu.domain.errors import LowcostgpuError


class StoreUnavailable(LowcostgpuError):
    """The database cannot be opened, reached or written; retrying may help once it is fixed."""

    code = "store_unavailable"


class StoreDataError(LowcostgpuError):
    """A stored row cannot be read back (written by a newer version, or edited by hand)."""

    code = "store_data_invalid"


@contextmanager
def translated(where: str) -> Iterator[None]:
    """Re-raise every SQLAlchemy/driver error as a `StoreUnavailable` about `where`."""
    try:
        yield
    except LowcostgpuError:
        raise
    except exc.OperationalError as e:
        detail = _first_line(e.orig if e.orig is not None else e)
        if "locked" in detail or "busy" in detail:
            raise StoreUnavailable(
                f"the database at {where} stayed locked by another writer: {detail}",
                hint="retry; if it persists, look for a process holding a long transaction",
            ) from None
        raise StoreUnavailable(
            f"cannot reach the database at {where}: {detail}",
            hint="check that the server is running and the URL, user and permissions are right",
        ) from None
    except exc.SQLAlchemyError as e:
        detail = _first_line(getattr(e, "orig", None) or e)
        if "not a database" in detail:
            raise StoreUnavailable(
                f"{where} is not a SQLite database: {detail}",
                hint="move the file away or point the store at another path",
            ) from None
        raise StoreUnavailable(
            f"the database at {where} refused an operation: {detail}",
            hint="check that the database is not read-only and its schema was not edited by hand",
        ) from None


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__

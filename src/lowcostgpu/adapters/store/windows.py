"""Reads of a time window, oldest first, or only its newest N: what the usage and ledger reads
share (`Store.usage`, `Store.ledger`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from lowcostgpu.domain.capacity import Timestamp


def within(
    q: sa.Select[Any], column: sa.Column[Any], since: Timestamp | None, until: Timestamp | None
) -> sa.Select[Any]:
    """`q` kept to rows whose `column` is in [since, until) (either end open when None)."""
    if since is not None:
        q = q.where(column >= since)
    if until is not None:
        q = q.where(column < until)
    return q


def oldest_first(
    conn: sa.Connection,
    q: sa.Select[Any],
    order: Sequence[sa.ColumnElement[Any]],
    last: int | None,
) -> list[sa.RowMapping]:
    """The rows of `q` in `order`; only the newest `last` of them (read newest first with a
    LIMIT, then reversed: O(last) through an index on the order) when it is given."""
    if last is None:
        return list(conn.execute(q.order_by(*order)).mappings())
    newest = q.order_by(*(o.desc() for o in order)).limit(max(0, last))
    return list(reversed(conn.execute(newest).mappings().all()))

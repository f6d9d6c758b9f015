"""Many rows in one PostgreSQL statement of constant text: one array parameter per column.

SQLAlchemy sends a list of rows to psycopg either as a pipelined `executemany` (a statement per
row: at a metering pass's 250 watermarks a commit, ~0.3 ms of Python each) or, with RETURNING,
as one multi-row VALUES whose text changes with the row count, which psycopg parses anew each
time (2.7 s of Python for 50,000 usage records). `INSERT … SELECT * FROM unnest(:col, …)` is
one statement whose text never changes: parsed once, the rows sent as arrays. The metering pass
runs beside the requests, whose interpreter lock it shares, so its Python time is theirs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import sqlalchemy as sa


def unnest_rows(table: sa.Table) -> str:
    """`SELECT * FROM unnest(...)` of `table`'s columns, in order, each an array parameter
    named after its column (`arrays` makes them)."""
    typed = (f"CAST(:{c.name} AS {_pg_type(c)}[])" for c in table.columns)
    return f"SELECT * FROM unnest({', '.join(typed)})"


def insert_rows(table: sa.Table) -> str:
    """`INSERT INTO table (its columns) SELECT * FROM unnest(...)`, to end with ON CONFLICT."""
    names = ", ".join(c.name for c in table.columns)
    return f"INSERT INTO {table.name} ({names}) {unnest_rows(table)}"


def arrays(table: sa.Table, rows: Iterable[Mapping[str, Any]]) -> dict[str, list[Any]]:
    """The parameters of `unnest_rows`: one list per column of `table`."""
    found = list(rows)
    return {c.name: [r[c.name] for r in found] for c in table.columns}


def _pg_type(column: sa.Column[Any]) -> str:
    if isinstance(column.type, sa.BigInteger):
        return "bigint"
    if isinstance(column.type, sa.Text):
        return "text"
    raise TypeError(f"no array type for column {column.name} ({column.type})")

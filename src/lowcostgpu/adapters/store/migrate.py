"""Bringing a database to the newest schema with Alembic, programmatically, on every open.

The whole upgrade runs in one transaction that first takes a lock (SQLite: BEGIN IMMEDIATE;
PostgreSQL: a transaction-level advisory lock), so two servers opening a fresh database at once
do not both create the tables: the second waits, then finds the schema at head and does nothing.
"""

from __future__ import annotations

from importlib.resources import files

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util.exc import CommandError

from lowcostgpu.adapters.store.engine import WRITE, Target
from lowcostgpu.adapters.store.errors import StoreUnavailable
from lowcostgpu.adapters.store.locks import advisory_key

SCRIPT_LOCATION = str(files("lowcostgpu.adapters.store").joinpath("migrations"))


def alembic_config(connection: sa.Connection | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", SCRIPT_LOCATION)
    config.attributes["connection"] = connection
    return config


def head_revision() -> str | None:
    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def current_revision(engine: sa.Engine) -> str | None:
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def upgrade_to_head(engine: sa.Engine) -> None:
    with engine.connect().execution_options(**{WRITE: True}) as conn, conn.begin():
        if conn.dialect.name == "postgresql":
            key = advisory_key("migrate", conn)
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": key})
        command.upgrade(alembic_config(conn), "head")


def migrate_or_refuse(engine: sa.Engine, target: Target) -> None:
    """`upgrade_to_head`, or `StoreUnavailable` for a database this version cannot migrate."""
    try:
        upgrade_to_head(engine)
    except CommandError as e:
        raise StoreUnavailable(
            f"cannot bring the database at {target.shown} to this version's schema: {e}",
            hint="the database was probably written by a newer lowcostgpu; upgrade this one",
        ) from None

"""Alembic environment: runs on the connection `lowcostgpu.adapters.store.migrate` hands over.

There is no alembic.ini and no URL here: the store opens the connection (with its locks and
pragmas) and passes it in `config.attributes["connection"]`, already inside a transaction.
"""

from __future__ import annotations

from alembic import context

from lowcostgpu.adapters.store.schema import metadata

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()

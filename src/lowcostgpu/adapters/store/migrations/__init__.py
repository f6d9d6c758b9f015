"""Alembic migrations of the store's schema; run by `SqlStore.open`, never by hand."""

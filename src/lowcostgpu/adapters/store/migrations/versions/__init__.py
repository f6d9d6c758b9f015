"""One module per schema revision, applied in order by Alembic."""

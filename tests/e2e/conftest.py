"""Stores for the end-to-end tests: a SQLite file, and a fresh PostgreSQL database per test."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/test"


def _pg_or_skip() -> object:
    try:
        import psycopg

        return psycopg.connect(PG_ADMIN, autocommit=True, connect_timeout=3)
    except Exception as exc:
        if os.environ.get("CI"):
            pytest.fail(f"PostgreSQL at 127.0.0.1:5432 is required in CI: {exc}")
        pytest.skip(f"no PostgreSQL at 127.0.0.1:5432: {exc}")


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'lowcostgpu.db'}"
        return
    admin = _pg_or_skip()
    name = f"lcg_e2e_{secrets.token_hex(4)}"
    admin.execute(f"CREATE DATABASE {name}")  # type: ignore[attr-defined]
    try:
        yield f"postgresql://postgres@127.0.0.1:5432/{name}"
    finally:
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")  # type: ignore[attr-defined]
        admin.close()  # type: ignore[attr-defined]

"""Fixtures of the store suite; see `store_support` for the backends."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from store_support import BACKENDS, Backend, Databases

from lowcostgpu.ports.store import Store


@pytest.fixture(scope="session")
def databases(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Databases]:
    dbs = Databases(tmp_path_factory.mktemp("store-templates"))
    yield dbs
    dbs.close()


@pytest.fixture(params=BACKENDS)
def backend(
    request: pytest.FixtureRequest, databases: Databases, tmp_path: Path
) -> Iterator[Backend]:
    b = databases.backend(request.param, tmp_path)
    yield b
    b.close_all()


@pytest.fixture
def store(backend: Backend) -> Store:
    return backend.open()


@pytest.fixture(params=["sqlite", "postgresql"])
def sql_backend(
    request: pytest.FixtureRequest, databases: Databases, tmp_path: Path
) -> Iterator[Backend]:
    b = databases.backend(request.param, tmp_path)
    yield b
    b.close_all()

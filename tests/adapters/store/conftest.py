"""Fixtures of the store suite; see `store_support` for the backends."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from store_support import BACKENDS, Backend, backend_for

from lowcostgpu.ports.store import Store


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    with backend_for(request.param, tmp_path) as b:
        yield b


@pytest.fixture
def store(backend: Backend) -> Store:
    return backend.open()


@pytest.fixture(params=["sqlite", "postgresql"])
def sql_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    with backend_for(request.param, tmp_path) as b:
        yield b

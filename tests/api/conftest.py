"""The `api` fixture: one real server per test module (see `api_server`)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from api_server import Api, serving


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    yield from serving(tmp_path_factory)

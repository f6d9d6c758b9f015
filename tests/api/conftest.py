"""The `api` fixture: one real server per test module (see `api_server`)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from api_server import ADMIN_KEY, Api, _kill_workloads, free_port, kill_workloads, serving

__all__ = ["ADMIN_KEY", "Api", "_kill_workloads", "free_port", "kill_workloads"]


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    yield from serving(tmp_path_factory)

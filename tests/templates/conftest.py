from __future__ import annotations

from collections.abc import Iterator

import pytest

from lowcostgpu.sdk.testing import FakeMetadata, serve_metadata


@pytest.fixture
def metadata_server() -> Iterator[FakeMetadata]:
    with serve_metadata() as state:
        yield state

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest

from lowcostgpu.sdk.testing import FakeMetadata, ManualClock, serve_metadata


@pytest.fixture
def metadata_server() -> Iterator[FakeMetadata]:
    with serve_metadata() as state:
        yield state


@pytest.fixture
def restore_sigterm() -> Iterator[None]:
    """Tests that install a SIGTERM handler must not leave it in the pytest process."""
    previous = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, previous)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()

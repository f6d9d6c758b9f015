"""The real clock and the id source: the only places that read wall time or randomness."""

from __future__ import annotations

import secrets
import time

from lowcostgpu.domain.capacity import Timestamp


class SystemClock:
    def now(self) -> Timestamp:
        return int(time.time())


class RandomIds:
    """Ids like `i-b3e19d02`: a prefix and 8 random hex digits (4 billion per prefix)."""

    def new_id(self, prefix: str) -> str:
        return f"{prefix}-{secrets.token_hex(4)}"


class FixedClock:
    """A clock that says what it is told: for tests and the simulator's wiring."""

    def __init__(self, now: Timestamp = 0) -> None:
        self.at = now

    def now(self) -> Timestamp:
        return self.at

    def advance(self, seconds: int) -> None:
        self.at += seconds

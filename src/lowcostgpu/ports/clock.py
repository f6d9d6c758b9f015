"""Time and ids: the only sources of change the core does not see on its own."""

from __future__ import annotations

from typing import Protocol

from lowcostgpu.domain.capacity import Timestamp


class Clock(Protocol):
    def now(self) -> Timestamp:
        """Whole seconds since the Unix epoch, UTC."""
        ...


class IdSource(Protocol):
    def new_id(self, prefix: str) -> str:
        """A fresh id such as `i-b3e19d02`; never repeats within a store."""
        ...

"""What readers see of the plane: the live state as last written, or a standby's load of it.

Reads take no decision and, on the leader, no lock: they get the engine state of the last
decision *written* (`app.decider.Decider.view`), which is immutable. A standby keeps no live
state (it decides nothing), so it reads the store, and its reads share one load for a while
rather than paying one each. The workloads' metadata endpoint reads its notices here too.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from lowcostgpu.app.context import PlaneContext
from lowcostgpu.app.live import LiveState
from lowcostgpu.core.drain import interruption_notice
from lowcostgpu.core.engine import EngineState
from lowcostgpu.core.instance_state import DRAINING
from lowcostgpu.domain.capacity import Timestamp

STANDBY_VIEW_S = 2  # how long a standby's reads share one load of the live rows


class Views:
    """The reads of the plane. `leader_view`: the live state as last written (`Decider.view`)."""

    def __init__(self, context: PlaneContext, *, leader_view: Callable[[], EngineState]) -> None:
        self._context = context
        self._leader_view = leader_view
        self._standby_lock = threading.Lock()
        self._standby_state: tuple[Timestamp, EngineState] | None = None  # (loaded at, state)

    def snapshot(self) -> EngineState:
        """The engine state as of the last decision written: immutable, so readers need no lock.
        A standby reads the store instead (it keeps no live state)."""
        if self._context.standby:
            return self._standby_view()
        return self._leader_view()

    def _standby_view(self) -> EngineState:
        """A standby's reads share one load of the live rows for `STANDBY_VIEW_S` (a load costs
        seconds at 110,000 live: not one per request)."""
        ctx = self._context
        with self._standby_lock:
            now = ctx.clock.now()
            kept = self._standby_state
            if kept is None or now - kept[0] >= STANDBY_VIEW_S:
                kept = self._standby_state = (now, LiveState.load(ctx.store, ctx.hosts).state)
            return kept[1]

    def interruption(self, instance_id: str) -> dict[str, Any] | None:
        """The metadata endpoint's answer for a workload: its notice, or None (404)."""
        state = self._context.store.instance(instance_id).state
        if state.status not in DRAINING:
            return None
        return interruption_notice(state.notice_at, state.deadline)

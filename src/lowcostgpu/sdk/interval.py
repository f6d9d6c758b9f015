"""When to checkpoint: every N steps, every T seconds, or adaptively (Young–Daly).

Young (1974) and Daly (2006): with checkpoint cost C and mean time between interruptions M, the
interval that minimises expected lost plus overhead time is about sqrt(2·C·M). Cost is measured
on this job; M comes from the fleet's interruption statistics on the metadata endpoint.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

DEFAULT_MIN_INTERVAL_S = 30.0
DEFAULT_MAX_INTERVAL_S = 3600.0
FLEET_REFRESH_S = 300.0
# The cost estimate follows recent saves but is not thrown off by one slow save.
COST_SMOOTHING = 0.5


def young_daly_interval_s(checkpoint_cost_s: float, mtbi_s: float) -> float:
    """sqrt(2 × C × M), the first-order optimal checkpoint interval, in seconds."""
    if checkpoint_cost_s < 0 or mtbi_s <= 0:
        raise ValueError(
            f"need checkpoint_cost_s >= 0 and mtbi_s > 0, got {checkpoint_cost_s}, {mtbi_s}"
        )
    return math.sqrt(2.0 * checkpoint_cost_s * mtbi_s)


def mtbi_from_fleet(fleet: Mapping[str, Any] | None) -> float | None:
    """Mean time between interruptions (s) from `/fleet`; None if the fleet saw none yet.

    The median is preferred (robust to bursts); otherwise 3600 / interruptions_per_hour.
    """
    if not fleet:
        return None
    median = fleet.get("median_time_between_interruptions_s")
    if isinstance(median, int | float) and not isinstance(median, bool) and median > 0:
        return float(median)
    rate = fleet.get("interruptions_per_hour")
    if isinstance(rate, int | float) and not isinstance(rate, bool) and rate > 0:
        return 3600.0 / float(rate)
    return None


class IntervalPolicy:
    """Decides `due(step)`; holds the last save point and the measured checkpoint cost."""

    def __init__(
        self,
        every_steps: int | None = None,
        every_s: float | None = None,
        adaptive: bool = False,
        fleet_source: Callable[[], Mapping[str, Any] | None] | None = None,
        clock: Callable[[], float] | None = None,
        min_interval_s: float = DEFAULT_MIN_INTERVAL_S,
        max_interval_s: float = DEFAULT_MAX_INTERVAL_S,
    ) -> None:
        _check_positive("every_steps", every_steps)
        _check_positive("every_s", every_s)
        if not 0 < min_interval_s <= max_interval_s:
            raise ValueError(
                f"need 0 < min_interval_s <= max_interval_s, got {min_interval_s}, {max_interval_s}"
            )
        if clock is None:
            raise ValueError("IntervalPolicy needs a clock")
        self.every_steps = every_steps
        self.every_s = every_s
        self.adaptive = adaptive
        self.min_interval_s = min_interval_s
        self.max_interval_s = max_interval_s
        self._fleet_source = fleet_source
        self._clock = clock
        self.last_step = 0
        self.last_save_at = clock()
        self.cost_s: float | None = None
        self._mtbi_s: float | None = None
        self._fleet_checked_at: float | None = None

    def record_save(self, step: int, cost_s: float) -> None:
        """A checkpoint of `step` was taken and blocked the loop for `cost_s` seconds."""
        self.last_step = step
        self.last_save_at = self._clock()
        if self.cost_s is None:
            self.cost_s = cost_s
        else:
            self.cost_s = COST_SMOOTHING * cost_s + (1 - COST_SMOOTHING) * self.cost_s

    def resume_from(self, step: int) -> None:
        """Count steps from the checkpoint we resumed from, not from zero."""
        self.last_step = step

    def due(self, step: int) -> bool:
        if self.every_steps is not None and step - self.last_step >= self.every_steps:
            return True
        elapsed_s = self._clock() - self.last_save_at
        if self.every_s is not None and elapsed_s >= self.every_s:
            return True
        return self.adaptive and elapsed_s >= self.adaptive_interval_s()

    def adaptive_interval_s(self) -> float:
        """Young–Daly interval within [min, max]; min until a first save has measured the cost."""
        if self.cost_s is None:
            return self.min_interval_s
        mtbi_s = self._mtbi()
        if mtbi_s is None:
            # No interruption seen on the fleet: fall back to the user's interval, else the max.
            return self.every_s if self.every_s is not None else self.max_interval_s
        interval_s = young_daly_interval_s(self.cost_s, mtbi_s)
        return min(max(interval_s, self.min_interval_s), self.max_interval_s)

    def _mtbi(self) -> float | None:
        now = self._clock()
        stale = self._fleet_checked_at is None or now - self._fleet_checked_at >= FLEET_REFRESH_S
        if self._fleet_source is not None and stale:
            self._fleet_checked_at = now
            fresh = mtbi_from_fleet(self._fleet_source())
            if fresh is not None:
                self._mtbi_s = fresh
        return self._mtbi_s


def _check_positive(name: str, value: float | None) -> None:
    if value is not None and value <= 0:
        raise ValueError(f"{name} must be positive (or None to disable it), got {value}")

"""The fleet's typical checkpoint age, learnt from the checkpoints instances report.

The fairness policy (`core.fairness`) charges an allocation that never reported a checkpoint the
age a typical reporter's last checkpoint would have; a policy is an immutable value, so whoever
drives the engine (the server's plane, the simulator) learns the figure here from the instance
states before and after each report and hands the engine an updated copy. The intervals are kept
in memory (the last `window` of them): a restarted server starts again from the policy's default,
and the figure settles after a few dozen reports. The window is also kept sorted, one insertion
and at most one removal per interval (a binary search and a move of at most `window` ints),
so that the plane's refresh after every checkpoint report, under its decision lock, reads the
median without sorting the window.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections import deque
from dataclasses import replace
from typing import Final

from lowcostgpu.core.fairness import FairLeastWorkLost, typical_age_of_sorted
from lowcostgpu.core.lifecycle import InstanceState
from lowcostgpu.core.scheduler import SchedulerConfig
from lowcostgpu.domain.errors import InvalidRequest

WINDOW: Final = 2000


class CheckpointAges:
    def __init__(self, window: int = WINDOW, refresh_every: int = 1) -> None:
        if window < 1 or refresh_every < 1:
            raise InvalidRequest("CheckpointAges: window and refresh_every must be ≥ 1")
        self.intervals_s: deque[int] = deque(maxlen=window)  # oldest first
        self._ordered_s: list[int] = []  # the same intervals, ascending
        self.refresh_every = refresh_every  # new intervals between two updates of the policy
        self._new = 0

    def learn(self, before: InstanceState, after: InstanceState) -> None:
        """One report: the time since the previous checkpoint of the same run, if there was one
        (an interval never spans a requeue: the restart's first save measures nothing)."""
        if (
            before.allocation_id is not None
            and before.allocation_id == after.allocation_id
            and before.last_checkpoint_at is not None
            and after.last_checkpoint_at is not None
            and after.last_checkpoint_at > before.last_checkpoint_at
        ):
            self._add(after.last_checkpoint_at - before.last_checkpoint_at)

    def _add(self, interval_s: int) -> None:
        """Append to the window (positive: `learn` takes only a later save) and to its sorted
        copy; the interval the full window drops leaves the copy too."""
        if len(self.intervals_s) == self.intervals_s.maxlen:
            del self._ordered_s[bisect_left(self._ordered_s, self.intervals_s[0])]
        self.intervals_s.append(interval_s)
        insort(self._ordered_s, interval_s)
        self._new += 1

    def applied(self, config: SchedulerConfig) -> SchedulerConfig:
        """The config whose fairness policy (if that is the policy) uses what was learnt, once
        `refresh_every` new intervals have come in; until then, `config` as it is."""
        policy = config.policy
        if not isinstance(policy, FairLeastWorkLost) or self._new < self.refresh_every:
            return config
        self._new = 0
        aged = policy.with_typical_age(typical_age_of_sorted(self._ordered_s))
        return config if aged is policy else replace(config, policy=aged)

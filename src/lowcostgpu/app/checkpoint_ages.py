"""The fleet's typical checkpoint age, learnt from the checkpoints instances report.

The fairness policy (`core.fairness`) charges an allocation that never reported a checkpoint the
age a typical reporter's last checkpoint would have; the pure core cannot watch reports arrive,
so the shell learns the figure here and hands the policy an updated copy. The intervals are kept
in memory (the last `window` of them): a restart starts again from the policy's default, and the
figure settles after a few dozen reports.
"""

from __future__ import annotations

from collections import deque
from dataclasses import replace
from typing import Final

from lowcostgpu.core.fairness import FairLeastWorkLost, typical_checkpoint_age_s
from lowcostgpu.core.lifecycle import InstanceState
from lowcostgpu.core.scheduler import SchedulerConfig

WINDOW: Final = 2000


class CheckpointAges:
    def __init__(self, window: int = WINDOW) -> None:
        self.intervals_s: deque[int] = deque(maxlen=window)

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
            self.intervals_s.append(after.last_checkpoint_at - before.last_checkpoint_at)

    def applied(self, config: SchedulerConfig) -> SchedulerConfig:
        """The config whose fairness policy (if that is the policy) uses what was learnt."""
        policy = config.policy
        if not isinstance(policy, FairLeastWorkLost) or not self.intervals_s:
            return config
        aged = policy.with_typical_age(typical_checkpoint_age_s(self.intervals_s))
        return config if aged is policy else replace(config, policy=aged)

"""How long recent runs lasted, per pool: what a queued instance's ETA is estimated from.

Kept as runs close (the plane tells it what each commit wrote), so the ETA never reads history.
A restarted server knows nothing until runs close again: until then the ETA is None (unknown)
rather than a guess.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable, Mapping

from lowcostgpu.core.lifecycle import InstanceState
from lowcostgpu.domain.capacity import PoolKey

SAMPLE = 200  # recent runs per pool the mean is taken from


class RecentRuns:
    def __init__(self, sample: int = SAMPLE) -> None:
        self._sample = sample
        self._by_pool: dict[PoolKey, deque[int]] = {}
        self._mutex = threading.Lock()  # read by API threads while the decider writes

    def closed(self, before: Mapping[str, InstanceState], after: Iterable[InstanceState]) -> None:
        """Note the runs that closed between `before` and `after` (the instances written)."""
        for inst in after:
            if not inst.runs or inst.runs[-1].billed_until is None:
                continue
            old = before.get(inst.id)
            if old is not None and old.runs and old.runs[-1] == inst.runs[-1]:
                continue  # closed earlier
            run = inst.runs[-1]
            assert run.billed_until is not None
            with self._mutex:
                runs = self._by_pool.setdefault(inst.pool, deque(maxlen=self._sample))
                runs.append(run.billed_until - run.started_at)

    def mean_s(self, pool: PoolKey) -> int | None:
        """The mean length of the pool's recent closed runs, or None before the first."""
        with self._mutex:
            runs = list(self._by_pool.get(pool, ()))
        return round(sum(runs) / len(runs)) if runs else None

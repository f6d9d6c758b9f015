"""Seeded choices shared by the trace readers: which checkpoint habit a job has, which pool.

Drawn from a hash of (seed, job name), never from a global random state, so that a job keeps its
habit whatever else is in the trace, and the same seed gives the same trace.
"""

from __future__ import annotations

from collections.abc import Sequence
from hashlib import blake2b
from typing import Final

from lowcostgpu.domain.capacity import PoolKey

# (share in tenths, checkpoint interval s, checkpoint cost s): the preemptible jobs' habits.
# 4/10 save every 10 min in 30 s (they save again at the notice, well inside the grace period);
# 3/10 save every hour, and a save takes 400 s — longer than the 300 s grace, so at a notice
# they are killed and keep only their last hourly save; 3/10 never save (restart from zero).
CHECKPOINT_HABITS: Final = (
    (4, 600, 30),
    (3, 3600, 400),
    (3, None, 0),
)


def draw(seed: int, name: str, salt: str = "") -> float:
    """A number in [0, 1) fixed by (seed, name, salt)."""
    digest = blake2b(f"{seed}:{salt}:{name}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def checkpoint_habit(
    seed: int,
    name: str,
    habits: Sequence[tuple[int, int | None, int]] = CHECKPOINT_HABITS,
    salt: str = "checkpoint",
) -> tuple[int | None, int]:
    """(checkpoint_interval_s or None, checkpoint_cost_s) for a preemptible job, drawn from
    `habits` ((share, interval, cost), shares in any whole unit: tenths, per cent)."""
    point = int(draw(seed, name, salt) * sum(share for share, _, _ in habits))
    for share, interval, cost in habits:
        if point < share:
            return interval, cost
        point -= share
    raise AssertionError("a draw below the shares' total falls in one")  # pragma: no cover


def weighted_pool(seed: int, name: str, pools: Sequence[tuple[PoolKey, int]]) -> PoolKey | None:
    """One of `pools` (pool, weight), with probability proportional to its weight."""
    total = sum(weight for _, weight in pools)
    if total <= 0:
        return None
    point = draw(seed, name, "pool") * total
    for pool, weight in pools:
        if point < weight:
            return pool
        point -= weight
    return pools[-1][0]

"""The victim-choice rules by name: ours, and the peers' rules so they can be compared with it.

Every policy here plugs into the same search (`core.victims.choose_victims`): the minimum runtime
still protects fresh starts first, then the policy's cost decides, then fewest victims, least
recently interrupted and ids. Only the cost differs, so a comparison in the simulator measures the
rule and nothing else.

- `fair-least-work-lost` (ours, `core.fairness`, the default): work lost (non-reporters at the
  fleet's typical checkpoint age) + requeue cost + an interruption-history term.
- `least-work-lost` (DESIGN.md §1): GPU-seconds since the last reported checkpoint.
- `youngest-first` (kube-scheduler, Kueue): reclaim the most recently started allocation first,
  because it has run least. It ignores checkpoints.
- `lowest-priority` (Slurm's default): the lowest `Allocation.priority` first, then a seeded
  pseudo-random order among equals.
- `random`: a seeded pseudo-random order.

There is no randomness in the core: "random" is a hash of (seed, allocation id), so the same seed
and the same inputs always give the same victims, and a restarted allocation (new id) draws anew.
"""

from __future__ import annotations

from dataclasses import dataclass
from hashlib import blake2b
from typing import ClassVar, Final

from lowcostgpu.core.fairness import FAIR_LEAST_WORK_LOST
from lowcostgpu.core.host_state import HostState
from lowcostgpu.core.victim_policy import LEAST_WORK_LOST, NO_UNPROTECTED_SET, VictimPolicy
from lowcostgpu.domain.capacity import Allocation, Timestamp
from lowcostgpu.domain.errors import InvalidRequest

DRAW_BITS: Final = 32
_DRAW_MASK: Final = (1 << DRAW_BITS) - 1
# Priorities are shifted into [0, 2**16) so that the cost stays non-negative.
PRIORITY_OFFSET: Final = 1 << 15
_PRIORITY_MAX: Final = (1 << 16) - 1


def seeded_draw(seed: int, allocation_id: str) -> int:
    """A pseudo-random 32-bit number fixed by (seed, allocation id): same inputs, same draw."""
    digest = blake2b(f"{seed}:{allocation_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") & _DRAW_MASK


@dataclass(frozen=True, slots=True)
class YoungestFirst:
    """kube-scheduler and Kueue: the most recently started allocation goes first.

    The cost is the victim's runtime in seconds (since its latest start), so the youngest is the
    cheapest; a set costs the sum of its members' runtimes.
    """

    name: str = "youngest-first"
    pure_cost: ClassVar[bool] = True  # `core.victim_policy.VictimPolicy`

    def cost(self, alloc: Allocation, now: Timestamp) -> int:
        return alloc.runtime_s(now)

    def describe(self, cost: int) -> str:
        return f"{cost} s of runtime (youngest first)"

    def lower_bound(
        self, host: HostState, deficit: int, now: Timestamp, started_by: Timestamp
    ) -> int:
        """Any unprotected set holds a victim started at or before the latest such start."""
        starts = [start for _, start in host.gpu_marks if start <= started_by]
        if len(starts) < deficit:
            return NO_UNPROTECTED_SET
        return max(0, now - max(starts))

    def order_bound(self, host: HostState, deficit: int, now: Timestamp) -> int:
        return 0  # hosts are ordered by progress mark, which starts do not follow


@dataclass(frozen=True, slots=True)
class LowestPriority:
    """Slurm: the lowest priority first, then a seeded pseudo-random order among equals.

    The cost packs the shifted priority above a 32-bit draw, so priority always dominates.
    """

    seed: int = 0
    name: str = "lowest-priority"
    pure_cost: ClassVar[bool] = True  # `core.victim_policy.VictimPolicy`

    def cost(self, alloc: Allocation, now: Timestamp) -> int:
        rank = min(max(alloc.priority + PRIORITY_OFFSET, 0), _PRIORITY_MAX)
        return (rank << DRAW_BITS) | seeded_draw(self.seed, alloc.id)

    def describe(self, cost: int) -> str:
        rank = (cost >> DRAW_BITS) - PRIORITY_OFFSET
        return f"priority {rank} (then a seeded draw, {cost & _DRAW_MASK})"

    def lower_bound(
        self, host: HostState, deficit: int, now: Timestamp, started_by: Timestamp
    ) -> int:
        return 0  # priorities are not indexed per host: every host is examined

    def order_bound(self, host: HostState, deficit: int, now: Timestamp) -> int:
        return 0


@dataclass(frozen=True, slots=True)
class SeededRandom:
    """A pseudo-random victim, from a hash of the seed and the allocation id."""

    seed: int = 0
    name: str = "random"
    pure_cost: ClassVar[bool] = True  # `core.victim_policy.VictimPolicy`

    def cost(self, alloc: Allocation, now: Timestamp) -> int:
        return seeded_draw(self.seed, alloc.id)

    def describe(self, cost: int) -> str:
        return f"a seeded draw of {cost}"

    def lower_bound(
        self, host: HostState, deficit: int, now: Timestamp, started_by: Timestamp
    ) -> int:
        return 0

    def order_bound(self, host: HostState, deficit: int, now: Timestamp) -> int:
        return 0


DEFAULT_POLICY_NAME: Final = "fair-least-work-lost"
POLICY_NAMES: Final = (
    DEFAULT_POLICY_NAME,
    "least-work-lost",
    "youngest-first",
    "lowest-priority",
    "random",
)


def policy_by_name(name: str = DEFAULT_POLICY_NAME, seed: int = 0) -> VictimPolicy:
    """The named policy; `seed` feeds the ones that draw pseudo-random numbers."""
    if name == DEFAULT_POLICY_NAME:
        return FAIR_LEAST_WORK_LOST
    if name == "least-work-lost":
        return LEAST_WORK_LOST
    if name == "youngest-first":
        return YoungestFirst()
    if name == "lowest-priority":
        return LowestPriority(seed)
    if name == "random":
        return SeededRandom(seed)
    raise InvalidRequest(
        f"unknown victim policy {name!r}", hint=f"use one of: {', '.join(POLICY_NAMES)}"
    )

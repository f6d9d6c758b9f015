"""Victim policies: the cost of reclaiming an allocation, and the plain rule `LeastWorkLost`.

The search (`core.victims.choose_victims`, `core.host_victims.cheapest_on_host`) compares victim
sets by one key and asks the policy only for its part of it: a victim's cost, and bounds on the
cost of a host's sets that let it skip hosts. That contract lives here, apart from the search,
because every policy (`core.policies`, `core.fairness`, the simulator's yardsticks) implements
it and none of them needs the search itself.

Policies are pure, with no randomness of their own: a policy that wants to look random hashes a
seed with the allocation id, so the same inputs always give the same victims.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, Protocol, cast

from lowcostgpu.core.host_state import SAVER_MARK, SAVER_SPAN, HostState
from lowcostgpu.domain.capacity import Allocation, Timestamp

NO_UNPROTECTED_SET = 2**62  # a bound that says: only sets with protected victims exist here


class VictimPolicy(Protocol):
    """The cost of reclaiming one allocation now; the set's cost is the sum."""

    @property
    def name(self) -> str: ...

    def cost(self, alloc: Allocation, now: Timestamp) -> int:
        """A non-negative cost; lower means a better victim."""
        ...

    def describe(self, cost: int) -> str:
        """The cost in words, for the `Preempted` event."""
        ...

    # A policy may also say `pure_cost = True` (a class attribute): its cost and shield are
    # functions of the allocation, `now` and the policy's own fields only, so a victim search
    # may be remembered for the same host state at the same moment (`choose_victims`). Without
    # it (a policy that reads the world outside, like the simulator's clairvoyant yardstick)
    # every search is made afresh.

    def lower_bound(
        self, host: HostState, deficit: int, now: Timestamp, started_by: Timestamp
    ) -> int:
        """A lower bound on the cost of any set of victims that started at or before
        `started_by` (so none is protected) and frees `deficit` GPUs on `host`.

        It lets the search skip hosts that cannot beat an unprotected choice already found.
        Return `NO_UNPROTECTED_SET` when no such set exists on the host, and 0 when the policy
        has no useful bound: every host is then examined.
        """
        ...

    def order_bound(self, host: HostState, deficit: int, now: Timestamp) -> int:
        """A lower bound that never decreases along the hosts' order by newest mark.

        The search walks hosts in that order and stops once this bound passes the best choice.
        Return 0 when the policy's cost does not follow that order: then every host is examined.
        """
        ...


class HistoryAwarePolicy(Protocol):
    """What a policy that weighs interruption history adds (`core.fairness`): a hard shield for
    some allocations, and a per-victim explanation for the `Preempted` event."""

    def shields(self, alloc: Allocation, now: Timestamp, min_runtime_s: int) -> bool:
        """True when the allocation must not be reclaimed now, whatever else happens."""
        ...

    def explain_victim(self, alloc: Allocation, now: Timestamp) -> str:
        """Why this victim costs what it costs, in words."""
        ...


Shield = Callable[[Allocation, Timestamp, int], bool]
# The least one GPU with this (progress mark, start) can cost at `now` under a policy.
GpuFloor = Callable[[Timestamp, Timestamp, Timestamp], int]


def gpu_floor_of(policy: VictimPolicy) -> GpuFloor | None:
    """The policy's per-GPU floor (`gpu_floor_s`), if it has one: it sharpens tie skipping."""
    floor: GpuFloor | None = getattr(policy, "gpu_floor_s", None)
    return floor


def history_aware(policy: VictimPolicy) -> HistoryAwarePolicy | None:
    """The policy's history hooks, if it has them.

    A plain attribute check: `isinstance` against a runtime-checkable Protocol walks the
    protocol's attributes on every call, which showed in the scheduler's profile.
    """
    return cast(HistoryAwarePolicy, policy) if hasattr(policy, "explain_victim") else None


def shield_of(policy: VictimPolicy) -> Shield | None:
    aware = history_aware(policy)
    return aware.shields if aware is not None else None


@dataclass(frozen=True, slots=True)
class LeastWorkLost:
    """DESIGN.md §1: the work a reclaim loses, GPU-seconds since the last reported checkpoint
    (a workload that believably saves at a notice loses its save time instead:
    `Allocation.lost_at_notice_gpu_s`)."""

    name: str = "least-work-lost"
    pure_cost: ClassVar[bool] = True  # see `VictimPolicy`

    def cost(self, alloc: Allocation, now: Timestamp) -> int:
        return alloc.lost_at_notice_gpu_s(now)

    def describe(self, cost: int) -> str:
        return f"{cost} GPU-s of work lost (since the last checkpoint, or saving at the notice)"

    def lower_bound(
        self, host: HostState, deficit: int, now: Timestamp, started_by: Timestamp
    ) -> int:
        """Each freed GPU loses at least `now − mark` of the latest marks on the host (a
        believed saver's mark holds its save time: exactly that, `core.host_state.saver_mark`)."""
        if host.reclaimable_gpus and host.mark_prefix[1] >= SAVER_MARK:  # savers here
            floors = [
                self.gpu_floor_s(mark, started_at, now)
                for mark, started_at in host.gpu_marks
                if started_at <= started_by
            ]
            return sum(sorted(floors)[:deficit]) if len(floors) >= deficit else NO_UNPROTECTED_SET
        if host.newest_start is not None and host.newest_start <= started_by:
            return max(0, deficit * now - host.mark_prefix[deficit])
        total, taken = 0, 0
        for mark, started_at in host.gpu_marks:
            if started_at <= started_by:
                total, taken = total + mark, taken + 1
                if taken == deficit:
                    return max(0, deficit * now - total)
        return NO_UNPROTECTED_SET

    def gpu_floor_s(self, mark: Timestamp, started_at: Timestamp, now: Timestamp) -> int:
        if mark >= SAVER_MARK:
            return SAVER_MARK + SAVER_SPAN - mark
        return max(0, now - mark)

    def order_bound(self, host: HostState, deficit: int, now: Timestamp) -> int:
        """No GPU on a host loses less than the time since the host's newest mark."""
        mark = host.newest_mark
        return 0 if mark is None else max(0, deficit * (now - mark))


LEAST_WORK_LOST = LeastWorkLost()

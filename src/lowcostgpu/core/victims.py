"""Victim choice: which preemptible allocations to reclaim for an on-demand request.

A victim set is compared by one lexicographic key, smallest first:

1. how many victims are still inside their minimum runtime (fresh starts are protected: they are
   taken only when no other set is possible at all),
2. the policy's cost (for `LeastWorkLost`: GPU-seconds of work lost since each victim's last
   reported checkpoint, else since its start; the default policy is `core.fairness`),
3. how many victims (fewer interruptions for the same work),
4. how recently the set's most recently interrupted member was interrupted (least recent first),
5. the victims' ids (a deterministic tie-break).

This module is the fleet-wide walk: which hosts to search, best first, and when to stop. The
best set on one host is `core.host_victims`; what a policy must provide (its cost and bounds) and
`LeastWorkLost` are `core.victim_policy`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from heapq import heappop, heappush
from operator import itemgetter
from typing import cast

from lowcostgpu.core.host_state import HostState
from lowcostgpu.core.host_victims import VictimChoice, cheapest_on_host
from lowcostgpu.core.victim_policy import (
    NO_UNPROTECTED_SET,
    GpuFloor,
    Shield,
    VictimPolicy,
    gpu_floor_of,
    shield_of,
)
from lowcostgpu.domain.capacity import Allocation, Timestamp


def _cheapest_once(
    host: HostState,
    gpus_needed: int,
    now: Timestamp,
    policy: VictimPolicy,
    min_runtime_s: int,
    shield: Shield | None,
    pure: bool,
) -> tuple[_Key, VictimChoice] | None:
    """`cheapest_on_host` with its choice's key, remembered on the host state for the moment
    `now` when the policy's cost is `pure_cost` (a function of the allocation and `now` only):
    requests that come in a burst at one moment (retries, a batch of launches) search again the
    hosts that the one before did not change, and get the same answer. Measured in the
    simulator's overloaded 10,000-GPU world, 99 % of the host searches were such repeats."""
    if pure:
        memo = host.searches_at(now)
        key = (gpus_needed, min_runtime_s, id(policy))
        seen = memo.get(key)
        if seen is not None:
            seen_policy, found = cast("_Remembered", seen)
            if seen_policy is policy:
                return None if found is None else (found[0], VictimChoice(host, *found[1:]))
    choice = cheapest_on_host(host, gpus_needed, now, policy, min_runtime_s, shield)
    if pure:  # the choice less its host: the host state holds the memo (no reference cycle)
        memo[key] = (policy, None if choice is None else (choice.key, *_without_host(choice)))
    return None if choice is None else (choice.key, choice)


def _without_host(choice: VictimChoice) -> tuple[tuple[Allocation, ...], int, int, Timestamp]:
    return choice.victims, choice.protected, choice.cost, choice.most_recent_interruption


@dataclass(frozen=True, slots=True)
class VictimSearch:
    """The choices examined, cheapest first, and what is known of the hosts not examined."""

    choices: tuple[VictimChoice, ...]
    skipped_hosts: int = 0
    skipped_lower_bound: int | None = None  # every skipped host would cost at least this

    @property
    def best(self) -> VictimChoice | None:
        return self.choices[0] if self.choices else None


_Key = tuple[int, int, int, Timestamp, tuple[str, ...], str]
# What a host state remembers of one search (`_cheapest_once`): the policy, and the choice less
# its host (the host state holds the memo: a choice that held the host would make a cycle).
_Remembered = tuple[VictimPolicy, tuple[_Key, tuple[Allocation, ...], int, int, Timestamp] | None]


def _tail_floor(
    host: HostState,
    deficit: int,
    started_by: Timestamp,
    gpu_floor: GpuFloor | None,
    now: Timestamp,
    best_key: _Key,
) -> tuple[int, Timestamp, tuple[str, ...]]:
    """What any unprotected victim set freeing `deficit` GPUs on `host` that ties on cost with
    the best choice (`best_key`) is at least on the rest of the key: the fewest victims that
    can, the least recent interruption among the candidates, and the least id among those
    started by `started_by` that can cost as little as the best (in a tie no member costs more
    than the whole set)."""
    least_id = host.least_candidate_id(started_by, best_key[4][0], gpu_floor, now, best_key[1])
    return (host.fewest_victims(deficit), host.min_candidate_interrupted_at, (least_id,))


def _beaten(best_key: _Key | None, bound: int, tail: tuple[object, ...]) -> bool:
    """No unprotected set that costs at least `bound` and sorts after `tail` beats the best
    unprotected choice found (`best_key`, None while there is none)."""
    return best_key is not None and (bound, *tail) > best_key[1 : 2 + len(tail)]


def _loses_on_first_id(
    best_key: _Key, order: int, fewest: int, recency: Timestamp, host: HostState
) -> bool:
    """The quick form of the tie check, for most tied hosts: its least candidate id of all
    already sorts after the best set's first id (no walk over the candidates)."""
    marks = host.candidate_marks
    return (
        order == best_key[1]
        and (fewest, recency) >= best_key[2:4]
        and bool(marks)
        and marks[0][0] > best_key[4][0]
    )


def choose_victims(
    hosts_by_mark: Iterable[HostState],
    gpus_needed: int,
    now: Timestamp,
    policy: VictimPolicy,
    min_runtime_s: int,
    most_free: int = 0,
) -> VictimSearch:
    """Search the hosts for the cheapest victim set and return the choices cheapest first.

    Best-first: hosts are searched in order of their `lower_bound` (then of what their sets are
    at least on the rest of the key), and a host is skipped as soon as that cannot beat the best
    unprotected choice found. `hosts_by_mark` (hosts with reclaimable GPUs, newest progress mark
    first; `most_free` is the most free GPUs on any of them) is only read as far as needed: along
    it the policy's `order_bound` never decreases and never exceeds a host's `lower_bound`. Hosts
    that tie on cost with the best choice are skipped by their cached least candidate id and
    interruption, without looking at their allocations: with a policy whose cost is often the
    same (a capped estimate), ties are the common case. The runners-up and the bound on the hosts
    not searched are what the `Preempted` event quotes as alternatives.
    """
    min_deficit = max(1, gpus_needed - most_free)
    cutoff = now - min_runtime_s
    shield, gpu_floor = shield_of(policy), gpu_floor_of(policy)
    pure = bool(getattr(policy, "pure_cost", False))
    stream = iter(hosts_by_mark)
    upcoming: HostState | None = next(stream, None)
    # (lower bound, fewest victims, least interruption, host id, host): the key's order.
    heap: list[tuple[int, int, Timestamp, str, HostState]] = []
    found: list[tuple[_Key, VictimChoice]] = []
    best: tuple[_Key, VictimChoice] | None = None
    best_key: _Key | None = None  # the best choice's key, once it is unprotected
    skipped, skipped_bound = 0, NO_UNPROTECTED_SET
    order = 0 if upcoming is None else policy.order_bound(upcoming, min_deficit, now)
    while heap or upcoming is not None:
        if upcoming is not None and (not heap or order < heap[0][0]):
            if best_key is not None and order > best_key[1]:  # so is every later host
                skipped, skipped_bound, upcoming = skipped + 1, min(skipped_bound, order), None
                continue
            deficit = gpus_needed - upcoming.free
            if 0 < deficit <= upcoming.reclaimable_gpus:
                fewest = upcoming.fewest_victims(deficit)
                recency = upcoming.min_candidate_interrupted_at
                # Where the order bound ties with the best cost, the tail is checked before
                # the bound: with a capped cost most hosts tie, and most lose on the tail.
                if best_key is not None and (
                    _beaten(best_key, order, (fewest, recency))
                    or _loses_on_first_id(best_key, order, fewest, recency, upcoming)
                    or _beaten(
                        best_key,
                        order,
                        _tail_floor(upcoming, deficit, cutoff, gpu_floor, now, best_key),
                    )
                ):
                    skipped, skipped_bound = skipped + 1, min(skipped_bound, order)
                else:
                    bound = policy.lower_bound(upcoming, deficit, now, cutoff)
                    if best_key is not None and _beaten(best_key, bound, ()):
                        skipped, skipped_bound = skipped + 1, min(skipped_bound, bound)
                    else:
                        heappush(heap, (bound, fewest, recency, upcoming.host.id, upcoming))
            upcoming = next(stream, None)
            if upcoming is not None:
                order = policy.order_bound(upcoming, min_deficit, now)
            continue
        bound, fewest, recency, _, state = heappop(heap)
        if best_key is not None:
            if _beaten(best_key, bound, (fewest, recency)):  # and every host left in the heap
                skipped, skipped_bound = skipped + len(heap) + 1, min(skipped_bound, bound)
                heap.clear()
                continue
            deficit = gpus_needed - state.free
            if _beaten(
                best_key, bound, _tail_floor(state, deficit, cutoff, gpu_floor, now, best_key)
            ):
                skipped, skipped_bound = skipped + 1, min(skipped_bound, bound)  # ties, loses
                continue
        keyed = _cheapest_once(state, gpus_needed, now, policy, min_runtime_s, shield, pure)
        if keyed is not None:
            found.append(keyed)
            if best is None or keyed[0] < best[0]:
                best = keyed
                best_key = keyed[0] if keyed[1].protected == 0 else None
    found.sort(key=itemgetter(0))
    choices = tuple(choice for _, choice in found)
    return VictimSearch(choices, skipped, skipped_bound if skipped else None)

"""Victim choice: which preemptible allocations to reclaim for an on-demand request.

A victim set is compared by one lexicographic key, smallest first:

1. how many victims are still inside their minimum runtime (fresh starts are protected: they are
   taken only when no other set is possible at all),
2. the policy's cost (for `LeastWorkLost`: GPU-seconds of work lost since each victim's last
   reported checkpoint, else since its start; the default policy is `core.fairness`),
3. how many victims (fewer interruptions for the same work),
4. how recently the set's most recently interrupted member was interrupted (least recent first),
5. the victims' ids (a deterministic tie-break).

Policies are pure, with no randomness of their own: a policy that wants to look random hashes a
seed with the allocation id, so the same inputs always give the same victims.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from heapq import heappop, heappush
from itertools import accumulate
from operator import itemgetter
from typing import ClassVar, Protocol, cast

from lowcostgpu.core.host_state import SAVER_MARK, SAVER_SPAN, HostState
from lowcostgpu.domain.capacity import Allocation, Timestamp

NEVER = -1  # the "last interrupted at" of an allocation never interrupted: older than any time
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


@dataclass(frozen=True, slots=True)
class VictimChoice:
    """The cheapest victim set on one host, with its comparison key."""

    host: HostState
    victims: tuple[Allocation, ...]
    protected: int
    cost: int
    most_recent_interruption: Timestamp

    @property
    def key(self) -> tuple[int, int, int, Timestamp, tuple[str, ...], str]:
        return (
            self.protected,
            self.cost,
            len(self.victims),
            self.most_recent_interruption,
            tuple(sorted(v.id for v in self.victims)),
            self.host.host.id,
        )


# A candidate victim as the search compares it: (protected, cost, recency, id, gpus, allocation).
_Candidate = tuple[int, int, Timestamp, str, int, Allocation]
# A partial victim set's comparison key, as in `VictimChoice.key` less the host.
_SetKey = tuple[int, int, int, Timestamp, tuple[str, ...]]


def is_protected(alloc: Allocation, now: Timestamp, min_runtime_s: int) -> bool:
    """Inside its minimum runtime: started (or restarted) less than `min_runtime_s` ago."""
    return alloc.started_at > now - min_runtime_s


def cheapest_on_host(
    host: HostState,
    gpus_needed: int,
    now: Timestamp,
    policy: VictimPolicy,
    min_runtime_s: int,
    shield: Shield | None = None,
) -> VictimChoice | None:
    """The best minimal set of victims on `host` that frees enough GPUs, or None.

    Allocations the `shield` names are not candidates at all. The two commonest cases are
    answered without the search (and give what it gives): one GPU short, the best set is the
    first candidate alone; short of all the candidates' GPUs, the set of all of them.
    """
    deficit = gpus_needed - host.free
    if deficit <= 0:
        return None
    cutoff = now - min_runtime_s
    candidates: list[_Candidate] = sorted(
        (
            int(a.started_at > cutoff),
            policy.cost(a, now),
            NEVER if a.last_interrupted_at is None else a.last_interrupted_at,
            a.id,
            a.gpus,
            a,
        )
        for a in host.allocations
        if a.preemptible
        and not a.draining
        and (shield is None or not shield(a, now, min_runtime_s))
    )
    total = sum(c[4] for c in candidates)
    if total < deficit:
        return None
    if deficit == 1:  # every candidate alone is a cover, and the first one's key is the least
        chosen: tuple[_Candidate, ...] = (candidates[0],)
    elif total == deficit:  # only all of them together free enough
        chosen = tuple(candidates)
    else:
        best: list[tuple[_SetKey, tuple[_Candidate, ...]]] = []
        after = [*accumulate(c[4] for c in reversed(candidates))][::-1]
        _search(candidates, after, deficit, 0, (), 0, 0, 0, best)
        chosen = best[0][1]
    key = _set_key(chosen)
    return VictimChoice(host, tuple(c[5] for c in chosen), key[0], key[1], key[3])


def _set_key(chosen: tuple[_Candidate, ...]) -> _SetKey:
    return (
        sum(c[0] for c in chosen),
        sum(c[1] for c in chosen),
        len(chosen),
        max(c[2] for c in chosen),
        tuple(sorted(c[3] for c in chosen)),
    )


def _search(
    candidates: Sequence[_Candidate],
    gpus_from: Sequence[int],
    deficit: int,
    start: int,
    chosen: tuple[_Candidate, ...],
    covered: int,
    protected: int,
    cost: int,
    best: list[tuple[_SetKey, tuple[_Candidate, ...]]],
) -> None:
    """Depth-first over subsets, in order of (protected, cost): a branch ends once it covers the
    deficit (so only minimal covers are compared), once it cannot beat the best found, or once
    the candidates left (`gpus_from[i]`: the GPUs of candidates i… together) cannot cover it."""
    for i in range(start, len(candidates)):
        if covered + gpus_from[i] < deficit:
            break  # no set of the candidates left covers it
        cand = candidates[i]
        c_protected, c_cost = protected + cand[0], cost + cand[1]
        if best and (c_protected, c_cost) > best[0][0][:2]:
            break  # candidates are sorted: every later one costs at least as much
        now_chosen = (*chosen, cand)
        if covered + cand[4] >= deficit:
            key = _set_key(now_chosen)
            if not best or key < best[0][0]:
                best[:] = [(key, now_chosen)]
        else:
            _search(
                candidates,
                gpus_from,
                deficit,
                i + 1,
                now_chosen,
                covered + cand[4],
                c_protected,
                c_cost,
                best,
            )


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
                return found
    choice = cheapest_on_host(host, gpus_needed, now, policy, min_runtime_s, shield)
    result = None if choice is None else (choice.key, choice)
    if pure:
        memo[key] = (policy, result)
    return result


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
# What a host state remembers of one search (`_cheapest_once`): the policy, and the choice.
_Remembered = tuple[VictimPolicy, tuple[_Key, VictimChoice] | None]


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

"""Victim choice: which preemptible allocations to reclaim for an on-demand request.

A victim set is compared by one lexicographic key, smallest first:

1. how many victims are still inside their minimum runtime (fresh starts are protected: they are
   taken only when no other set is possible at all),
2. the policy's cost (for the default policy: GPU-seconds of work lost since each victim's last
   reported checkpoint, else since its start),
3. how many victims (fewer interruptions for the same work),
4. how recently the set's most recently interrupted member was interrupted (least recent first),
5. the victims' ids (a deterministic tie-break).

Policies are pure, with no randomness of their own: a policy that wants to look random hashes a
seed with the allocation id, so the same inputs always give the same victims.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from lowcostgpu.core.snapshot import HostState
from lowcostgpu.domain.capacity import Allocation, Timestamp

NEVER = -1  # the "last interrupted at" of an allocation never interrupted: older than any time


class VictimPolicy(Protocol):
    """The cost of reclaiming one allocation now; the set's cost is the sum."""

    @property
    def name(self) -> str: ...

    def cost(self, alloc: Allocation, now: Timestamp) -> int:
        """A non-negative cost; lower means a better victim."""
        ...

    def lower_bound_per_gpu(self, newest_progress: Timestamp, now: Timestamp) -> int:
        """A lower bound on cost per GPU for any victim on a host, to skip hosts early.

        `newest_progress` is the latest progress mark of the host's candidates. Return 0 when
        the policy has no useful bound: every host is then examined.
        """
        ...


@dataclass(frozen=True, slots=True)
class LeastWorkLost:
    """DESIGN.md §1: the work a reclaim loses, GPU-seconds since the last reported checkpoint."""

    name: str = "least-work-lost"

    def cost(self, alloc: Allocation, now: Timestamp) -> int:
        return alloc.work_at_risk_gpu_s(now)

    def lower_bound_per_gpu(self, newest_progress: Timestamp, now: Timestamp) -> int:
        return max(0, now - newest_progress)


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


@dataclass(frozen=True, slots=True)
class _Candidate:
    alloc: Allocation
    cost: int
    protected: bool


def is_protected(alloc: Allocation, now: Timestamp, min_runtime_s: int) -> bool:
    """Inside its minimum runtime: started (or restarted) less than `min_runtime_s` ago."""
    return alloc.runtime_s(now) < min_runtime_s


def cheapest_on_host(
    host: HostState,
    gpus_needed: int,
    now: Timestamp,
    policy: VictimPolicy,
    min_runtime_s: int,
) -> VictimChoice | None:
    """The best minimal set of victims on `host` that frees enough GPUs, or None."""
    deficit = gpus_needed - host.free
    candidates = sorted(
        (
            _Candidate(a, policy.cost(a, now), is_protected(a, now, min_runtime_s))
            for a in host.allocations
            if a.preemptible and not a.draining
        ),
        key=lambda c: (c.protected, c.cost, c.alloc.id),
    )
    if deficit <= 0 or sum(c.alloc.gpus for c in candidates) < deficit:
        return None
    best: list[VictimChoice] = []
    _search(host, candidates, deficit, 0, [], best)
    return best[0] if best else None


def _search(
    host: HostState,
    candidates: Sequence[_Candidate],
    deficit: int,
    start: int,
    chosen: list[_Candidate],
    best: list[VictimChoice],
) -> None:
    """Depth-first over subsets, stopping a branch once it covers the deficit (so only minimal
    covers and their prefixes are visited) or once it cannot beat the best found."""
    covered = sum(c.alloc.gpus for c in chosen)
    if covered >= deficit:
        choice = _choice(host, chosen)
        if not best or choice.key < best[0].key:
            best[:] = [choice]
        return
    if best:
        protected = sum(c.protected for c in chosen)
        if (protected, sum(c.cost for c in chosen)) > (best[0].protected, best[0].cost):
            return
    for i in range(start, len(candidates)):
        chosen.append(candidates[i])
        _search(host, candidates, deficit, i + 1, chosen, best)
        chosen.pop()


def _choice(host: HostState, chosen: Sequence[_Candidate]) -> VictimChoice:
    return VictimChoice(
        host=host,
        victims=tuple(c.alloc for c in chosen),
        protected=sum(c.protected for c in chosen),
        cost=sum(c.cost for c in chosen),
        most_recent_interruption=max(
            (
                c.alloc.last_interrupted_at
                for c in chosen
                if c.alloc.last_interrupted_at is not None
            ),
            default=NEVER,
        ),
    )


@dataclass(frozen=True, slots=True)
class VictimSearch:
    """The choices examined, cheapest first, and what is known of the hosts not examined."""

    choices: tuple[VictimChoice, ...]
    skipped_hosts: int = 0
    skipped_lower_bound: int | None = None  # every skipped host would cost at least this

    @property
    def best(self) -> VictimChoice | None:
        return self.choices[0] if self.choices else None


def choose_victims(
    hosts: Sequence[HostState],
    gpus_needed: int,
    now: Timestamp,
    policy: VictimPolicy,
    min_runtime_s: int,
) -> VictimSearch:
    """Search every host for its cheapest victim set and return them cheapest first.

    Hosts are examined in order of a lower bound on their cost; once the bound exceeds the best
    unprotected choice found, no later host can win and the search stops. The runners-up (and the
    bound on the skipped hosts) are what the `Preempted` event quotes as the alternatives.
    """
    bounded: list[tuple[int, str, HostState]] = []
    for state in hosts:
        deficit = gpus_needed - state.free
        if state.host.cordoned or state.newest_progress is None:
            continue
        if deficit <= 0 or state.reclaimable_gpus < deficit:
            continue
        bound = deficit * policy.lower_bound_per_gpu(state.newest_progress, now)
        bounded.append((bound, state.host.id, state))
    bounded.sort(key=lambda entry: (entry[0], entry[1]))
    found: list[VictimChoice] = []
    best: VictimChoice | None = None
    for examined, (bound, _, state) in enumerate(bounded):
        if best is not None and best.protected == 0 and bound > best.cost:
            found.sort(key=lambda c: c.key)
            return VictimSearch(tuple(found), len(bounded) - examined, bound)
        choice = cheapest_on_host(state, gpus_needed, now, policy, min_runtime_s)
        if choice is not None:
            found.append(choice)
            if best is None or choice.key < best.key:
                best = choice
    found.sort(key=lambda c: c.key)
    return VictimSearch(tuple(found))

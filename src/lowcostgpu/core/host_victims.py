"""The victim search on one host: the best minimal set of victims that frees enough GPUs.

A host's candidates are few (its preemptible allocations), so this search is exact: depth first
over subsets in the order of the set key (`VictimChoice.key`, described in `core.victims`),
pruned on cost and on the GPUs left. It is apart from the fleet-wide walk (`core.victims`),
which decides which hosts are worth this search at all, because the two are checked and tuned
separately: this one against a plain subset search (`tests/core/test_victim_search_cost.py`),
the walk's bounds and skips against brute force over small pools
(`tests/core/test_scheduler_properties.py`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate

from lowcostgpu.core.host_state import HostState
from lowcostgpu.core.victim_policy import Shield, VictimPolicy
from lowcostgpu.domain.capacity import Allocation, Timestamp

NEVER = -1  # the "last interrupted at" of an allocation never interrupted: older than any time


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

"""The victim search made cheaper gives what it gave: the per-host search against the plain
depth-first search it replaced (on random hosts), and the memo of searches on a host state.

`cheapest_on_host` answers the two common cases without a search (one GPU short: the first
candidate; short of all the candidates' GPUs: all of them) and prunes branches that the GPUs
left cannot complete; `choose_victims` remembers a host state's search at one moment for a policy
whose cost is `pure_cost`. None of that may change a decision.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from fleet_builders import alloc, host
from hypothesis import given, settings
from hypothesis import strategies as st

from lowcostgpu.core.fairness import FAIR_LEAST_WORK_LOST
from lowcostgpu.core.host_state import HostState
from lowcostgpu.core.host_victims import NEVER, VictimChoice, cheapest_on_host
from lowcostgpu.core.policies import LowestPriority, SeededRandom, YoungestFirst
from lowcostgpu.core.snapshot import FleetSnapshot
from lowcostgpu.core.victim_policy import LEAST_WORK_LOST, VictimPolicy, shield_of
from lowcostgpu.core.victims import choose_victims
from lowcostgpu.domain.capacity import Allocation, Timestamp

_Cand = tuple[int, int, int, str, int, Allocation]


def reference_cheapest(
    host_state: HostState, gpus_needed: int, now: Timestamp, policy: VictimPolicy, min_rt: int
) -> VictimChoice | None:
    """The search as it was before (every subset in order, pruned on cost only)."""
    shield = shield_of(policy)
    deficit = gpus_needed - host_state.free
    cutoff = now - min_rt
    candidates = sorted(
        (
            int(a.started_at > cutoff),
            policy.cost(a, now),
            NEVER if a.last_interrupted_at is None else a.last_interrupted_at,
            a.id,
            a.gpus,
            a,
        )
        for a in host_state.allocations
        if a.preemptible and not a.draining and (shield is None or not shield(a, now, min_rt))
    )
    if deficit <= 0 or sum(c[4] for c in candidates) < deficit:
        return None
    best: list[tuple[tuple[object, ...], tuple[_Cand, ...]]] = []

    def search(start: int, chosen: tuple[_Cand, ...], covered: int, prot: int, cost: int) -> None:
        for i in range(start, len(candidates)):
            cand = candidates[i]
            c_prot, c_cost = prot + cand[0], cost + cand[1]
            if best and (c_prot, c_cost) > best[0][0][:2]:
                break
            now_chosen = (*chosen, cand)
            if covered + cand[4] >= deficit:
                key = (
                    c_prot,
                    c_cost,
                    len(now_chosen),
                    max(c[2] for c in now_chosen),
                    tuple(sorted(c[3] for c in now_chosen)),
                )
                if not best or key < best[0][0]:
                    best[:] = [(key, now_chosen)]
            else:
                search(i + 1, now_chosen, covered + cand[4], c_prot, c_cost)

    search(0, (), 0, 0, 0)
    key, chosen = best[0]
    return VictimChoice(host_state, tuple(c[5] for c in chosen), key[0], key[1], key[3])  # type: ignore[arg-type]


POLICIES: Sequence[VictimPolicy] = (
    LEAST_WORK_LOST,
    FAIR_LEAST_WORK_LOST,
    YoungestFirst(),
    LowestPriority(seed=3),
    SeededRandom(seed=5),
)

# One allocation: (GPUs, start, checkpoint after the start or None, interrupted at or None,
# preemptible). Starts and checkpoints are few distinct values, so that costs tie often.
_ALLOC = st.tuples(
    st.integers(1, 4),
    st.sampled_from([0, 100, 200, 250]),
    st.one_of(st.none(), st.sampled_from([10, 50, 120])),
    st.one_of(st.none(), st.sampled_from([0, 90, 240])),
    st.booleans(),
)


def _host_of(specs: list[tuple[int, int, int | None, int | None, bool]]) -> HostState:
    allocations, next_gpu = [], 0
    for k, (gpus, start, checkpoint, interrupted, preemptible) in enumerate(specs):
        if next_gpu + gpus > 8:
            break
        allocations.append(
            alloc(
                f"s{k}",
                "h",
                range(next_gpu, next_gpu + gpus),
                preemptible=preemptible,
                started_at=start,
                checkpoint_at=None if checkpoint is None else start + checkpoint,
                interrupted_at=interrupted,
            )
        )
        next_gpu += gpus
    return HostState.of(host("h", 8), allocations)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(_ALLOC, min_size=1, max_size=8),
    st.integers(1, 8),
    st.sampled_from([260, 400, 1000]),
    st.sampled_from([0, 100, 300]),
    st.sampled_from(range(len(POLICIES))),
)
def test_the_host_search_chooses_what_the_plain_search_chose(
    specs: list[tuple[int, int, int | None, int | None, bool]],
    gpus_needed: int,
    now: int,
    min_runtime_s: int,
    which: int,
) -> None:
    state = _host_of(specs)
    policy = POLICIES[which]
    shield = shield_of(policy)
    got = cheapest_on_host(state, gpus_needed, now, policy, min_runtime_s, shield)
    assert got == reference_cheapest(state, gpus_needed, now, policy, min_runtime_s)


@dataclass(frozen=True)
class Counted:
    """Least work lost (or an override), counting its cost calls; not `pure_cost`."""

    costs: dict[str, int] = field(default_factory=dict)  # allocation id -> an override
    calls: list[int] = field(default_factory=lambda: [0])
    name: str = "counted"
    pure_cost: ClassVar[bool] = False

    def cost(self, a: Allocation, now: Timestamp) -> int:
        self.calls[0] += 1
        return self.costs.get(a.id, LEAST_WORK_LOST.cost(a, now))

    def describe(self, cost: int) -> str:
        return f"{cost}"

    def lower_bound(self, h: HostState, deficit: int, now: Timestamp, started_by: Timestamp) -> int:
        return 0

    def order_bound(self, h: HostState, deficit: int, now: Timestamp) -> int:
        return 0


@dataclass(frozen=True)
class PureCounted(Counted):
    """The same, declared `pure_cost`: its searches may be remembered."""

    pure_cost: ClassVar[bool] = True


def _two_hosts() -> FleetSnapshot:
    allocations = [
        alloc("a", "h0", {0}, started_at=0, checkpoint_at=50),
        alloc("b", "h1", {0}, started_at=0, checkpoint_at=80),
    ]
    return FleetSnapshot.build([host("h0", 1), host("h1", 1)], allocations)


def _search(snapshot: FleetSnapshot, policy: VictimPolicy, now: int = 1000) -> list[str]:
    pool = next(iter(snapshot.pool_hosts))
    found = choose_victims(snapshot.hosts_by_mark(pool), 1, now, policy, 300)
    return [v.subject_id for c in found.choices for v in c.victims]


def test_a_pure_policys_search_of_an_unchanged_host_at_the_same_moment_is_remembered() -> None:
    snapshot, policy = _two_hosts(), PureCounted()
    first = _search(snapshot, policy)
    calls = policy.calls[0]
    assert _search(snapshot, policy) == first == ["b", "a"]  # b's checkpoint is the later one
    assert policy.calls[0] == calls  # nothing was costed again
    _search(snapshot, policy, now=1001)  # another moment: searched afresh
    assert policy.calls[0] > calls


def test_a_policy_that_is_not_pure_is_asked_again_at_the_same_moment() -> None:
    snapshot, policy = _two_hosts(), Counted()
    assert _search(snapshot, policy) == ["b", "a"]
    policy.costs["b@0"] = 10**6  # the world outside the policy changed (as a yardstick's does)
    assert _search(snapshot, policy) == ["a", "b"]


def test_a_changed_host_state_is_searched_afresh() -> None:
    snapshot, policy = _two_hosts(), PureCounted()
    assert _search(snapshot, policy) == ["b", "a"]
    pool = next(iter(snapshot.pool_hosts))
    later = snapshot.with_host_allocations(
        {"h0": [alloc("a", "h0", {0}, started_at=0, checkpoint_at=990)]}
    )
    assert [h.host.id for h in later.hosts_by_mark(pool)] == ["h0", "h1"]
    assert _search(later, policy) == ["a", "b"]  # a's new checkpoint makes it the cheaper one

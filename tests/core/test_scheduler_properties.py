"""Hypothesis properties of the scheduler and queue, with a brute-force oracle on small pools."""

from __future__ import annotations

from dataclasses import replace
from itertools import combinations

from fleet_builders import alloc, feasible_victim_sets, host, on_demand, ticket
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from lowcostgpu.core.fairness import FairLeastWorkLost
from lowcostgpu.core.host_victims import NEVER, is_protected
from lowcostgpu.core.queue import schedule_queue
from lowcostgpu.core.scheduler import SchedulerConfig, place_on_demand
from lowcostgpu.core.snapshot import FleetSnapshot, apply_plan, enqueue, release, update_allocation
from lowcostgpu.core.victim_policy import LEAST_WORK_LOST, VictimPolicy, shield_of
from lowcostgpu.domain.capacity import Allocation
from lowcostgpu.domain.errors import InsufficientCapacity

# The oracle checks the search for the plain rule and for the default one; the fair policy is
# given odd parameters so that every term (estimate, requeue, history) matters.
POLICIES: tuple[VictimPolicy, ...] = (
    LEAST_WORK_LOST,
    FairLeastWorkLost(typical_checkpoint_age_s=700, restart_cost_s=50, recent_window_s=3000),
    FairLeastWorkLost(
        typical_checkpoint_age_s=700,
        restart_cost_s=50,
        recent_window_s=3000,
        band_pct=10,
        band_slack_s=30,
    ),
)
BANDED = POLICIES[-1]
assert isinstance(BANDED, FairLeastWorkLost) and BANDED.band_pct is not None


def brute_force_best(
    snap: FleetSnapshot, gpus: int, now: int, min_runtime_s: int, policy: VictimPolicy
) -> tuple[object, ...] | None:
    """Every feasible victim set on every host, compared by the documented key."""
    best: tuple[object, ...] | None = None
    shield = shield_of(policy)
    shielded = None if shield is None else (lambda a: shield(a, now, min_runtime_s))
    for state, subset in feasible_victim_sets(snap, gpus, shielded):
        key = (
            sum(is_protected(a, now, min_runtime_s) for a in subset),
            sum(policy.cost(a, now) for a in subset),
            len(subset),
            max((a.last_interrupted_at or NEVER for a in subset), default=NEVER),
            tuple(sorted(a.id for a in subset)),
            state.host.id,
        )
        if best is None or key < best:
            best = key
    return best


@st.composite
def small_fleets(draw: st.DrawFn) -> tuple[FleetSnapshot, int]:
    now = 10_000
    hosts = [host(f"h{i}", draw(st.integers(1, 4))) for i in range(draw(st.integers(1, 3)))]
    allocations: list[Allocation] = []
    for h in hosts:
        free = list(range(h.gpu_count))
        n = 0
        while free and draw(st.booleans()):
            size = draw(st.integers(1, len(free)))
            taken, free = free[:size], free[size:]
            started = draw(st.integers(now - 5000, now))
            interrupted_at = draw(st.none() | st.integers(0, started))
            allocations.append(
                replace(
                    alloc(
                        f"{h.id}-{n}",
                        h.id,
                        set(taken),
                        preemptible=draw(st.booleans()) or draw(st.booleans()),
                        started_at=started,
                        checkpoint_at=draw(st.none() | st.integers(started - 900, now)),
                        interrupted_at=interrupted_at,
                    ),
                    interruption_count=0 if interrupted_at is None else draw(st.integers(1, 5)),
                    earlier_run_s=draw(st.integers(0, 20_000)),
                    # What it says of its saves: a believed saver costs its save time, which
                    # the search's mark-based bounds must not overestimate.
                    save_s=draw(st.none() | st.integers(0, 400)),
                    saves_on_notice=draw(st.booleans()),
                    grace_period_s=draw(st.sampled_from([30, 300])),
                )
            )
            n += 1
    return FleetSnapshot.build(hosts, allocations), now


@settings(max_examples=300, deadline=None)
@given(small_fleets(), st.integers(1, 4), st.sampled_from([0, 600]), st.sampled_from(POLICIES))
def test_the_chosen_victims_are_the_best_feasible_set(
    fleet: tuple[FleetSnapshot, int], gpus: int, min_runtime_s: int, policy: VictimPolicy
) -> None:
    snap, now = fleet
    if gpus > max(s.host.gpu_count for s in snap.hosts.values()):
        return
    config = SchedulerConfig(min_runtime_s=min_runtime_s, policy=policy)
    best = brute_force_best(snap, gpus, now, min_runtime_s, policy)
    try:
        plan = place_on_demand(snap, on_demand("od", gpus), now, config)
    except InsufficientCapacity:
        assert best is None
        return
    assert best is not None
    victims = [snap.allocation(p.allocation_id) for p in plan.preemptions]
    assert all(v.preemptible for v in victims)
    if not victims:  # placed on free GPUs: then the best set is the empty one
        assert best[2] == 0
        return
    lost = sum(policy.cost(v, now) for v in victims)
    protected = sum(is_protected(v, now, min_runtime_s) for v in victims)
    recency = max(v.last_interrupted_at or NEVER for v in victims)
    ids = tuple(sorted(v.id for v in victims))
    # The whole key, tie-breaks included: the search skips hosts that tie on cost by them.
    assert (protected, lost, len(victims), recency, ids, victims[0].host_id) == best
    if min_runtime_s == 0:
        assert lost == best[1]  # no feasible set loses less work


class SchedulerWorld(RuleBasedStateMachine):
    """Random launches, on-demand arrivals, exits, checkpoints and ticks on a small fleet."""

    def __init__(self) -> None:
        super().__init__()
        self.config = SchedulerConfig(
            min_runtime_s=60, head_reservation_after_s=120, policy=LEAST_WORK_LOST
        )
        self.snap = FleetSnapshot.build([host("h0", 4), host("h1", 2), host("h2", 4)])
        self.now = 0
        self.counter = 0
        self.on_demand: set[str] = set()
        self.notice_at: dict[str, int] = {}
        self.enqueued_at: dict[str, int] = {}

    def _new_id(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    @rule(gpus=st.integers(1, 4))
    def launch_interruptible(self, gpus: int) -> None:
        subject = self._new_id("i")
        self.enqueued_at[subject] = self.now
        self.snap = enqueue(self.snap, ticket(subject, gpus, enqueued_at=self.now))

    @rule(gpus=st.integers(1, 4))
    def launch_on_demand(self, gpus: int) -> None:
        subject = self._new_id("od")
        best = brute_force_best(
            self.snap, gpus, self.now, self.config.min_runtime_s, self.config.policy
        )
        try:
            plan = place_on_demand(self.snap, on_demand(subject, gpus), self.now, self.config)
        except InsufficientCapacity:
            assert best is None
            return
        assert not any(p.subject_id in self.on_demand for p in plan.preemptions)
        for pre in plan.preemptions:
            self.notice_at[pre.allocation_id] = self.now
        self.on_demand.add(subject)
        self.snap = apply_plan(self.snap, plan, self.now)

    @precondition(lambda self: any(not a.waits_for for a in self.snap.allocations()))
    @rule(data=st.data())
    def workload_exits(self, data: st.DataObject) -> None:
        running = sorted(
            (a for a in self.snap.allocations() if not a.waits_for and not a.draining),
            key=lambda a: a.id,
        )
        if running:
            self.snap = release(self.snap, data.draw(st.sampled_from(running)).id)

    @precondition(lambda self: any(a.preemptible for a in self.snap.allocations()))
    @rule(data=st.data())
    def checkpoint_reported(self, data: st.DataObject) -> None:
        candidates = sorted(
            (a for a in self.snap.allocations() if a.preemptible), key=lambda a: a.id
        )
        chosen = data.draw(st.sampled_from(candidates))
        self.snap = update_allocation(
            self.snap, Allocation(**{**_fields(chosen), "last_checkpoint_at": self.now})
        )

    @rule(dt=st.integers(1, 400))
    def tick(self, dt: int) -> None:
        self.now += dt
        self._finish_drains(grace_s=300)
        self._schedule()

    def _finish_drains(self, grace_s: int) -> None:
        for a in list(self.snap.allocations()):
            if a.draining and self.now - self.notice_at[a.id] >= grace_s:
                self.snap = release(self.snap, a.id)
                requeued = ticket(a.subject_id, a.gpus, enqueued_at=self.enqueued_at[a.subject_id])
                self.snap = enqueue(self.snap, requeued)

    def _schedule(self) -> None:
        before = {t.subject_id: t for t in self.snap.tickets()}
        plan = schedule_queue(self.snap, self.now, self.config)
        self.snap = apply_plan(self.snap, plan, self.now)
        placed = {p.subject_id for p in plan.placements}
        reserved = {r.host_id for r in plan.reservations}
        largest_block = max(
            (s.free for s in self.snap.hosts.values() if s.host.id not in reserved), default=0
        )
        for subject, t in before.items():
            later_placed = any(before[p].order_key() > t.order_key() for p in placed)
            if subject not in placed and later_placed:
                assert t.gpus > largest_block, f"{subject} fits but a later ticket went first"

    @invariant()
    def no_gpu_is_held_twice(self) -> None:
        for state in self.snap.hosts.values():
            for a, b in combinations(state.allocations, 2):
                if a.gpu_indices & b.gpu_indices:
                    assert b.id in a.waits_for or a.id in b.waits_for
                    assert (a.draining and b.id not in a.waits_for) or (
                        b.draining and a.id not in b.waits_for
                    )
            for a in state.allocations:
                assert a.gpu_indices <= set(range(state.host.gpu_count))

    @invariant()
    def on_demand_is_never_draining(self) -> None:
        for a in self.snap.allocations():
            if a.subject_id in self.on_demand:
                assert not a.draining

    @invariant()
    def every_subject_is_either_queued_or_placed_once(self) -> None:
        placed = [a.subject_id for a in self.snap.allocations()]
        queued = [t.subject_id for t in self.snap.tickets()]
        assert len(placed) == len(set(placed))
        assert set(placed).isdisjoint(queued) or all(
            a.draining for a in self.snap.allocations() if a.subject_id in queued
        )

    def teardown(self) -> None:
        """When capacity frees, every queued ticket eventually runs."""
        for _ in range(len(list(self.snap.tickets())) + 4):
            for a in list(self.snap.allocations()):
                self.notice_at.setdefault(a.id, self.now)
                self.snap = release(self.snap, a.id)
            self.now += 400
            self._schedule()
        assert list(self.snap.tickets()) == []


def _fields(a: Allocation) -> dict[str, object]:
    return {name: getattr(a, name) for name in Allocation.__dataclass_fields__}


TestSchedulerWorld = SchedulerWorld.TestCase
TestSchedulerWorld.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)


def _least_loss(snap: FleetSnapshot, gpus: int, now: int, policy: FairLeastWorkLost) -> int | None:
    """The least work any feasible victim set on one host loses (the policy's estimate), by
    brute force; None when no set frees enough GPUs."""
    losses = (
        sum(policy.parts(a, now).lost_gpu_s for a in subset)
        for _, subset in feasible_victim_sets(snap, gpus)
    )
    return min(losses, default=None)


@settings(max_examples=300, deadline=None)
@given(small_fleets(), st.integers(1, 4))
def test_with_the_band_the_victims_lose_at_most_the_band_more_than_the_least_loss(
    fleet: tuple[FleetSnapshot, int], gpus: int
) -> None:
    """The fairness terms choose only among sets within the band of the least loss: the chosen
    set loses at most band_pct % more than the cheapest, plus the slack of the GPUs on that host
    (its victims hold at most all of them)."""
    snap, now = fleet
    if gpus > max(s.host.gpu_count for s in snap.hosts.values()):
        return
    assert isinstance(BANDED, FairLeastWorkLost) and BANDED.band_pct is not None
    config = SchedulerConfig(min_runtime_s=0, policy=BANDED)
    least = _least_loss(snap, gpus, now, BANDED)
    try:
        plan = place_on_demand(snap, on_demand("od", gpus), now, config)
    except InsufficientCapacity:
        assert least is None  # no minimum runtime here: any feasible set would be taken
        return
    victims = [snap.allocation(p.allocation_id) for p in plan.preemptions]
    lost = sum(BANDED.parts(v, now).lost_gpu_s for v in victims)
    assert least is not None
    slack = BANDED.band_slack_s * max(s.host.gpu_count for s in snap.hosts.values())
    assert lost <= least + least * BANDED.band_pct // 100 + slack + 1

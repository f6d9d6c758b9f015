"""The default victim policy: cheap victims, without punishing checkpointers or rewarding hiding."""

from __future__ import annotations

from dataclasses import replace
from random import Random

import pytest
from fleet_builders import alloc, host, on_demand
from hypothesis import given, settings
from hypothesis import strategies as st

from lowcostgpu.core.drain import DEFAULT_GRACE_PERIOD_S
from lowcostgpu.core.fairness import (
    FAIR_LEAST_WORK_LOST,
    FairLeastWorkLost,
    typical_checkpoint_age_s,
)
from lowcostgpu.core.policies import DEFAULT_POLICY_NAME, policy_by_name
from lowcostgpu.core.scheduler import SchedulerConfig, place_on_demand
from lowcostgpu.core.snapshot import FleetSnapshot
from lowcostgpu.core.victim_policy import LEAST_WORK_LOST, VictimPolicy
from lowcostgpu.domain.capacity import ALLOCATION_GRACE_PERIOD_S, Allocation
from lowcostgpu.domain.errors import InsufficientCapacity, InvalidRequest

NOW = 100_000
# The terms unbanded (each test of a term sees it whole) and with the slope of issue 8.
POLICY = FairLeastWorkLost(
    typical_checkpoint_age_s=300, restart_cost_s=120, older_non_reporter_per_s=30, band_pct=None
)


def _victims(allocations: list[Allocation], min_runtime_s: int = 0, gpus: int = 1) -> list[str]:
    """The victims on two full hosts (each as big as the GPUs its allocations hold)."""
    sizes = {
        h: 1 + max(i for a in allocations if a.host_id == h for i in a.gpu_indices)
        for h in sorted({a.host_id for a in allocations})
    }
    snap = FleetSnapshot.build([host(h, n) for h, n in sizes.items()], allocations)
    config = SchedulerConfig(min_runtime_s=min_runtime_s, policy=POLICY)
    plan = place_on_demand(snap, on_demand("od", gpus), NOW, config)
    return sorted(p.subject_id for p in plan.preemptions)


def _interrupted(
    a: Allocation, at: int | None, count: int = 1, earlier_run_s: int = 0
) -> Allocation:
    return replace(
        a,
        last_interrupted_at=at,
        interruption_count=count if at else 0,
        earlier_run_s=earlier_run_s,
    )


def test_the_fair_policy_is_the_default_and_the_plain_rule_stays_by_name() -> None:
    assert SchedulerConfig().policy is FAIR_LEAST_WORK_LOST
    assert policy_by_name() is FAIR_LEAST_WORK_LOST
    assert policy_by_name(DEFAULT_POLICY_NAME).name == "fair-least-work-lost"
    assert policy_by_name("least-work-lost") is LEAST_WORK_LOST


@settings(max_examples=200, deadline=None)
@given(
    st.integers(0, 20_000),
    st.integers(0, 20_000),
    st.integers(1, 4),
    st.booleans(),
    st.integers(1, 6),
)
def test_of_two_equal_victims_the_one_interrupted_less_recently_is_chosen(
    ago_a: int, ago_b: int, gpus: int, reporter: bool, count: int
) -> None:
    if ago_a == ago_b:
        ago_b += 1
    started = NOW - 400  # restarted after its interruption, past its minimum runtime
    checkpoint = NOW - 200 if reporter else None
    a = alloc("a", "h1", set(range(gpus)), started_at=started, checkpoint_at=checkpoint)
    b = alloc("b", "h2", set(range(gpus)), started_at=started, checkpoint_at=checkpoint)
    a = _interrupted(a, started - ago_a, count, earlier_run_s=5000)
    b = _interrupted(b, started - ago_b, count, earlier_run_s=5000)
    snap = FleetSnapshot.build([host("h1", gpus), host("h2", gpus)], [a, b])
    config = SchedulerConfig(min_runtime_s=300, policy=POLICY)
    (pre, *_) = place_on_demand(snap, on_demand("od", gpus), NOW, config).preemptions
    assert pre.subject_id == ("a" if ago_a > ago_b else "b")


@pytest.mark.parametrize(
    ("ago_s", "extra_per_gpu_s"),
    [(0, 3600), (900, 2700), (1800, 1800), (3599, 1), (3600, 0), (86_400, 0)],
)
def test_a_recent_interruption_costs_more_decaying_over_an_hour(
    ago_s: int, extra_per_gpu_s: int
) -> None:
    base = alloc("a", "h1", {0, 1}, started_at=NOW - 100_000, checkpoint_at=NOW - 60)
    clean = POLICY.cost(base, NOW)
    # One interruption over 100,000 s of running: the rate term is 1800 × 3600 / 100,000 = 64.
    hit = replace(base, last_interrupted_at=NOW - ago_s, interruption_count=1)
    assert POLICY.cost(hit, NOW) - clean == 2 * (extra_per_gpu_s + 64)


def test_the_rate_term_grows_with_interruptions_per_running_hour() -> None:
    base = alloc("a", "h1", {0}, started_at=NOW - 7200, checkpoint_at=NOW - 60)
    costs = [
        POLICY.cost(
            replace(base, last_interrupted_at=1, interruption_count=n, earlier_run_s=e), NOW
        )
        for n, e in [(1, 36_000), (2, 36_000), (2, 3600), (6, 3600)]
    ]
    assert costs == sorted(costs) and len(set(costs)) == 4


@settings(max_examples=300, deadline=None)
@given(
    st.integers(0, 7 * 86_400),
    st.integers(0, 7 * 86_400),
    st.integers(1, 8),
    st.integers(1, 3_600),
    st.integers(1, 600),
)
def test_a_non_reporters_estimate_grows_with_its_run_but_never_past_it(
    run_a_s: int, run_b_s: int, gpus: int, typical_s: int, per_s: int
) -> None:
    """Never more than it could have lost (its whole run), never less for a longer run, and
    never more than the typical age plus the slope: a long run is no shelter."""
    policy = FairLeastWorkLost(typical_checkpoint_age_s=typical_s, older_non_reporter_per_s=per_s)
    a = alloc("a", "h1", set(range(gpus)), started_at=NOW - run_a_s)
    b = alloc("b", "h1", set(range(gpus)), started_at=NOW - run_b_s)
    lost_a, lost_b = policy.parts(a, NOW).lost_gpu_s, policy.parts(b, NOW).lost_gpu_s
    assert lost_a <= gpus * run_a_s
    assert lost_a <= gpus * (typical_s + max(0, run_a_s - typical_s) // per_s)
    assert (lost_a <= lost_b) if run_a_s <= run_b_s else (lost_a >= lost_b)


@pytest.mark.parametrize(
    ("runtime_s", "charged_s"),
    [
        (400, 303),  # the typical age (300 s) + 1 s per 30 s beyond it
        (3600, 410),
        (86_400, 3170),  # a day: ~53 min, not 24 h
    ],
)
def test_a_non_reporter_is_not_protected_by_its_long_run(runtime_s: int, charged_s: int) -> None:
    """It is charged about the typical checkpoint age, not its whole run: a reporter that would
    lose a little more than that is the better victim to keep."""
    quiet = alloc("quiet", "h1", {0}, started_at=NOW - runtime_s)
    honest = alloc(
        "honest", "h2", {0}, started_at=NOW - runtime_s, checkpoint_at=NOW - charged_s - 1
    )
    assert _victims([quiet, honest]) == ["quiet"]
    assert POLICY.parts(quiet, NOW).lost_gpu_s == charged_s
    assert POLICY.parts(quiet, NOW).lost_estimated


@pytest.mark.parametrize("older_s", [330, 3600, 86_400])  # 330: 1 s more than 300
def test_among_non_reporters_past_the_typical_age_the_youngest_goes_first(older_s: int) -> None:
    """A non-reporter truly loses its whole run: the young one costs least for real."""
    young = alloc("young", "h1", {0}, started_at=NOW - 300)
    old = alloc("old", "h2", {0}, started_at=NOW - older_s)
    assert _victims([young, old]) == ["young"]


def test_without_the_slope_every_non_reporter_past_the_typical_age_costs_the_same() -> None:
    flat = replace(POLICY, older_non_reporter_per_s=0)
    costs = {flat.cost(alloc(f"n{r}", "h1", {0}, started_at=NOW - r), NOW) for r in (300, 86_400)}
    assert len(costs) == 1


def test_a_young_non_reporter_is_charged_its_runtime_only() -> None:
    """Below the typical age the estimate is its runtime: it cannot have lost more."""
    young = alloc("young", "h1", {0, 1}, started_at=NOW - 100)
    assert POLICY.parts(young, NOW).lost_gpu_s == 200


def test_a_reporter_that_has_not_saved_in_this_run_loses_its_run() -> None:
    resumed = alloc("r", "h1", {0}, started_at=NOW - 1000, checkpoint_at=NOW - 5000)
    assert POLICY.parts(resumed, NOW).lost_gpu_s == 1000
    assert not POLICY.parts(resumed, NOW).lost_estimated


def test_a_restart_after_an_interruption_is_never_taken_inside_its_minimum_runtime() -> None:
    restarted = _interrupted(alloc("r", "h1", range(4), started_at=NOW - 299), NOW - 400)
    with pytest.raises(InsufficientCapacity):
        _victims([restarted, alloc("x", "h2", range(4), preemptible=False)], min_runtime_s=300)
    # At the minimum runtime it may be taken again (it is the only candidate).
    restarted = _interrupted(alloc("r", "h1", range(4), started_at=NOW - 300), NOW - 400)
    full = alloc("x", "h2", range(4), preemptible=False)
    assert _victims([restarted, full], min_runtime_s=300) == ["r"]


def test_a_first_run_inside_its_minimum_runtime_is_taken_only_when_nothing_else_can() -> None:
    fresh = alloc("fresh", "h1", {0}, started_at=NOW - 10)
    old = alloc("old", "h2", {0}, started_at=NOW - 86_400)  # never reported: charged 300 s
    assert _victims([fresh, old], min_runtime_s=300) == ["old"]
    assert _victims([fresh], min_runtime_s=300) == ["fresh"]


def test_the_requeue_cost_prefers_freeing_fewer_gpus() -> None:
    # Two 1-GPU victims lose 100 GPU-s and requeue 2 GPUs (340); the 4-GPU victim loses only
    # 40 GPU-s but sends 4 GPUs back through the queue (520).
    small = [alloc(f"s{i}", "h1", {i}, started_at=0, checkpoint_at=NOW - 50) for i in range(2)]
    big = alloc("big", "h2", range(4), started_at=0, checkpoint_at=NOW - 10)
    assert _victims([*small, big], gpus=2) == ["s0", "s1"]


@pytest.mark.parametrize(
    ("intervals", "age"),
    [([], 300), ([600], 300), ([600, 600, 3600], 300), ([630, 4000, 4000], 2000), ([0, -5], 300)],
)
def test_the_typical_checkpoint_age_is_half_the_median_reported_interval(
    intervals: list[int], age: int
) -> None:
    assert typical_checkpoint_age_s(intervals) == age


def test_the_preempted_reason_gives_lost_work_history_and_alternatives() -> None:
    quiet = _interrupted(
        alloc("quiet", "h1", {0}, started_at=NOW - 7200), NOW - 9000, count=2, earlier_run_s=7200
    )
    other = alloc("other", "h2", {0}, started_at=NOW - 7200, checkpoint_at=NOW - 3000)
    snap = FleetSnapshot.build([host("h1", 1), host("h2", 1)], [quiet, other])
    config = SchedulerConfig(min_runtime_s=300, policy=POLICY)
    (pre,) = place_on_demand(snap, on_demand("od"), NOW, config).preemptions
    assert pre.subject_id == "quiet"
    assert "chosen by fair-least-work-lost: quiet on h1" in pre.reason
    assert "no checkpoint reported: estimated at the fleet's typical checkpoint age" in pre.reason
    assert "interrupted 2 times in 4.0 h of running, last 9000 s ago" in pre.reason
    # The alternative, 3000 lost + 120 requeue: h2's checkpoint makes its bound exact, so it is
    # quoted as the bound on the hosts not searched.
    assert "every other host would lose at least 3120 GPU-s of cost" in pre.reason


@pytest.mark.parametrize(
    "field",
    [
        "typical_checkpoint_age_s",
        "restart_cost_s",
        "interruption_rate_cost_s",
        "older_non_reporter_per_s",
    ],
)
def test_negative_parameters_are_refused(field: str) -> None:
    with pytest.raises(InvalidRequest, match=field):
        FairLeastWorkLost(**{field: -1})


@settings(max_examples=40, deadline=None)
@given(st.randoms(use_true_random=False), st.integers(2, 40), st.booleans())
def test_among_many_hosts_that_tie_on_cost_the_tie_break_decides_exactly(
    rng: Random, hosts: int, costly_small_ids: bool
) -> None:
    """Every host holds an old non-reporter (all cost the capped estimate, a tie); the search
    skips tied hosts by cached summaries, yet the winner is the one the whole key names."""
    names = [f"n{i:03d}" for i in range(hosts)]
    rng.shuffle(names)
    allocations = []
    for i, name in enumerate(names):
        h = f"h{i:03d}"
        allocations.append(alloc(name, h, {0}, started_at=NOW - 5000))
        # A lower id on the same host that costs more (an old checkpoint) or is still protected.
        other = alloc(f"a{name}", h, {1}, started_at=NOW - (5000 if costly_small_ids else 100))
        allocations.append(
            replace(other, last_checkpoint_at=NOW - 4000 if costly_small_ids else None)
        )
    snap = FleetSnapshot.build([host(f"h{i:03d}", 2) for i in range(hosts)], allocations)
    config = SchedulerConfig(min_runtime_s=300, policy=POLICY)
    (pre,) = place_on_demand(snap, on_demand("od"), NOW, config).preemptions
    assert pre.subject_id == min(names)


BANDED = replace(POLICY, band_pct=10, band_slack_s=60)


@pytest.mark.parametrize(
    ("lost_s", "ago_s", "fairness_s"),
    [
        # Never interrupted: the requeue (120 s) alone, capped at 10 % of the loss + 60 s.
        (0, None, 60),
        (600, None, 120),
        (599, None, 119),
        (10_000, None, 120),
        # Interrupted just now: requeue + 3,600 s of history, capped by the band.
        (0, 0, 60),
        (10_000, 0, 1_060),
        (100_000, 0, 3_720 + 1_800 * 3600 // 100_400),
    ],
)
def test_the_band_caps_the_requeue_and_history_terms_at_a_share_of_the_loss(
    lost_s: int, ago_s: int | None, fairness_s: int
) -> None:
    started = NOW - 100_000 - 400
    a = alloc("a", "h1", {0}, started_at=started, checkpoint_at=NOW - lost_s)
    if ago_s is not None:
        a = _interrupted(a, NOW - ago_s)
    parts = BANDED.parts(a, NOW)
    assert parts.lost_gpu_s == lost_s
    assert parts.fairness_gpu_s == fairness_s
    assert BANDED.cost(a, NOW) == lost_s + fairness_s


@pytest.mark.parametrize(
    ("extra_loss_s", "banded", "unbanded"),
    [
        # The job interrupted 1,500 s ago loses 1,000 s; its requeue and history terms (4,020 s)
        # are capped at 10 % of its loss + 60 s = 160 s, the other's are its requeue, 120 s.
        # With the band the other is taken while its extra loss is under 40 s; without it, while
        # its extra loss is under 3,900 s.
        (39, "fresh", "fresh"),
        (40, "fresh", "fresh"),  # a tie on cost: then the least recent interruption goes
        (41, "hit", "fresh"),
        (3_899, "hit", "fresh"),
        (3_901, "hit", "hit"),
    ],
)
def test_with_the_band_history_only_chooses_among_victims_whose_loss_is_close(
    extra_loss_s: int, banded: str, unbanded: str
) -> None:
    hit = alloc("hit", "h1", {0}, started_at=NOW - 1_400, checkpoint_at=NOW - 1_000)
    hit = _interrupted(hit, NOW - 1_500)
    fresh = alloc("fresh", "h2", {0}, started_at=NOW - 50_000)
    fresh = replace(fresh, last_checkpoint_at=NOW - 1_000 - extra_loss_s)
    assert BANDED.parts(hit, NOW).requeue_gpu_s + BANDED.parts(hit, NOW).history_gpu_s == 4_020
    assert _victims_with(BANDED, [hit, fresh]) == [banded]
    assert _victims_with(POLICY, [hit, fresh]) == [unbanded]


def _victims_with(policy: FairLeastWorkLost, allocations: list[Allocation]) -> list[str]:
    snap = FleetSnapshot.build([host(a.host_id, 1) for a in allocations], allocations)
    config = SchedulerConfig(min_runtime_s=0, policy=policy)
    plan = place_on_demand(snap, on_demand("od", 1), NOW, config)
    return sorted(p.subject_id for p in plan.preemptions)


def test_a_negative_band_is_refused_and_none_turns_it_off() -> None:
    with pytest.raises(InvalidRequest, match="band_pct"):
        FairLeastWorkLost(band_pct=-1)
    a = alloc("a", "h1", {0}, started_at=NOW - 5000, checkpoint_at=NOW - 100)
    assert POLICY.parts(a, NOW).fairness_cap_gpu_s is None
    assert POLICY.cost(a, NOW) == 100 + 120


# --- Workloads that save at a notice -------------------------------------------------------------


def _saver(
    a: Allocation, save_s: int | None, *, saves: bool = True, grace_s: int = 300
) -> Allocation:
    return replace(a, save_s=save_s, saves_on_notice=saves, grace_period_s=grace_s)


def test_the_allocations_default_grace_is_the_drains() -> None:
    assert ALLOCATION_GRACE_PERIOD_S == DEFAULT_GRACE_PERIOD_S


@pytest.mark.parametrize(
    ("save_s", "grace_s", "lost_per_gpu_s"),
    [
        (300, 300, 300),  # the save just fits the default grace: it loses its save time
        (301, 300, 2000),  # 1 s too slow: SIGKILL cuts it, it loses the work since its checkpoint
        (30, 30, 30),  # an instance's own shorter grace counts
        (31, 30, 2000),
        (0, 0, 0),  # a free save fits even a grace of 0
    ],
)
@pytest.mark.parametrize("policy", [POLICY, LEAST_WORK_LOST], ids=["fair", "plain"])
def test_a_saver_whose_save_fits_its_grace_loses_its_save_time(
    policy: VictimPolicy, save_s: int, grace_s: int, lost_per_gpu_s: int
) -> None:
    a = alloc("s", "h1", {0, 1}, started_at=NOW - 5000, checkpoint_at=NOW - 2000)
    saver = _saver(a, save_s, grace_s=grace_s)
    lost = POLICY.parts(saver, NOW).lost_gpu_s if policy is POLICY else policy.cost(saver, NOW)
    assert lost == 2 * lost_per_gpu_s


@pytest.mark.parametrize(
    ("checkpoint_at", "save_s", "saves", "lost_gpu_s", "estimated"),
    [
        (NOW - 2000, 30, True, 30, False),  # a reporter that saves at the notice
        (NOW - 2000, 30, False, 2000, False),  # it times its saves but does not save at one
        (NOW - 2000, None, True, 2000, False),  # a claim without a time is not weighed
        (None, 30, True, 303, True),  # a claim without a checkpoint: estimated as any non-reporter
        (None, None, False, 303, True),  # the same non-reporter, claiming nothing
        (NOW - 10, 30, True, 30, False),  # it saves at the notice however fresh its checkpoint
    ],
)
def test_only_a_reporter_that_claims_a_save_at_the_notice_is_charged_its_save_time(
    checkpoint_at: int | None, save_s: int | None, saves: bool, lost_gpu_s: int, estimated: bool
) -> None:
    a = alloc("s", "h1", {0}, started_at=NOW - 400, checkpoint_at=checkpoint_at)
    if checkpoint_at is not None:
        a = replace(a, started_at=NOW - 5000)
    parts = POLICY.parts(_saver(a, save_s, saves=saves), NOW)
    assert (parts.lost_gpu_s, parts.lost_estimated) == (lost_gpu_s, estimated)
    believed = checkpoint_at is not None and saves and save_s is not None
    assert parts.notice_save_s == (save_s if believed else None)


@pytest.mark.parametrize(
    ("save_s", "victim"),
    [(299, "saver"), (300, "saver"), (301, "recent")],  # the grace is 300 s
)
def test_a_saver_is_the_cheaper_victim_only_while_its_save_fits_the_grace(
    save_s: int, victim: str
) -> None:
    """Its last checkpoint is old, but a reclaim costs it only its save; a save too slow to
    fit leaves it with the work since that checkpoint, more than a fresh reporter loses."""
    saver = _saver(
        alloc("saver", "h1", {0}, started_at=NOW - 9000, checkpoint_at=NOW - 3000), save_s
    )
    recent = alloc("recent", "h2", {0}, started_at=NOW - 9000, checkpoint_at=NOW - 350)
    assert _victims([saver, recent]) == [victim]


def test_a_claim_without_a_checkpoint_buys_nothing_over_saying_nothing() -> None:
    """Hiding checkpoints and claiming a quick save is still an estimated non-reporter: the
    same cost as one that says nothing (and the tie-break, not the claim, decides)."""
    claims = _saver(alloc("claims", "h1", {0}, started_at=NOW - 3600), 1)
    quiet = alloc("quiet", "h2", {0}, started_at=NOW - 3600)
    assert POLICY.cost(claims, NOW) == POLICY.cost(quiet, NOW)


def test_the_reason_says_a_saver_loses_its_save_time() -> None:
    saver = _saver(alloc("s", "h1", {0}, started_at=NOW - 9000, checkpoint_at=NOW - 3000), 40)
    assert "40 GPU-s (it saves at the notice, in 40 s by its reports)" in POLICY.explain_victim(
        saver, NOW
    )
    assert POLICY.cost_terms(saver, NOW)["notice_save_s"] == 40


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 20_000),  # runtime
            st.none() | st.integers(0, 20_000),  # checkpoint age, None: never reported
            st.none() | st.integers(0, 400),  # save_s
            st.booleans(),  # saves_on_notice
        ),
        min_size=1,
        max_size=30,
    ),
    st.sampled_from([POLICY, LEAST_WORK_LOST]),
)
def test_among_savers_reporters_and_non_reporters_the_search_finds_the_cheapest(
    jobs: list[tuple[int, int | None, int | None, bool]], policy: VictimPolicy
) -> None:
    """One job per one-GPU host: the victim of a one-GPU request is the cheapest job, which the
    search's bounds (savers indexed by their save time) must not hide."""
    allocations = []
    for i, (runtime_s, age_s, save_s, saves) in enumerate(jobs):
        checkpoint = None if age_s is None else NOW - age_s
        a = alloc(
            f"j{i:02d}", f"h{i:02d}", {0}, started_at=NOW - runtime_s, checkpoint_at=checkpoint
        )
        allocations.append(_saver(a, save_s, saves=saves))
    snap = FleetSnapshot.build([host(a.host_id, 1) for a in allocations], allocations)
    plan = place_on_demand(
        snap, on_demand("od"), NOW, SchedulerConfig(min_runtime_s=0, policy=policy)
    )
    (pre,) = plan.preemptions
    chosen = snap.allocation(pre.allocation_id)
    assert policy.cost(chosen, NOW) == min(policy.cost(a, NOW) for a in allocations)

"""The queue's ETA says only what is known: now when the ticket fits, a drain's deadline when the
GPUs it frees cover the tickets ahead, else None — never 0 s for a ticket that cannot start."""

from __future__ import annotations

import pytest
from fleet_builders import POOL, alloc, host
from hypothesis import given
from hypothesis import strategies as st

from lowcostgpu.core.eta import GpusFreed, PoolGpus, is_held, known_ends
from lowcostgpu.core.holds import OnDemandHold
from lowcostgpu.core.instance_state import InstanceState
from lowcostgpu.core.snapshot import FleetSnapshot
from lowcostgpu.domain.capacity import CapacityClass, PoolKey
from lowcostgpu.domain.status import InstanceStatus

NOW = 1000
OTHER = PoolKey("us", "a100-sxm4")


@pytest.mark.parametrize(
    ("pool", "ahead", "gpus", "expected"),
    [
        (PoolGpus(8, 2, 2), 0, 2, NOW),  # fits now: the next decision starts it
        (PoolGpus(8, 2, 1), 0, 2, None),  # two free, on two hosts: not now, nothing ends
        (PoolGpus(8, 2, 2), 1, 2, None),  # someone ahead takes one of them
        (PoolGpus(8, 0, 0), 0, 1, None),  # a full pool, nothing known to end: unknown, not 0 s
        (PoolGpus(0, 0, 0), 0, 1, None),  # no capacity at all
        (PoolGpus(8, 0, 0, ((NOW + 300, 1),)), 0, 1, NOW + 300),  # a drain's deadline
        (PoolGpus(8, 0, 0, ((NOW + 300, 1),)), 0, 2, None),  # it frees too few
        (PoolGpus(8, 1, 1, ((NOW + 300, 1), (NOW + 900, 4))), 2, 2, NOW + 900),  # the second
        (PoolGpus(8, 0, 0, ((NOW - 5, 1),)), 0, 1, NOW + 1),  # an overdue deadline: soon, not 0
        (PoolGpus(8, 4, 4, ((NOW + 300, 4),), held=True), 0, 1, None),  # on-demand asks first
    ],
    ids=[
        "fits",
        "fragmented",
        "taken-ahead",
        "full",
        "no-capacity",
        "drain",
        "drain-too-small",
        "second-drain",
        "overdue",
        "held",
    ],
)
def test_the_eta_of_a_ticket(pool: PoolGpus, ahead: int, gpus: int, expected: int | None) -> None:
    assert pool.eta(ahead, gpus, NOW) == expected


@given(
    free=st.integers(0, 16),
    ends=st.lists(st.tuples(st.integers(0, 5000), st.integers(1, 8)), max_size=5),
    ahead=st.integers(0, 32),
    gpus=st.integers(1, 8),
)
def test_an_eta_is_unknown_or_now_only_when_it_fits_and_never_earlier(
    free: int, ends: list[GpusFreed], ahead: int, gpus: int
) -> None:
    pool = PoolGpus(32, free, free, tuple(sorted(ends)))
    eta = pool.eta(ahead, gpus, NOW)
    fits = free >= ahead + gpus
    assert (eta == NOW) == fits
    if eta is not None and not fits:
        assert eta > NOW
    assert (eta is None) == (not fits and free + sum(g for _, g in ends) < ahead + gpus)
    later = pool.eta(ahead + 1, gpus, NOW)
    assert eta is not None or later is None  # more ahead never makes it known
    if eta is not None and later is not None:
        assert later >= eta


def _draining(
    iid: str, gpus: int, deadline: int, *, pool: PoolKey = POOL, preempted_for: str | None = None
) -> InstanceState:
    return InstanceState(
        iid,
        "acct",
        pool,
        gpus,
        CapacityClass.INTERRUPTIBLE,
        status=InstanceStatus.STOPPING,
        allocation_id=f"{iid}@0",
        host_id="h1",
        deadline=deadline,
        preempted_for=preempted_for,
    )


def test_known_ends_are_the_pools_drains_not_made_for_someone_else() -> None:
    stop = _draining("i-stop", 2, NOW + 300)
    reclaim = _draining("i-reclaimed", 4, NOW + 200, preempted_for="i-on-demand")
    elsewhere = _draining("i-us", 1, NOW + 100, pool=OTHER)
    instances = {i.id: i for i in (stop, reclaim, elsewhere)}
    order = [*sorted((i.deadline or 0, i.id) for i in instances.values()), (NOW, "i-gone")]
    assert known_ends(instances, order, POOL) == ((NOW + 300, 2),)


def test_pool_gpus_reads_capacity_free_and_the_most_free_on_a_host() -> None:
    snap = FleetSnapshot.build(
        [host("h1", 4), host("h2", 4)], [alloc("x", "h1", {0, 1, 2}), alloc("y", "h2", {0, 1})]
    )
    gpus = PoolGpus.of(snap, POOL, [(NOW + 9, 1), (NOW + 5, 3)])
    assert gpus == PoolGpus(8, 3, 2, ((NOW + 5, 3), (NOW + 9, 1)))


@pytest.mark.parametrize(
    ("until", "held"), [(None, False), (NOW, False), (NOW + 1, True)], ids=["none", "over", "on"]
)
def test_a_pool_is_held_while_its_hold_lasts(until: int | None, held: bool) -> None:
    holds = {} if until is None else {POOL: OnDemandHold(POOL, 2, until)}
    assert is_held(holds, POOL, NOW) is held

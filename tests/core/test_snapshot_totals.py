"""The per-pool totals the fleet snapshot keeps (`FleetSnapshot.pool_totals`, what a refusal
quotes) are the sums over the pool's hosts, after any sequence of engine steps (cache equals
rebuild), and a refusal quotes them."""

from __future__ import annotations

import pytest
from fleet_builders import POOL, host
from hypothesis import settings
from hypothesis.stateful import invariant
from test_engine_index_properties import IndexWorld

from lowcostgpu.core import engine
from lowcostgpu.core.engine import EngineState, LaunchSpec
from lowcostgpu.core.scheduler import SchedulerConfig
from lowcostgpu.core.snapshot import FleetSnapshot
from lowcostgpu.domain.capacity import CapacityClass
from lowcostgpu.domain.errors import InsufficientCapacity


class TotalsWorld(IndexWorld):
    @invariant()
    def the_pool_totals_kept_are_the_sums_over_the_hosts(self) -> None:
        fleet = self.state.fleet
        for pool in fleet.pool_hosts:
            hosts = fleet.hosts_in(pool)
            summed = (sum(h.free for h in hosts), sum(h.reclaimable_gpus for h in hosts))
            assert fleet.pool_totals[pool] == summed
        assert FleetSnapshot.build(
            [h.host for h in fleet.hosts.values()], list(fleet.allocations())
        ).pool_totals == dict(fleet.pool_totals)


TestTotalsWorld = TotalsWorld.TestCase
TestTotalsWorld.settings = settings(max_examples=40, stateful_step_count=40, deadline=None)


def test_a_refusal_quotes_the_pools_free_and_reclaimable_gpus() -> None:
    config = SchedulerConfig()
    state = EngineState(FleetSnapshot.build([host("h0", 4), host("h1", 2)]))
    ir, od = CapacityClass.INTERRUPTIBLE, CapacityClass.ON_DEMAND
    for subject, gpus, cls in (("a", 3, od), ("b", 1, ir), ("c", 1, od)):
        state = engine.launch(state, LaunchSpec(subject, POOL, gpus, cls, "acct"), 0, config).state
    with pytest.raises(InsufficientCapacity) as refused:
        engine.launch(state, LaunchSpec("d", POOL, 4, od, "acct"), 0, config)
    # h0: 3 on-demand + 1 interruptible; h1: 1 on-demand, 1 free.
    details = refused.value.details
    assert (details["free_gpus"], details["largest_free_block"]) == (1, 1)
    assert details["reclaimable_gpus"] == 1

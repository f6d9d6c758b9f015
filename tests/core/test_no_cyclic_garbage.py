"""An engine step leaves no reference cycle behind: what it does not keep is freed at once.

Each input builds a `Work` with drafts of the state's maps; a draft that held a method of the
work holding it made every step's scratch space, and the states it reached, cyclic garbage that
only the collector could free (about 8 KB an event in the simulator, and a quarter of its time
in the collector's passes; the server decides on the same engine). Each row runs engine inputs
with the collector off and asks it afterwards how much it would have had to collect.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator

import pytest
from fleet_builders import POOL, host

from lowcostgpu.core import engine
from lowcostgpu.core.engine import EngineState, LaunchSpec
from lowcostgpu.core.lifecycle import (
    CheckpointReported,
    StopRequested,
    WorkloadExited,
    WorkloadStarted,
)
from lowcostgpu.core.scheduler import SchedulerConfig
from lowcostgpu.core.snapshot import FleetSnapshot
from lowcostgpu.domain.capacity import CapacityClass
from lowcostgpu.domain.errors import InsufficientCapacity

CONFIG = SchedulerConfig(min_runtime_s=60)
ODC, INT = CapacityClass.ON_DEMAND, CapacityClass.INTERRUPTIBLE


def _running(n: int) -> EngineState:
    """`n` one-GPU interruptible instances started on one 8-GPU host, and one more queued."""
    state = EngineState(FleetSnapshot.build([host("h1", 8)]))
    for k in range(n + 1):
        state = engine.launch(state, LaunchSpec(f"i{k}", POOL, 1, INT), 10, CONFIG).state
    for k in range(min(n, 8)):
        state = engine.report(state, f"i{k}", WorkloadStarted(), 11, CONFIG).state
    return state


def _launches(state: EngineState) -> Iterator[EngineState]:
    for k in range(20):
        yield engine.launch(state, LaunchSpec(f"q{k}", POOL, 1, INT), 20 + k, CONFIG).state


def _reports(state: EngineState) -> Iterator[EngineState]:
    for k in range(8):
        state = engine.report(state, f"i{k}", CheckpointReported(k), 100 + k, CONFIG).state
        yield state


def _reclaim_and_drain(state: EngineState) -> Iterator[EngineState]:
    for k, gpus in enumerate((2, 2, 4)):  # each later victim search on a host state between
        state = engine.launch(state, LaunchSpec(f"od{k}", POOL, gpus, ODC), 200 + k, CONFIG).state
        yield state
    for k in range(8):
        state = engine.report(state, f"i{k}", WorkloadExited(143), 210 + k, CONFIG).state
        yield state
    yield engine.tick(state, 600, CONFIG).state


def _refusal(state: EngineState) -> Iterator[EngineState]:
    state = engine.launch(state, LaunchSpec("od", POOL, 8, ODC), 200, CONFIG).state
    with pytest.raises(InsufficientCapacity):  # the raised error's traceback: no cycle either
        engine.launch(state, LaunchSpec("od2", POOL, 8, ODC), 201, CONFIG)
    yield engine.refused(state, POOL, 8, 201, CONFIG, "od2").state


def _stops(state: EngineState) -> Iterator[EngineState]:
    for k in range(8):
        state = engine.report(state, f"i{k}", StopRequested(), 300 + k, CONFIG).state
        yield state
    yield engine.tick(state, 1000, CONFIG).state


@pytest.mark.parametrize(
    "inputs",
    [_launches, _reports, _reclaim_and_drain, _refusal, _stops],
    ids=["queued launches", "checkpoint reports", "a reclaim and its drain", "a refusal", "stops"],
)
def test_engine_inputs_leave_nothing_for_the_cycle_collector(
    inputs: Callable[[EngineState], Iterator[EngineState]],
) -> None:
    state = _running(8)
    gc.collect()
    gc.disable()
    try:
        steps = sum(1 for _ in inputs(state))  # the states between are not kept
        found = gc.collect()
    finally:
        gc.enable()
    assert steps  # the inputs ran
    assert found == 0, f"{found} objects were only reachable through reference cycles"

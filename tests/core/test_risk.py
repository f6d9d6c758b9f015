"""Preemption risk (`core.risk`): the next victims are warned once per episode, to their owner."""

from __future__ import annotations

from dataclasses import replace

import pytest
from fleet_builders import POOL, host

from lowcostgpu.core import cluster_engine, engine
from lowcostgpu.core.clusters import ClusterSpec
from lowcostgpu.core.effects import EmitEvent, MarkNodeRisk
from lowcostgpu.core.engine import EngineState, EngineStep, LaunchSpec
from lowcostgpu.core.lifecycle import CheckpointReported, WorkloadExited, WorkloadStarted
from lowcostgpu.core.risk import MAX_ARRIVALS, PoolRisk, recent, under_pressure, with_arrival
from lowcostgpu.core.scheduler import SchedulerConfig
from lowcostgpu.core.snapshot import FleetSnapshot
from lowcostgpu.core.victim_policy import LEAST_WORK_LOST
from lowcostgpu.domain.capacity import CapacityClass, PoolKey
from lowcostgpu.domain.events import Reason
from lowcostgpu.domain.status import InstanceStatus, NodeStatus

CONFIG = SchedulerConfig(min_runtime_s=60, policy=LEAST_WORK_LOST)
ODC, INT = CapacityClass.ON_DEMAND, CapacityClass.INTERRUPTIBLE
OTHER = PoolKey("us", "h100")


def risk_events(step: EngineStep) -> list[EmitEvent]:
    return [
        e for e in step.effects if isinstance(e, EmitEvent) and e.reason is Reason.PREEMPTION_RISK
    ]


def running(hosts: int, interruptible: list[str], config: SchedulerConfig = CONFIG) -> EngineState:
    """`hosts` one-GPU hosts; the instances run on them (account acme), started at 0, the
    first checkpointed least recently (so least-work-lost takes the last one first)."""
    state = EngineState(FleetSnapshot.build([host(f"h{k}", 1) for k in range(hosts)]))
    for instance_id in interruptible:
        state = engine.launch(state, LaunchSpec(instance_id, POOL, 1, INT, "acme"), 0, config).state
        state = engine.report(state, instance_id, WorkloadStarted(), 0, config).state
    for k, instance_id in enumerate(interruptible):
        state = engine.report(state, instance_id, CheckpointReported(1), 100 + k, config).state
    return state


def on_demand(
    state: EngineState, name: str, now: int, config: SchedulerConfig = CONFIG
) -> EngineStep:
    return engine.launch(state, LaunchSpec(name, POOL, 1, ODC, "bigco"), now, config)


@pytest.mark.parametrize(
    ("free_gpus", "arrivals", "hold", "pressure"),
    [
        (0, [(0, 1)], False, True),  # one GPU asked for, none free
        (1, [(0, 1)], False, False),  # as many free as asked for: no pressure
        (1, [(0, 1), (5, 1)], False, True),
        (8, [], True, True),  # a hold: a customer was refused
        (0, [], False, False),  # no demand at all
    ],
)
def test_a_pool_is_under_pressure_below_its_recent_demand_or_while_held(
    free_gpus: int, arrivals: list[tuple[int, int]], hold: bool, pressure: bool
) -> None:
    assert under_pressure(free_gpus, arrivals, hold) is pressure


@pytest.mark.parametrize(
    ("at", "kept"),
    [(101, True), (100, False)],  # window 900 at now 1000: (100, 1000] is in it
)
def test_arrivals_leave_the_window_by_time(at: int, kept: bool) -> None:
    assert (recent([(at, 1)], 1000, 900) == ((at, 1),)) is kept


def test_the_remembered_arrivals_are_bounded() -> None:
    risk = PoolRisk()
    for k in range(MAX_ARRIVALS + 10):
        risk = with_arrival(risk, 1, k, 900)
    assert len(risk.arrivals) == MAX_ARRIVALS
    assert risk.arrivals[-1] == (MAX_ARRIVALS + 9, 1)


@pytest.mark.parametrize(
    ("hosts", "warned"),
    [
        (4, ["i3"]),  # 3 interruptible + od-1 fill 4 GPUs: the next one would reclaim i3
        (5, []),  # one GPU still free, as many as on-demand asked for: nobody
    ],
)
def test_a_pool_below_its_recent_arrivals_warns_the_next_victims(
    hosts: int, warned: list[str]
) -> None:
    state = running(hosts, ["i1", "i2", "i3"])
    step = on_demand(state, "od-1", 1000)
    assert [e.object_id for e in risk_events(step)] == warned
    for instance_id in ("i1", "i2", "i3"):
        at = step.state.risk.warned_at(POOL, instance_id)
        assert (at == 1000) is (instance_id in warned)


def test_the_warning_goes_to_the_owner_only_and_names_nobody_else() -> None:
    step = on_demand(running(4, ["i1", "i2", "i3"]), "od-1", 1000)
    (event,) = risk_events(step)
    assert (event.object_kind, event.object_id, event.account_id) == ("instance", "i3", "acme")
    said = f"{event.message} {event.data}"
    for other in ("od-1", "bigco", "i1", "i2", "h0", "h1", "h2", "h3"):
        assert other not in said
    assert event.data["risk"] == "next" and event.data["recent_on_demand_gpus"] == 1


def test_one_event_per_episode_however_many_steps_assess_the_pool() -> None:
    step = on_demand(running(5, ["i1", "i2", "i3"]), "od-1", 1000)
    step = on_demand(step.state, "od-2", 1001)  # 2 GPUs asked for, none free
    state, warned = step.state, sorted(e.object_id for e in risk_events(step))
    assert warned == ["i2", "i3"]  # a replay of both requests would reclaim i3, then i2
    # i1 finishes: one GPU frees, still fewer than the two asked for; the pool is assessed
    # again, and the replay's victim (i3) is warned already: no second event.
    step = engine.report(state, "i1", WorkloadExited(0), 1010, CONFIG)
    assert risk_events(step) == []
    assert step.state.risk.warned_at(POOL, "i3") == 1001


def test_a_step_that_moves_no_gpus_assesses_nothing() -> None:
    step = on_demand(running(4, ["i1", "i2", "i3"]), "od-1", 1000)
    report = engine.report(step.state, "i2", CheckpointReported(9), 1005, CONFIG)
    assert engine._changed_pools(report, step.state) == set()  # free, reclaimable unchanged
    assert risk_events(report) == []


def test_a_hold_warns_the_victims_of_the_refused_request() -> None:
    # Two 2-GPU hosts: i1 on h0 with one GPU free, on-demand on all of h1. Nothing is asked
    # for lately and one GPU is free; the refusal of a 2-GPU request holds the pool.
    state = EngineState(FleetSnapshot.build([host("h0", 2), host("h1", 2)]))
    state = engine.launch(state, LaunchSpec("od-0", POOL, 2, ODC, "bigco"), 0, CONFIG).state
    state = engine.launch(state, LaunchSpec("i1", POOL, 1, INT, "acme"), 0, CONFIG).state
    state = engine.report(state, "i1", WorkloadStarted(), 0, CONFIG).state
    quiet = engine.report(state, "i1", CheckpointReported(1), 2000, CONFIG)
    assert risk_events(quiet) == []  # od-0's arrival has left the window
    held = engine.refused(quiet.state, POOL, 2, 2000, CONFIG)
    assert [e.object_id for e in risk_events(held)] == ["i1"]
    assert risk_events(held)[0].data["hold"] is True


def test_the_risk_clears_without_an_event_when_the_pool_recovers() -> None:
    step = on_demand(running(4, ["i1", "i2", "i3"]), "od-1", 1000)
    step = engine.report(step.state, "od-1", WorkloadStarted(), 1000, CONFIG)
    step = engine.report(step.state, "od-1", WorkloadExited(0), 1100, CONFIG)  # one GPU frees
    assert risk_events(step) == []
    assert step.state.risk.warned_at(POOL, "i3") is None


def test_the_risk_clears_when_the_arrivals_leave_the_window() -> None:
    step = on_demand(running(4, ["i1", "i2", "i3"]), "od-1", 1000)
    assert step.wake_at == 1900  # the engine must look again when od-1's arrival expires
    step = engine.tick(step.state, 1900, CONFIG)
    assert step.state.risk.warned_at(POOL, "i3") is None
    assert risk_events(step) == [] and step.wake_at is None


def test_a_reclaimed_instance_leaves_the_warned_set_and_the_next_is_warned() -> None:
    step = on_demand(running(4, ["i1", "i2", "i3"]), "od-1", 1000)
    step = on_demand(step.state, "od-2", 1010)  # it reclaims i3, the one warned
    assert step.state.instances["i3"].status is InstanceStatus.INTERRUPTING
    assert step.state.risk.warned_at(POOL, "i3") is None
    # The demand was replayed 10 s ago: the next replay is due 60 s after that one, and the
    # engine wakes for it.
    assert risk_events(step) == [] and step.wake_at is not None and step.wake_at <= 1060
    early = engine.tick(step.state, 1059, CONFIG)
    assert risk_events(early) == []
    # Two GPUs asked for, none free: the replay reclaims the next two (i2, then i1).
    due = engine.tick(early.state, 1060, CONFIG)
    assert sorted(e.object_id for e in risk_events(due)) == ["i1", "i2"]


def test_warnings_off_warn_nobody() -> None:
    off = replace(CONFIG, risk_window_s=0)
    step = on_demand(running(4, ["i1", "i2", "i3"], off), "od-1", 1000, off)
    assert risk_events(step) == [] and not step.state.risk.pools


def test_a_step_in_another_pool_does_not_assess_this_one() -> None:
    fleet = FleetSnapshot.build([host("h0", 1), host("x0", 1, OTHER), host("x1", 1, OTHER)])
    state = engine.launch(
        EngineState(fleet), LaunchSpec("i1", POOL, 1, INT, "acme"), 0, CONFIG
    ).state
    step = engine.launch(state, LaunchSpec("j1", OTHER, 1, INT, "acme"), 10, CONFIG)
    assert engine._changed_pools(step, state) == {OTHER}
    # and an on-demand launch in the other pool leaves this pool's risk state alone
    step = engine.launch(step.state, LaunchSpec("od", OTHER, 1, ODC, "bigco"), 20, CONFIG)
    assert POOL not in step.state.risk.pools


# Cluster nodes: the cluster's owner is warned and the node marked (`MarkNodeRisk`) --------------


def node_risk_marks(step: EngineStep) -> list[tuple[str, str]]:
    return [(e.node_id, e.risk) for e in step.effects if isinstance(e, MarkNodeRisk)]


def with_a_preemptible_node() -> tuple[EngineState, str]:
    """Three 2-GPU hosts: cluster c1 (account tenant) with its standard node and one 2-GPU
    preemptible node; one host free."""
    state = EngineState(FleetSnapshot.build([host(f"h{k}", 2) for k in range(3)]))
    spec = ClusterSpec(POOL, gpus_per_node=2, standard_nodes=1, desired_preemptible_gpus=2)
    state = cluster_engine.create_cluster(state, "c1", spec, 0, CONFIG, account_id="tenant").state
    (node,) = [n.id for n in state.nodes.values() if n.capacity_class.preemptible]
    assert state.nodes[node].status is NodeStatus.READY
    return state, node


def od(state: EngineState, name: str, now: int, gpus: int = 2) -> EngineStep:
    return engine.launch(state, LaunchSpec(name, POOL, gpus, ODC, "bigco"), now, CONFIG)


def test_a_preemptible_node_among_the_next_victims_is_warned_to_its_cluster_and_marked() -> None:
    state, node = with_a_preemptible_node()
    step = od(state, "od-1", 1000)  # takes the free host: 2 GPUs asked for, none free
    (event,) = risk_events(step)
    assert (event.object_kind, event.object_id, event.account_id) == ("node", node, "tenant")
    assert event.data["cluster_id"] == "c1" and event.data["risk"] == "next"
    for other in ("od-1", "bigco", "h0", "h1", "h2"):
        assert other not in f"{event.message} {event.data}"
    assert node_risk_marks(step) == [(node, "next")]
    assert step.state.risk.warned_at(POOL, node) == 1000


def test_a_node_mark_is_cleared_when_the_pressure_ends() -> None:
    state, node = with_a_preemptible_node()
    step = od(state, "od-1", 1000)
    step = engine.report(step.state, "od-1", WorkloadStarted(), 1000, CONFIG)
    step = engine.report(step.state, "od-1", WorkloadExited(0), 1100, CONFIG)  # the host frees
    assert node_risk_marks(step) == [(node, "")] and risk_events(step) == []
    assert step.state.risk.warned_at(POOL, node) is None


def test_a_reclaimed_node_loses_its_warning_and_its_mark_is_not_cleared_again() -> None:
    state, node = with_a_preemptible_node()
    step = od(state, "od-1", 1000)
    step = od(step.state, "od-2", 1010)  # reclaims the node: its drain starts
    assert step.state.nodes[node].status is NodeStatus.CORDONED
    assert step.state.risk.warned_at(POOL, node) is None
    assert node_risk_marks(step) == []  # the drain replaces the advice (the provider drops it)
    quiet = engine.tick(step.state, 5000, CONFIG)  # arrivals gone: the episode ends
    assert node_risk_marks(quiet) == []


def test_standard_nodes_are_never_warned() -> None:
    state = EngineState(FleetSnapshot.build([host(f"h{k}", 2) for k in range(2)]))
    spec = ClusterSpec(POOL, gpus_per_node=2, standard_nodes=1)
    state = cluster_engine.create_cluster(state, "c1", spec, 0, CONFIG, account_id="tenant").state
    step = od(state, "od-1", 1000)  # under pressure, but nothing that could be reclaimed
    assert step.state.risk.pool(POOL).arrivals and not step.state.risk.pool(POOL).warned
    assert risk_events(step) == [] and node_risk_marks(step) == []

"""Property: whatever the target changes, placements and reclaims, reconcile converges."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from test_clusters_support import Sim

from lowcostgpu.core.clusters import (
    ClusterPlan,
    allocated_preemptible_gpus,
    pending_preemptible_gpus,
    update_target,
)
from lowcostgpu.domain.status import NodeStatus

GPUS_PER_NODE = 4

Action = tuple[str, int]
actions = st.lists(
    st.one_of(
        st.tuples(st.just("target"), st.integers(0, 6)),  # new target, in nodes
        st.tuples(st.just("place"), st.integers(0, 4)),  # the scheduler places up to N tickets
        st.tuples(st.just("preempt"), st.integers(0, 20)),  # reclaim the k-th ready node
        st.tuples(st.just("finish"), st.just(0)),  # every drain completes
    ),
    max_size=40,
)


def _check_plan(sim: Sim, plan: ClusterPlan, standard_ids: set[str]) -> None:
    assert not {d.node_id for d in plan.drains} & standard_ids, "standard nodes never scale down"
    ids = [n.id for n in sim.nodes.values()]
    assert len(ids) == len(set(ids)), "no duplicate node ids"
    live = allocated_preemptible_gpus(sim.nodes.values()) + pending_preemptible_gpus(
        sim.nodes.values()
    )
    assert live == sim.cluster.desired_preemptible_gpus, "pending + allocated equals the target"
    assert set(sim.tickets) == {n.id for n in sim.of(NodeStatus.PENDING)}


@settings(max_examples=150, deadline=None)
@given(start_nodes=st.integers(0, 6), steps=actions)
def test_reconcile_converges_to_the_target(start_nodes: int, steps: list[Action]) -> None:
    sim = Sim.start(desired=start_nodes * GPUS_PER_NODE, gpus_per_node=GPUS_PER_NODE, standard=2)
    standard_ids = {n.id for n in sim.of(NodeStatus.READY, preemptible=False)}
    _check_plan(sim, sim.reconcile(), standard_ids)
    for kind, value in steps:
        sim.now += 60
        if kind == "target":
            sim.cluster = update_target(sim.cluster, value * GPUS_PER_NODE, now=sim.now)
        elif kind == "place":
            sim.place(limit=value)
        elif kind == "preempt" and (ready := sim.of(NodeStatus.READY)):
            sim.preempt(ready[value % len(ready)].id)
        elif kind == "finish":
            sim.finish_drains()
            desired = sim.cluster.desired_preemptible_gpus
            assert allocated_preemptible_gpus(sim.nodes.values()) <= desired, "drains complete"
        _check_plan(sim, sim.reconcile(), standard_ids)
    # Let every drain finish and the queue place everything: the target is exactly met.
    sim.finish_drains()
    sim.place()
    _check_plan(sim, sim.reconcile(), standard_ids)
    assert allocated_preemptible_gpus(sim.nodes.values()) == sim.cluster.desired_preemptible_gpus
    assert sim.cluster.target_met is True
    assert len(sim.of(NodeStatus.READY, preemptible=False)) == 2
    replaced = [n.replaces for n in sim.nodes.values() if n.replaces is not None]
    assert len(replaced) == len(set(replaced)), "a reclaimed node is replaced at most once"
    for node in sim.nodes.values():
        if node.replaces is not None:
            assert sim.nodes[node.replaces].drain_reason == "preempted"
            assert node.enqueued_at == sim.nodes[node.replaces].enqueued_at, "keeps its place"

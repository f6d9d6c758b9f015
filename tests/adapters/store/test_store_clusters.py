"""Clusters and nodes in the store, against every backend: versioned, all or nothing, filtered."""

from __future__ import annotations

from dataclasses import replace

import pytest

from lowcostgpu.core.clusters import ClusterSpec, ClusterState, create_cluster
from lowcostgpu.core.drain import Placed, Reclaimed
from lowcostgpu.core.node_lifecycle import node_step
from lowcostgpu.core.nodes import NodeState
from lowcostgpu.domain.capacity import CapacityClass, PoolKey
from lowcostgpu.domain.errors import NotFound, StaleWrite
from lowcostgpu.domain.status import ClusterStatus, NodeStatus
from lowcostgpu.ports.store import Store
from lowcostgpu.ports.store_records import ClusterWrite, Commit, NodeWrite

POOL = PoolKey("eu-west", "h100-sxm")


def cluster(cluster_id: str = "c-1", account: str = "acct-1") -> ClusterState:
    spec = ClusterSpec(POOL, 8, 1, 16, grace_period_s=120)
    return create_cluster(cluster_id, spec, 1_000, account_id=account)


def node(node_id: str, cluster_id: str = "c-1", preemptible: bool = True) -> NodeState:
    cls = CapacityClass.INTERRUPTIBLE if preemptible else CapacityClass.ON_DEMAND
    return NodeState(node_id, cluster_id, "acct-1", POOL, 8, cls, created_at=1_000)


def rich_node() -> NodeState:
    """Every field set: placed, cordoned by a reclaim, with an inherited place and history."""
    n = replace(node("c-1-n9"), enqueued_at=900, replaces="c-1-n2", last_interrupted_at=950)
    n = node_step(n, Placed("c-1-n9@1000", "host-a", (4, 5, 6, 7)), 1_000).state
    return node_step(n, Reclaimed("i-od", 300, "least work lost"), 1_300).state


def test_clusters_and_nodes_round_trip_with_versions(store: Store) -> None:
    c, n = cluster(), rich_node()
    store.commit(Commit(clusters=[ClusterWrite(c, None)], nodes=[NodeWrite(n, None)]))
    assert store.cluster("c-1").state == c and store.cluster("c-1").version == 1
    (stored,) = store.nodes()
    assert (stored.state, stored.version) == (n, 1)
    assert stored.state.status is NodeStatus.CORDONED and stored.state.waiting_for == frozenset()
    changed = replace(c, target_met=False, node_serial=3)
    store.commit(Commit(clusters=[ClusterWrite(changed, 1)]))
    assert store.cluster("c-1").state == changed and store.cluster("c-1").version == 2


@pytest.mark.parametrize("kind", ["cluster", "node"])
def test_a_stale_write_writes_nothing_of_the_commit(store: Store, kind: str) -> None:
    store.commit(
        Commit(clusters=[ClusterWrite(cluster(), None)], nodes=[NodeWrite(node("n1"), None)])
    )
    bad_cluster = ClusterWrite(replace(cluster(), target_met=True), 7 if kind == "cluster" else 1)
    bad_node = NodeWrite(replace(node("n1"), gpus=4), 7 if kind == "node" else 1)
    new_node = NodeWrite(node("n2"), None)
    with pytest.raises(StaleWrite, match=f"{kind} .* no longer at version 7"):
        store.commit(Commit(clusters=[bad_cluster], nodes=[new_node, bad_node]))
    assert store.cluster("c-1").version == 1 and store.cluster("c-1").state.target_met is None
    assert [(s.state.id, s.version, s.state.gpus) for s in store.nodes()] == [("n1", 1, 8)]


def test_creating_what_exists_is_a_stale_write(store: Store) -> None:
    store.commit(
        Commit(clusters=[ClusterWrite(cluster(), None)], nodes=[NodeWrite(node("n1"), None)])
    )
    with pytest.raises(StaleWrite, match="cluster c-1 already exists"):
        store.commit(Commit(clusters=[ClusterWrite(cluster(), None)]))
    with pytest.raises(StaleWrite, match="node n1 already exists"):
        store.commit(Commit(nodes=[NodeWrite(node("n1"), None)]))


def test_deleted_clusters_and_removed_nodes_are_listed_only_when_asked(store: Store) -> None:
    gone = replace(cluster("c-2", account="acct-2"), status=ClusterStatus.DELETED)
    removed = replace(node("c-2-n1", "c-2"), status=NodeStatus.REMOVED, removed_at=2_000)
    store.commit(
        Commit(
            clusters=[ClusterWrite(cluster(), None), ClusterWrite(gone, None)],
            nodes=[
                NodeWrite(node("c-1-n1", preemptible=False), None),
                NodeWrite(node("c-1-n2"), None),
                NodeWrite(removed, None),
            ],
        )
    )
    assert [c.state.id for c in store.clusters()] == ["c-1"]
    assert [c.state.id for c in store.clusters(include_deleted=True)] == ["c-1", "c-2"]
    assert [c.state.id for c in store.clusters(account_id="acct-2", include_deleted=True)] == [
        "c-2"
    ]
    assert [n.state.id for n in store.nodes()] == ["c-1-n1", "c-1-n2"]
    assert [n.state.id for n in store.nodes(cluster_id="c-2", include_removed=True)] == ["c-2-n1"]
    assert store.nodes(cluster_id="c-2") == []
    assert store.cluster("c-2").state.status is ClusterStatus.DELETED
    assert store.node("c-2-n1").state == removed  # one node by its key, removed ones too
    assert store.node("c-1-n2").version == 1


def test_an_unknown_cluster_is_not_found_with_a_hint(store: Store) -> None:
    with pytest.raises(NotFound, match="no cluster c-404") as info:
        store.cluster("c-404")
    assert "list clusters" in (info.value.hint or "")


def test_an_unknown_node_is_not_found_with_a_hint(store: Store) -> None:
    with pytest.raises(NotFound, match="no node c-1-n404") as info:
        store.node("c-1-n404")
    assert "get the cluster" in (info.value.hint or "")

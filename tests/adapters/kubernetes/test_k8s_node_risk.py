"""A preemptible cluster node among the next victims, on a real kube-apiserver: the Node gets the
risk label and annotation right after the decision (what a customer's DaemonSet can select on),
loses them when the demand ends, never gets them while draining or after it left the cluster,
a replayed mark changes nothing, and a new leader clears the marks an old one left."""

from __future__ import annotations

from typing import Any

import pytest
from k8s_world import K8sWorld
from kubelet import FakeKubelet
from test_k8s_drain import tick_until

from lowcostgpu.adapters.kubernetes import Kube
from lowcostgpu.adapters.kubernetes.nodes import KubernetesNodes
from lowcostgpu.domain.status import InstanceStatus


def marked(world: K8sWorld, host: str) -> tuple[str | None, str | None]:
    node = world.node(host)
    labels, annotations = node.metadata.labels or {}, node.metadata.annotations or {}
    return labels.get(world.names.risk_label), annotations.get(world.names.risk_since)


@pytest.fixture
def world(kube: Kube, namespace: str) -> K8sWorld:
    return K8sWorld(kube, namespace, hosts=3)  # standard node, preemptible node, one spare


def preemptible_node(world: K8sWorld, grace_s: int = 4) -> tuple[str, str]:
    """A cluster with its standard node and one preemptible node: (cluster id, the host)."""
    c = world.cluster(desired=8, grace_s=grace_s)
    world.plane.tick()
    (host,) = world.node_names(c, "preemptible")
    return c, host


def recording(world: K8sWorld) -> list[Any]:
    done: list[Any] = []
    carry_out = world.nodes.carry_out
    world.nodes.carry_out = lambda entry, runtime: (done.append(entry), carry_out(entry, runtime))
    return done


def test_the_node_is_labelled_at_risk_then_unlabelled_when_the_demand_ends(
    world: K8sWorld, kubelet: FakeKubelet
) -> None:
    c, host = preemptible_node(world)
    assert marked(world, host) == (None, None)
    od = world.on_demand(8)  # takes the spare: 8 GPUs asked for lately, none free
    label, since = marked(world, host)  # carried out right after the launch's commit
    assert label == "next" and since is not None and int(since) > 0
    assert list(world.plane.clusters.get_cluster(c).risk_since.values()) == [int(since)]
    selector = f"{world.names.risk_label}=next"
    assert [n.metadata.name for n in world.kube.core.list_node(label_selector=selector).items] == [
        host
    ]
    tick_until(world, lambda: world.store.instance(od).state.status is InstanceStatus.RUNNING)
    world.plane.stop(od)
    tick_until(world, lambda: marked(world, host) == (None, None), what="the mark cleared")
    node = world.node(host)
    assert not node.spec.unschedulable and world.cluster_of(host) == c  # still serving, as it was


def test_a_reclaimed_node_loses_its_mark_and_a_late_replay_does_not_bring_it_back(
    world: K8sWorld, kubelet: FakeKubelet
) -> None:
    done = recording(world)
    _, host = preemptible_node(world, grace_s=2)
    world.on_demand(8)
    assert marked(world, host)[0] == "next"
    world.on_demand(8)  # this one reclaims the node: the drain replaces the advice
    assert marked(world, host) == (None, None)  # draining (or, with no pod to evict, drained)
    (mark,) = [e for e in done if e.kind == "MarkNodeRisk"]
    world.nodes.carry_out(mark, world.runtime)  # a replay during or after the drain: nothing
    assert marked(world, host) == (None, None)
    tick_until(world, lambda: world.cluster_of(host) is None, what="the host back in the pool")
    world.nodes.carry_out(mark, world.runtime)  # a replay after it left the cluster: nothing
    assert marked(world, host) == (None, None) and world.node(host).spec.unschedulable


def test_a_new_leader_clears_the_marks_a_previous_one_left_but_keeps_its_own(
    world: K8sWorld, kubelet: FakeKubelet
) -> None:
    """The risk state is not stored: a restarted plane would never clear an old mark itself."""
    c, host = preemptible_node(world)
    world.on_demand(8)
    assert marked(world, host)[0] == "next"
    world.nodes.reports()  # the process that marked it: its own mark stays
    assert marked(world, host)[0] == "next"
    restarted = KubernetesNodes(
        world.kube, world.store, names=world.names, plane=world.namespace, hosts=world.hosts
    )
    restarted.reports()
    assert marked(world, host) == (None, None)
    assert world.cluster_of(host) == c and not world.node(host).spec.unschedulable


def test_a_mark_retried_after_a_later_clear_does_not_undo_it(
    world: K8sWorld, kubelet: FakeKubelet
) -> None:
    """The outbox retries a failed entry after later ones have been carried out."""

    c, host = preemptible_node(world)
    (node_id,) = [n.id for n in world.plane.clusters.get_cluster(c).nodes if n.host_id == host]
    world.nodes.mark_risk(node_id, "", 2_000)  # the episode's end, carried out first
    world.nodes.mark_risk(node_id, "next", 1_000)  # the warning's entry, retried late
    assert marked(world, host) == (None, None)

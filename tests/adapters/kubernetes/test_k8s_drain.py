"""Cluster nodes are whole fleet hosts, real Nodes, on a real kube-apiserver (the test plays the
kubelet): a host joins a cluster by labels, taint and uncordon; the drain cordons, taints,
annotates, holds a finalizer, posts Warnings on the Node and on each evicted pod, evicts with each
pod's grace; PDBs are respected until the deadline; the host goes back to the pool, never
deleted, and refills the cluster later."""

from __future__ import annotations

import shutil
import subprocess
import time
from typing import Any

import pytest
from apiserver import shared
from k8s_world import K8sWorld, create_pdb
from kubelet import FakeKubelet

from lowcostgpu.adapters.kubernetes import Kube
from lowcostgpu.adapters.kubernetes.names import KubeNames
from lowcostgpu.adapters.kubernetes.objects import GPU_RESOURCE
from lowcostgpu.domain.status import InstanceStatus
from waiting import DEADLINE_S, wait_until


def tick_until(
    world: K8sWorld, predicate: Any, timeout_s: float = DEADLINE_S, what: str = ""
) -> Any:
    def ticked() -> Any:
        world.plane.tick()
        return predicate()

    return wait_until(ticked, timeout_s, what)


def live_preemptible_gpus(world: K8sWorld, cluster_id: str) -> int:
    """GPUs of the cluster's preemptible Nodes that are not cordoned, as Kubernetes sees them."""
    n = world.names
    selector = f"{n.cluster_label}={cluster_id},{n.compute_class_label}=preemptible"
    nodes = world.kube.core.list_node(label_selector=selector).items
    return sum(int(x.status.allocatable[GPU_RESOURCE]) for x in nodes if not x.spec.unschedulable)


def ours(world: K8sWorld, node: Any) -> list[tuple[str, str, str]]:
    """Our taints on a Node (the API server adds its own, e.g. node.kubernetes.io/...)."""
    keys = world.names.ours
    return sorted((t.key, t.value or "", t.effect) for t in node.spec.taints or [] if t.key in keys)


def stopped(world: K8sWorld, *names: str) -> bool:
    """Whether the kubelet has confirmed these pods stopped: each gone, or ended (its phase
    Succeeded or Failed, reported once its containers have exited)."""
    pods = world.pods()
    return all(n not in pods or pods[n].status.phase in ("Succeeded", "Failed") for n in names)


def events(world: K8sWorld, namespace: str, reason: str) -> list[Any]:
    found = world.kube.events.list_namespaced_event(namespace).items
    return [e for e in found if e.reason == reason]


@pytest.fixture
def world(kube: Kube, namespace: str) -> K8sWorld:
    return K8sWorld(kube, namespace, hosts=2)


def test_hosts_join_as_whole_nodes_labelled_tainted_uncordoned_never_created(
    kube: Kube, namespace: str
) -> None:
    world = K8sWorld(kube, namespace, hosts=3)
    before = {n.metadata.name for n in kube.core.list_node().items}
    c = world.cluster(desired=8)
    world.plane.tick()
    (standard,) = world.node_names(c, "standard")
    (preemptible,) = world.node_names(c, "preemptible")
    s, p = world.node(standard), world.node(preemptible)
    labels = world.names.cluster_label, world.names.compute_class_label
    assert (s.metadata.labels[labels[0]], s.metadata.labels[labels[1]]) == (c, "standard")
    assert (p.metadata.labels[labels[0]], p.metadata.labels[labels[1]]) == (c, "preemptible")
    assert ours(world, s) == [] and not s.spec.unschedulable
    t = world.names.taint
    assert ours(world, p) == [(t.key, t.value, t.effect)] and not p.spec.unschedulable
    assert p.status.allocatable[GPU_RESOURCE] == "8"  # the kubelet's, untouched
    (spare,) = set(world.hosts) - {standard, preemptible}
    assert world.cluster_of(spare) is None and world.node(spare).spec.unschedulable  # the pool
    view = world.plane.clusters.get_cluster(c)
    assert view.allocated_preemptible_gpus == live_preemptible_gpus(world, c) == 8
    world.plane.tick()  # carried out again (a replayed effect): nothing changes
    assert {n.metadata.name for n in kube.core.list_node().items} == before  # none made


def test_reclaim_cordons_taints_warns_node_and_pods_evicts_with_grace_then_returns_the_host(
    world: K8sWorld, kubelet: FakeKubelet
) -> None:
    c = world.cluster(desired=8, grace_s=6)
    world.plane.tick()
    (node,) = world.node_names(c, "preemptible")
    world.user_pod(node, "train-0", grace_s=3)
    world.user_pod(node, "train-1", grace_s=1)
    wait_until(
        lambda: {"train-0", "train-1"} <= {n for n, what, _ in kubelet.log if what == "running"}
    )

    # The launch itself decides the reclaim and carries it out right after its commit, so the
    # clock starts before the request: the grace is measured from no later than the eviction.
    reclaimed_at = time.monotonic()
    od = world.on_demand(8)  # needs the preemptible node's host: reclaim
    world.plane.tick()
    n = world.node(node)
    names = world.names
    assert n.spec.unschedulable is True  # 1. cordoned, tainted, annotated, held
    assert (names.draining_taint.key, "", "NoSchedule") in ours(world, n)
    assert names.drain_deadline in n.metadata.annotations
    assert names.drain_finalizer in n.metadata.finalizers
    preempted = [
        e for e in events(world, "kube-system", "NodePreempted") if e.regarding.name == node
    ]
    assert len(preempted) == 1 and preempted[0].type == "Warning"  # 2. the Events
    # ... which never name the on-demand work it was reclaimed for (maybe another account's)
    assert od not in preempted[0].note and "reclaimed for on-demand work" in preempted[0].note
    on_pods = events(world, world.namespace, "NodePreempted")  # where the pods' owner looks
    assert sorted(e.regarding.name for e in on_pods) == ["train-0", "train-1"]
    assert all(node in e.note and e.type == "Warning" for e in on_pods)
    assert {e.related.name for e in on_pods} == {node}
    pods = world.pods()  # 3. evicted with their own grace
    assert {k: p.metadata.deletion_grace_period_seconds for k, p in pods.items()} == {
        "train-0": 3,
        "train-1": 1,
    }
    assert world.plane.clusters.get_cluster(c).allocated_preemptible_gpus == 0

    def back_in_pool() -> bool:
        if world.cluster_of(node) is not None:
            return False
        assert stopped(world, "train-0", "train-1")  # never before the kubelet said so
        return True

    tick_until(world, back_in_pool, what="the host back in the pool")  # 4. after the longest
    exits = lambda: {n for n, w, _ in kubelet.log if w == "exited 137"}  # noqa: E731
    wait_until(lambda: {"train-0", "train-1"} <= exits(), what="the kubelet's log of both exits")
    timeline = [
        (n, w, round(at - reclaimed_at, 2)) for n, w, at in kubelet.log if at > reclaimed_at
    ]
    print("drain timeline (s after the reclaim):", timeline)
    ended = {name: at for name, what, at in kubelet.log if what == "exited 137"}
    sigterm = {name: at for name, what, at in kubelet.log if what == "SIGTERM"}
    for pod, grace_s in {"train-1": 1, "train-0": 3}.items():  # each got its own whole grace
        assert ended[pod] - sigterm[pod] >= grace_s and sigterm[pod] >= reclaimed_at
    host = world.node(node)
    assert host is not None and ours(world, host) == [] and not host.metadata.finalizers
    assert names.drain_deadline not in (host.metadata.annotations or {})
    tick_until(
        world,
        lambda: world.store.instance(od).state.status is InstanceStatus.RUNNING,
        what="the on-demand instance running",
    )
    assert world.pods()[next(iter(world.pods()))].spec.node_name == node  # on that very host
    if shutil.which("kubectl"):  # as an operator sees it
        argv = ["kubectl", "--kubeconfig", str(shared().kubeconfig), "get", "events"]
        out = subprocess.run([*argv, "-n", "kube-system"], capture_output=True, text=True)
        assert "NodePreempted" in out.stdout and f"node/{node}" in out.stdout, out.stderr


def test_a_pdb_holds_the_eviction_until_the_deadline_then_the_host_goes_anyway(
    world: K8sWorld, kubelet: FakeKubelet
) -> None:
    c = world.cluster(desired=8, grace_s=4)
    world.plane.tick()
    (node,) = world.node_names(c, "preemptible")
    world.user_pod(node, "infer-0", grace_s=1, app="infer")
    wait_until(lambda: any(n == "infer-0" and w == "running" for n, w, _ in kubelet.log))
    create_pdb(world.kube, world.namespace, "infer", "infer", minAvailable=1)
    world.on_demand(8)
    world.plane.tick()
    deadline = int(world.node(node).metadata.annotations[world.names.drain_deadline])
    while time.time() < deadline - 1:  # held: the eviction is refused (429), retried each tick
        world.plane.tick()
        assert world.pods()["infer-0"].metadata.deletion_timestamp is None
        time.sleep(0.2)
    tick_until(world, lambda: world.cluster_of(node) is None, what="the host back at the deadline")
    assert time.time() >= deadline
    wait_until(lambda: "infer-0" not in world.pods(), what="the pod gone")


def test_the_host_refills_the_cluster_when_the_on_demand_work_ends(
    world: K8sWorld, kubelet: FakeKubelet
) -> None:
    c = world.cluster(desired=8, grace_s=2)
    world.plane.tick()
    (host,) = world.node_names(c, "preemptible")
    od = world.on_demand(8)
    world.plane.tick()
    tick_until(world, lambda: world.cluster_of(host) is None, what="the host back in the pool")
    assert world.plane.clusters.get_cluster(c).allocated_preemptible_gpus == 0
    assert live_preemptible_gpus(world, c) == 0
    tick_until(world, lambda: world.store.instance(od).state.status is InstanceStatus.RUNNING)
    world.plane.stop(od)  # capacity comes back: the target is met again by a new node
    tick_until(world, lambda: world.plane.clusters.get_cluster(c).allocated_preemptible_gpus == 8,
               what="the refill")  # fmt: skip
    world.plane.tick()
    assert world.node_names(c, "preemptible") == [host] and live_preemptible_gpus(world, c) == 8
    assert world.cluster_of(host) == c


def test_node_effects_replayed_after_the_drain_change_nothing(
    world: K8sWorld, kubelet: FakeKubelet
) -> None:
    """The outbox is at-least-once: a crash may carry any effect out again, late."""
    done: list[Any] = []
    carry_out = world.nodes.carry_out
    world.nodes.carry_out = lambda entry, runtime: (done.append(entry), carry_out(entry, runtime))
    c = world.cluster(desired=8, grace_s=2)
    world.plane.tick()
    (node,) = world.node_names(c, "preemptible")
    od = world.on_demand(8)
    world.plane.tick()
    tick_until(world, lambda: world.cluster_of(node) is None, what="the host back in the pool")
    tick_until(world, lambda: world.store.instance(od).state.status is InstanceStatus.RUNNING)
    assert {e.kind for e in done} == {"AddNode", "CordonNode", "RemoveNode"}
    for entry in done:  # every node effect once more, after the fact
        carry_out(entry, world.runtime)
    host = world.node(node)
    assert world.cluster_of(node) is None and host.spec.unschedulable and ours(world, host) == []
    found = events(world, "kube-system", "NodePreempted")
    assert [e.regarding.name for e in found].count(node) == 1


def test_a_node_deleted_mid_drain_stays_until_the_drain_has_ended(
    world: K8sWorld, kubelet: FakeKubelet
) -> None:
    # Graces long enough that the delete lands mid-drain on a loaded machine.
    c = world.cluster(desired=8, grace_s=8)
    world.plane.tick()
    (node,) = world.node_names(c, "preemptible")
    world.user_pod(node, "train-0", grace_s=4)  # ends well inside the drain's 8 s
    wait_until(lambda: any(n == "train-0" and w == "running" for n, w, _ in kubelet.log))
    world.on_demand(8)
    world.plane.tick()
    world.kube.core.delete_node(node)  # an operator's `kubectl delete node`, mid-drain
    assert world.node(node) is not None  # held by the drain's finalizer
    assert "train-0" in world.pods()
    tick_until(world, lambda: world.node(node) is None, what="the Node deleted once drained")
    assert stopped(world, "train-0")


def test_an_operator_chooses_the_label_prefix_taint_and_event_reason(
    kube: Kube, namespace: str, kubelet: FakeKubelet
) -> None:
    names = KubeNames(
        prefix="together.ai", preempted_reason="TogetherPreempted", reporting_instance="srv-7"
    )
    world = K8sWorld(kube, namespace, hosts=2, names=names)
    c = world.cluster(desired=8, grace_s=2)
    world.plane.tick()
    (node,) = world.node_names(c, "preemptible")
    labels = world.node(node).metadata.labels
    assert labels["together.ai/compute-class"] == "preemptible"
    assert labels["together.ai/cluster"] == c and not any("lowcostgpu.io" in k for k in labels)
    assert ours(world, world.node(node)) == [("together.ai/preemptible", "true", "NoSchedule")]
    world.on_demand(8)
    world.plane.tick()
    (event,) = [e for e in events(world, "kube-system", "TogetherPreempted")
                if e.regarding.name == node]  # fmt: skip
    assert event.reporting_instance == "srv-7" and event.reporting_controller.startswith(
        "together.ai/"
    )

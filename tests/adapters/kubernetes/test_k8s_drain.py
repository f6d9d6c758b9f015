"""The drain of a preemptible Node, step by step, on a real kube-apiserver (the test plays the
kubelet): cordon, `Preempted` Event, eviction with each pod's grace, Node deleted after the
longest; PDBs respected until the deadline; the cluster refills toward its target."""

from __future__ import annotations

import shutil
import subprocess
import time
from typing import Any

import pytest
from apiserver import shared
from k8s_world import K8sWorld
from kubelet import FakeKubelet

from lowcostgpu.adapters.kubernetes import Kube
from lowcostgpu.adapters.kubernetes.objects import DRAIN_DEADLINE, GPU_RESOURCE
from lowcostgpu.core.nodes import CLUSTER_LABEL, COMPUTE_CLASS_LABEL, PREEMPTIBLE_TAINT
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
    """GPUs of the cluster's preemptible Nodes that are Ready and not cordoned, as Kubernetes
    sees them."""
    selector = f"{CLUSTER_LABEL}={cluster_id},{COMPUTE_CLASS_LABEL}=preemptible"
    nodes = world.kube.core.list_node(label_selector=selector).items
    return sum(
        int(n.status.allocatable[GPU_RESOURCE])
        for n in nodes
        if not n.spec.unschedulable
        and any(c.type == "Ready" and c.status == "True" for c in n.status.conditions or [])
    )


def ours(node: Any) -> list[tuple[str, str, str]]:
    """Our taints (the API server adds node.kubernetes.io/not-ready itself, for the node
    lifecycle controller to lift)."""
    taints = node.spec.taints or []
    return [(t.key, t.value, t.effect) for t in taints if t.key.startswith("lowcostgpu.io/")]


@pytest.fixture
def world(kube: Kube, namespace: str) -> K8sWorld:
    return K8sWorld(kube, namespace)


def test_nodes_join_labelled_tainted_with_gpu_capacity(world: K8sWorld) -> None:
    c = world.cluster(desired=4)
    world.plane.tick()
    (standard,) = world.node_names(c, "standard")
    (preemptible,) = world.node_names(c, "preemptible")
    s, p = world.node(standard), world.node(preemptible)
    assert s is not None and p is not None
    assert s.metadata.labels[COMPUTE_CLASS_LABEL] == "standard" and ours(s) == []
    assert p.metadata.labels[COMPUTE_CLASS_LABEL] == "preemptible"
    assert p.metadata.labels[CLUSTER_LABEL] == c
    assert ours(p) == [(PREEMPTIBLE_TAINT.key, PREEMPTIBLE_TAINT.value, PREEMPTIBLE_TAINT.effect)]
    assert p.status.capacity[GPU_RESOURCE] == "4"
    view = world.plane.clusters.get_cluster(c)
    assert view.allocated_preemptible_gpus == live_preemptible_gpus(world, c) == 4
    world.plane.tick()  # carried out again (a replayed effect): nothing changes
    assert len(world.node_names(c)) == 2 and world.node(preemptible) is not None


def test_the_provider_keeps_its_nodes_heartbeat_fresh(world: K8sWorld) -> None:
    c = world.cluster(desired=4)
    world.plane.tick()
    (name,) = world.node_names(c, "preemptible")

    def heartbeat() -> Any:
        node = world.node(name)
        (ready,) = [x for x in node.status.conditions if x.type == "Ready"]
        assert ready.status == "True"
        return ready.last_heartbeat_time

    first = heartbeat()
    world.nodes.heartbeat_s = 0  # renew at every report
    wait_until(lambda: world.plane.tick() or heartbeat() > first, what="a renewed heartbeat")


def test_reclaim_cordons_fires_preempted_evicts_with_grace_then_deletes_the_node(
    world: K8sWorld, kubelet: FakeKubelet
) -> None:
    c = world.cluster(desired=4, grace_s=6)
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
    od = world.on_demand(4)  # needs the preemptible node's GPUs: reclaim
    world.plane.tick()
    n = world.node(node)
    assert n is not None and n.spec.unschedulable is True  # 1. cordoned
    assert DRAIN_DEADLINE in n.metadata.annotations
    events = world.kube.events.list_namespaced_event("kube-system").items
    preempted = [e for e in events if e.reason == "Preempted" and e.regarding.name == node]
    assert len(preempted) == 1 and preempted[0].type == "Warning"  # 2. the Event
    # ... which never names the on-demand work it was reclaimed for (it may be another account's)
    assert od not in preempted[0].note and "reclaimed for on-demand work" in preempted[0].note
    pods = world.pods()  # 3. evicted with their own grace
    assert {k: p.metadata.deletion_grace_period_seconds for k, p in pods.items()} == {
        "train-0": 3,
        "train-1": 1,
    }
    assert world.plane.clusters.get_cluster(c).allocated_preemptible_gpus == 0

    def node_gone() -> bool:
        if world.node(node) is not None:
            return False
        assert {"train-0", "train-1"} <= {n for n, w, _ in kubelet.log if w == "deleted"}
        return True

    tick_until(world, node_gone, what="the node deleted")  # 4. removed after the longest grace
    timeline = [
        (n, w, round(at - reclaimed_at, 2)) for n, w, at in kubelet.log if at > reclaimed_at
    ]
    print(
        "drain timeline (s after the reclaim):", timeline, round(time.monotonic() - reclaimed_at, 2)
    )
    ended = {name: at for name, what, at in kubelet.log if what == "exited 137"}
    sigterm = {name: at for name, what, at in kubelet.log if what == "SIGTERM"}
    for pod, grace_s in {"train-1": 1, "train-0": 3}.items():  # each got its own whole grace
        assert ended[pod] - sigterm[pod] >= grace_s and sigterm[pod] >= reclaimed_at
    assert not {"train-0", "train-1"} & set(world.pods())
    tick_until(
        world,
        lambda: world.store.instance(od).state.status is InstanceStatus.RUNNING,
        what="the on-demand instance running",
    )
    if shutil.which("kubectl"):  # as an operator sees it
        argv = ["kubectl", "--kubeconfig", str(shared().kubeconfig), "get", "events"]
        out = subprocess.run([*argv, "-n", "kube-system"], capture_output=True, text=True)
        assert "Preempted" in out.stdout and f"node/{node}" in out.stdout, out.stderr


def test_a_pdb_holds_the_eviction_until_the_deadline_then_the_node_goes_anyway(
    world: K8sWorld, kubelet: FakeKubelet
) -> None:
    c = world.cluster(desired=4, grace_s=4)
    world.plane.tick()
    (node,) = world.node_names(c, "preemptible")
    world.user_pod(node, "infer-0", grace_s=1, app="infer")
    wait_until(lambda: any(n == "infer-0" and w == "running" for n, w, _ in kubelet.log))
    pdb = {
        "apiVersion": "policy/v1beta1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "infer"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "infer"}}},
    }
    version = world.kube.eviction_version()
    world.kube.raw("POST", f"/apis/{version}/namespaces/{world.namespace}/poddisruptionbudgets",
                   pdb, what="a PDB")  # fmt: skip
    world.on_demand(4)
    world.plane.tick()
    deadline = int(world.node(node).metadata.annotations[DRAIN_DEADLINE])
    while time.time() < deadline - 1:  # held: the eviction is refused (429), retried each tick
        world.plane.tick()
        assert world.pods()["infer-0"].metadata.deletion_timestamp is None
        time.sleep(0.2)
    tick_until(world, lambda: world.node(node) is None, what="the node deleted at the deadline")
    assert time.time() >= deadline
    wait_until(lambda: "infer-0" not in world.pods(), what="the pod gone")


def test_refill_creates_nodes_toward_the_target_and_allocated_counts_live_ones(
    world: K8sWorld, kubelet: FakeKubelet
) -> None:
    c = world.cluster(desired=4, grace_s=2)
    world.plane.tick()
    (old,) = world.node_names(c, "preemptible")
    od = world.on_demand(4)
    world.plane.tick()
    tick_until(world, lambda: world.node(old) is None, what="the reclaimed node deleted")
    assert world.plane.clusters.get_cluster(c).allocated_preemptible_gpus == 0
    assert live_preemptible_gpus(world, c) == 0
    tick_until(world, lambda: world.store.instance(od).state.status is InstanceStatus.RUNNING)
    world.plane.stop(od)  # capacity comes back: the target is met again by a new Node
    tick_until(world, lambda: world.plane.clusters.get_cluster(c).allocated_preemptible_gpus == 4,
               what="the refill")  # fmt: skip
    world.plane.tick()
    (new,) = world.node_names(c, "preemptible")
    assert new != old and live_preemptible_gpus(world, c) == 4


def test_node_effects_replayed_after_the_drain_change_nothing(
    world: K8sWorld, kubelet: FakeKubelet
) -> None:
    """The outbox is at-least-once: a crash may carry any effect out again, late."""
    done: list[Any] = []
    carry_out = world.nodes.carry_out
    world.nodes.carry_out = lambda entry, runtime: (done.append(entry), carry_out(entry, runtime))
    c = world.cluster(desired=4, grace_s=2)
    world.plane.tick()
    (node,) = world.node_names(c, "preemptible")
    world.on_demand(4)
    world.plane.tick()
    tick_until(world, lambda: world.node(node) is None, what="the node deleted")
    assert {e.kind for e in done} == {"AddNode", "CordonNode", "RemoveNode"}
    for entry in done:  # every node effect once more, after the fact
        carry_out(entry, world.runtime)
    assert world.node(node) is None
    events = world.kube.events.list_namespaced_event("kube-system").items
    assert [e.regarding.name for e in events if e.reason == "Preempted"].count(node) == 1
    assert len(world.node_names(c)) == 2  # the standard node and the queued replacement

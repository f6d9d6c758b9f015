"""Cluster nodes with the real Kubernetes components: kube-scheduler places customers' pods,
kube-controller-manager answers PDBs and watches Node health, and every host is a real kubelet
(a kubemark hollow node, `components.py`) that registered its own Node and renews its own Lease.

The fake kubelet (test_k8s_drain.py) stays where exit codes and grace timing matter: the hollow
node's runtime always exits 0 and ignores a pod's grace.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
from apiserver import ApiServer
from components import Components, HollowNode, require_components
from k8s_world import K8sWorld, create_pdb
from test_k8s_drain import tick_until

from lowcostgpu.adapters.kubernetes import Kube
from lowcostgpu.adapters.kubernetes.objects import GPU_RESOURCE
from lowcostgpu.domain.status import InstanceStatus
from waiting import wait_until

# Longer than kube-controller-manager's --node-monitor-grace-period (40 s by default), after
# which a Node whose kubelet has gone quiet turns Unknown and gets the unreachable taint.
SERVE_DOWN_S = 60.0
UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"


@pytest.fixture
def components() -> Components:
    return require_components()


@pytest.fixture
def k8s(components: Components) -> ApiServer:
    """The components' own API server, under the shared `kube` and `namespace` fixtures."""
    return components.server


@pytest.fixture
def world(kube: Kube, namespace: str) -> K8sWorld:
    """Two 8-GPU hosts that no test registers: the hollow kubelets do (`hosts`)."""
    return K8sWorld(kube, namespace, hosts=2, register=False)


@pytest.fixture
def hosts(components: Components, world: K8sWorld) -> Iterator[list[HollowNode]]:
    with components.hollow_nodes(world.hosts, gpus=8) as nodes:
        yield nodes


def customer_pod(world: K8sWorld, name: str, *, preemptible: bool, **labels: str) -> None:
    """A customer's pod as they would write it: cpu, memory and a GPU, no node named; on the
    preemptible nodes it tolerates the taint and selects them by compute class."""
    taint, names = world.names.taint, world.names
    spec: dict[str, Any] = {
        "terminationGracePeriodSeconds": 5,
        "containers": [
            {
                "name": "train",
                "image": "trainer:1",
                "resources": {
                    "requests": {"cpu": "250m", "memory": "512Mi"},
                    "limits": {"cpu": "250m", "memory": "512Mi", GPU_RESOURCE: "1"},
                },
            }
        ],
    }
    if preemptible:
        spec["tolerations"] = [{"key": taint.key, "operator": "Exists", "effect": taint.effect}]
        spec["nodeSelector"] = {names.compute_class_label: "preemptible"}
    body = {"metadata": {"name": name, "labels": labels or {"app": "train"}}, "spec": spec}
    world.kube.core.create_namespaced_pod(world.namespace, body)


def pod(world: K8sWorld, name: str) -> Any | None:
    found = world.kube.core.list_namespaced_pod(
        world.namespace, field_selector=f"metadata.name={name}"
    ).items
    return found[0] if found else None


def running_on(world: K8sWorld, name: str) -> str | None:
    """The Node the pod runs on, once its kubelet reports it Running (None until then)."""
    found = pod(world, name)
    if found is None or found.status.phase != "Running":
        return None
    return str(found.spec.node_name)


def disruptions_allowed(world: K8sWorld, name: str) -> int | None:
    """The PDB's status as kube-controller-manager's disruption controller computed it."""
    version = world.kube.eviction_version()
    path = f"/apis/{version}/namespaces/{world.namespace}/poddisruptionbudgets/{name}"
    found = world.kube.raw("GET", path, None, what="a PDB")
    status = found.get("status") or {}
    if status.get("observedGeneration") != found["metadata"].get("generation"):
        return None
    allowed = status.get("disruptionsAllowed")
    return None if allowed is None else int(allowed)


def running_behind_a_pdb(world: K8sWorld, name: str, grace_s: int, allowed: int) -> tuple[str, str]:
    """A cluster with one preemptible host, a customer's pod `name` running there under a PDB
    that lets `allowed` of its pods go (`minAvailable` 1 - allowed), as the controller-manager
    has computed it; the cluster and the host."""
    c = world.cluster(desired=8, standard=1, grace_s=grace_s)
    world.plane.tick()
    (host,) = world.node_names(c, "preemptible")
    customer_pod(world, name, preemptible=True, app=name)
    create_pdb(world.kube, world.namespace, name, name, minAvailable=1 - allowed)
    wait_until(lambda: running_on(world, name), what=f"{name} running")
    wait_until(lambda: disruptions_allowed(world, name) == allowed, what="the PDB's status")
    return c, host


def ready_and_reachable(world: K8sWorld, host: str) -> bool:
    node = world.node(host)
    assert node is not None
    ready = any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])
    return ready and not any(t.key == UNREACHABLE_TAINT for t in node.spec.taints or [])


def test_scheduler_puts_a_tolerating_gpu_pod_on_the_preemptible_host_and_serve_down_60s_harms_none(
    world: K8sWorld, hosts: list[HollowNode]
) -> None:
    c = world.cluster(desired=8, standard=1)
    world.plane.tick()
    (standard,) = world.node_names(c, "standard")
    (preemptible,) = world.node_names(c, "preemptible")
    created = time.monotonic()
    customer_pod(world, "train-0", preemptible=True)
    customer_pod(world, "web-0", preemptible=False, app="web")  # no toleration
    assert wait_until(lambda: running_on(world, "train-0"), what="train-0 running") == preemptible
    print(f"train-0 scheduled and Running {time.monotonic() - created:.2f} s after its create")
    assert wait_until(lambda: running_on(world, "web-0"), what="web-0 running") == standard

    # serve is down: nothing of ours runs for longer than the node monitor's grace; the kubelets
    # renew their own Leases, so the Nodes stay Ready and the pods keep running
    time.sleep(SERVE_DOWN_S)
    for host in (standard, preemptible):
        assert ready_and_reachable(world, host), world.node(host)
    assert running_on(world, "train-0") == preemptible and running_on(world, "web-0") == standard
    world.plane.tick()
    view = world.plane.clusters.get_cluster(c)
    assert view.allocated_preemptible_gpus == 8 and world.cluster_of(preemptible) == c


def test_reclaim_evicts_via_a_permissive_pdb_then_the_host_runs_on_demand_then_refills_a_cluster(
    world: K8sWorld, hosts: list[HollowNode]
) -> None:
    a, host = running_behind_a_pdb(world, "train-0", grace_s=40, allowed=1)

    reclaimed = time.monotonic()
    od = world.on_demand(8)  # only the preemptible node's host is free: reclaim it
    world.plane.tick()
    n = world.node(host)
    assert n.spec.unschedulable and world.names.drain_finalizer in n.metadata.finalizers
    deadline = int(n.metadata.annotations[world.names.drain_deadline])
    # the eviction passes at once (the PDB allows it): the pod goes long before the deadline
    wait_until(lambda: pod(world, "train-0") is None, what="train-0 evicted")
    gone = time.monotonic() - reclaimed
    tick_until(world, lambda: world.cluster_of(host) is None, what="the host back in the pool")
    back = time.monotonic() - reclaimed
    assert time.time() < deadline  # by the kubelet's word that the pod is gone, not the deadline
    tick_until(world, lambda: world.store.instance(od).state.status is InstanceStatus.RUNNING,
               what="the on-demand instance running on the hollow kubelet")  # fmt: skip
    running = time.monotonic() - reclaimed
    print(f"reclaim: pod gone {gone:.2f} s, host in the pool {back:.2f} s, on-demand Running "
          f"{running:.2f} s")  # fmt: skip
    (instance_pod,) = [p for p in world.pods().values() if p.spec.node_name == host]
    assert instance_pod.status.phase == "Running"  # admitted and run by the real kubelet

    world.plane.clusters.delete_cluster(a)  # A's standard host goes back to the pool too
    world.plane.stop(od)
    tick_until(
        world,
        lambda: (
            world.store.instance(od).state.status is InstanceStatus.STOPPED
            and all(world.cluster_of(h) is None for h in world.hosts)
        ),
        what="both hosts free in the pool",
    )  # a standard node is on-demand capacity: it does not wait in a queue
    b = world.cluster(desired=8, standard=1)
    tick_until(world, lambda: world.cluster_of(host) == b, what="the host refilling cluster B")
    tick_until(world, lambda: world.plane.clusters.get_cluster(b).allocated_preemptible_gpus == 8)
    (b_preemptible,) = world.node_names(b, "preemptible")
    customer_pod(world, "train-b", preemptible=True)
    assert wait_until(lambda: running_on(world, "train-b"), what="train-b running") == b_preemptible


def test_a_blocking_pdb_holds_the_eviction_until_the_deadline_then_the_pod_is_deleted(
    world: K8sWorld, hosts: list[HollowNode]
) -> None:
    _, host = running_behind_a_pdb(world, "infer-0", grace_s=6, allowed=0)

    world.on_demand(8)
    world.plane.tick()
    deadline = int(world.node(host).metadata.annotations[world.names.drain_deadline])

    def deleted_at() -> datetime | None:
        world.plane.tick()  # each tick retries the eviction, refused (429) until the deadline
        found = pod(world, "infer-0")
        if found is None:
            return datetime.fromtimestamp(time.time())  # gone between two looks
        return found.metadata.deletion_timestamp  # type: ignore[no-any-return]

    at = wait_until(deleted_at, what="infer-0 deleted")
    found = pod(world, "infer-0")
    grace_s = 0 if found is None else found.metadata.deletion_grace_period_seconds or 0
    # the API server stamps deletion at the moment of the delete plus the grace; second resolution
    assert at.timestamp() - grace_s >= deadline - 1
    tick_until(world, lambda: world.cluster_of(host) is None, what="the host back at the deadline")

"""An interruptible instance through the control plane on Kubernetes: its run is a Pod, its
interruption an eviction, and its requeued run a new Pod on the same claim."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from apiserver import ApiServer, free_port
from k8s_world import K8sWorld
from kubernetes.client.exceptions import ApiException

from lowcostgpu.adapters.kubernetes import Kube
from lowcostgpu.adapters.kubernetes.objects import pod_name
from lowcostgpu.app.launch import LaunchRequest
from lowcostgpu.domain.status import InstanceStatus
from waiting import wait_until


def test_an_interruption_is_an_eviction_and_the_requeue_a_new_pod_on_the_same_claim(
    kube: Kube, namespace: str
) -> None:
    from kubelet import FakeKubelet

    kubelet = FakeKubelet(kube.api, exit_on_sigterm=True).start()  # it checkpoints and exits
    try:
        world = K8sWorld(kube, namespace)
        request = LaunchRequest(
            "acme", "a100-sxm4", "interruptible", 4, command=("train",), volume="ckpts:1GB",
            grace_period_s=5,
        )  # fmt: skip
        instance = world.plane.launch(request).state.id

        def status(instance_id: str = instance) -> InstanceStatus:
            world.plane.tick()
            return world.store.instance(instance_id).state.status

        def pod_of_run() -> Any:
            allocation = world.store.instance(instance).state.allocation_id
            assert allocation is not None
            return kube.core.read_namespaced_pod(pod_name(allocation), namespace)

        wait_until(lambda: status() is InstanceStatus.RUNNING, what="the first run")
        first = pod_of_run()
        od = world.on_demand(8)  # needs the whole host: the interruptible run is reclaimed
        world.plane.tick()
        evicted = kube.core.read_namespaced_pod(first.metadata.name, namespace)
        assert evicted.metadata.deletion_grace_period_seconds == 5  # the eviction, with grace
        wait_until(lambda: status() is InstanceStatus.QUEUED, what="the run interrupted, requeued")
        wait_until(lambda: status(od) is InstanceStatus.RUNNING, what="the on-demand run")
        world.plane.stop(od)
        wait_until(lambda: status() is InstanceStatus.RUNNING, 30, "the requeued run")
        second = pod_of_run()
        assert second.metadata.name != first.metadata.name
        claims = [
            v.persistent_volume_claim.claim_name for v in (first, second) for v in v.spec.volumes
        ]
        assert claims[0] == claims[1]
        assert world.store.instance(instance).state.restart_count == 1
    finally:
        kubelet.stop()


def test_a_start_while_the_api_server_is_unreachable_is_retried_not_failed(
    k8s: ApiServer, kube: Kube, namespace: str, tmp_path: Path
) -> None:
    world = K8sWorld(kube, namespace)
    request = LaunchRequest("acme", "a100-sxm4", "interruptible", 4, command=("train",))
    world.runtime.kube = Kube.from_kubeconfig(  # the server cannot be reached for the start
        k8s.write_kubeconfig(tmp_path / "kc", url=f"https://127.0.0.1:{free_port()}"), timeout_s=2
    )
    instance = world.plane.launch(request).state.id  # its start is tried right after the commit
    world.plane.run_outbox()  # and again by the loop
    assert [e.kind for e in world.store.pending_outbox()] == ["StartWorkload"]  # kept: a retry
    assert world.store.instance(instance).state.status is InstanceStatus.STARTING
    world.runtime.kube = kube  # back: the retry, due after its backoff, creates the pod
    allocation = world.store.instance(instance).state.allocation_id
    assert allocation is not None

    def placed() -> bool:
        world.plane.tick()
        try:
            pod = kube.core.read_namespaced_pod(pod_name(allocation), namespace)
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return bool(pod.spec.node_name == world.host)

    wait_until(placed, what="the retried start's pod on the host")

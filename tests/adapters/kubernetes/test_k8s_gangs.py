"""A multi-node instance through the control plane on Kubernetes (a real API server, the test
playing the kubelet): one pod per member, each on its own Node with its rank, a headless Service
naming rank 0 for `MASTER_ADDR`, the whole gang evicted at a reclaim, and the Service gone with
its run."""

from __future__ import annotations

import base64
from typing import Any

from k8s_world import K8sWorld

from lowcostgpu.adapters.kubernetes import Kube
from lowcostgpu.adapters.kubernetes.objects import (
    GANG_LABEL,
    RANK_LABEL,
    gang_service_name,
    pod_name,
)
from lowcostgpu.app.launch import LaunchRequest
from lowcostgpu.domain.status import InstanceStatus
from waiting import wait_until


def _env(kube: Kube, namespace: str, pod: Any) -> dict[str, str]:
    secret = kube.core.read_namespaced_secret(
        pod.spec.containers[0].env_from[0].secret_ref.name, namespace
    )
    return {k: base64.b64decode(v).decode() for k, v in secret.data.items()}


def _services(kube: Kube, namespace: str) -> list[Any]:
    return list(kube.core.list_namespaced_service(namespace).items)


def test_a_gang_is_one_pod_per_node_with_its_rank_and_a_service_naming_rank_zero(
    kube: Kube, namespace: str
) -> None:
    from kubelet import FakeKubelet

    kubelet = FakeKubelet(kube.api, exit_on_sigterm=True).start()
    try:
        world = K8sWorld(kube, namespace, hosts=2)
        request = LaunchRequest(
            "acme", "a100-sxm4", "interruptible", 8, command=("torchrun", "train.py"),
            grace_period_s=5, nodes=2,
        )  # fmt: skip
        gang = world.plane.launch(request).state.id

        def status(instance_id: str = gang) -> InstanceStatus:
            world.plane.tick()
            return world.store.instance(instance_id).state.status

        wait_until(lambda: status() is InstanceStatus.RUNNING, what="the gang running")
        state = world.store.instance(gang).state
        members = state.allocation_ids()
        pods = [kube.core.read_namespaced_pod(pod_name(a), namespace) for a in members]
        assert sorted(p.spec.node_name for p in pods) == sorted(world.hosts)
        assert [p.metadata.labels[RANK_LABEL] for p in pods] == ["0", "1"]
        assert len({p.metadata.labels[GANG_LABEL] for p in pods}) == 1
        envs = [_env(kube, namespace, p) for p in pods]
        address = f"{gang_service_name(members[0])}.{namespace}.svc"
        assert [e["NODE_RANK"] for e in envs] == ["0", "1"]
        assert {e["MASTER_ADDR"] for e in envs} == {address}
        assert {e["WORLD_SIZE"] for e in envs} == {"2"}
        (service,) = _services(kube, namespace)
        assert service.metadata.name == gang_service_name(members[0])
        assert service.spec.cluster_ip == "None"
        assert service.spec.selector[RANK_LABEL] == "0"
        assert service.spec.ports[0].port == int(envs[0]["MASTER_PORT"])

        od = world.on_demand(8)  # one whole host: the gang is reclaimed as one
        world.plane.tick()
        evicted = [kube.core.read_namespaced_pod(p.metadata.name, namespace) for p in pods]
        assert all(p.metadata.deletion_timestamp is not None for p in evicted)  # both members
        wait_until(lambda: status() is InstanceStatus.QUEUED, what="the gang requeued")
        wait_until(lambda: not _services(kube, namespace), what="the run's Service deleted")
        wait_until(lambda: status(od) is InstanceStatus.RUNNING, what="the on-demand run")
    finally:
        kubelet.stop()

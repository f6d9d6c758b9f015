"""Instance pods and volume claims on a real API server: what a pod carries, the requeue on the
same claim, claims that outlive pods."""

from __future__ import annotations

import base64

import pytest
from k8s_world import K8sWorld

from lowcostgpu.adapters.kubernetes import Kube, KubernetesVolumes
from lowcostgpu.adapters.kubernetes.objects import (
    EXIT_FINALIZER,
    GPU_RESOURCE,
    VOLUME_MOUNT_PATH,
    pod_name,
)
from lowcostgpu.domain.errors import NotFound
from lowcostgpu.ports.runtime import WorkloadStart


def start(world: K8sWorld, allocation_id: str, restart: int, volumes: KubernetesVolumes) -> None:
    mount = volumes.ensure("acct-1", "ckpts", 2)
    world.runtime.start(
        WorkloadStart(
            instance_id="i-7",
            allocation_id=allocation_id,
            host_id=world.host,
            gpu_indices=(2, 3),
            restart_count=restart,
            argv=("python", "train.py"),
            env={"LOWCOSTGPU_TOKEN": "secret-token", "LOWCOSTGPU_INSTANCE_ID": "i-7"},
            volume=mount,
            grace_period_s=45,
        )
    )


def test_a_run_is_a_pod_on_its_host_with_gpus_claim_and_secret_env(
    kube: Kube, namespace: str
) -> None:
    world = K8sWorld(kube, namespace)
    volumes = KubernetesVolumes(kube, namespace=namespace)
    start(world, "i-7@100", 0, volumes)
    pod = kube.core.read_namespaced_pod(pod_name("i-7@100"), namespace)
    (container,) = pod.spec.containers
    assert pod.spec.node_name == world.host and pod.spec.termination_grace_period_seconds == 45
    assert container.resources.limits[GPU_RESOURCE] == "2"
    assert container.command == ["python", "train.py"] and EXIT_FINALIZER in pod.metadata.finalizers
    assert container.env is None  # the token is not in the pod spec, but in a Secret
    secret = kube.core.read_namespaced_secret(container.env_from[0].secret_ref.name, namespace)
    env = {k: base64.b64decode(v).decode() for k, v in secret.data.items()}
    assert (
        env["LOWCOSTGPU_TOKEN"] == "secret-token" and env["LOWCOSTGPU_VOLUME"] == VOLUME_MOUNT_PATH
    )
    (volume,) = pod.spec.volumes
    claim = volume.persistent_volume_claim.claim_name
    assert container.volume_mounts[0].mount_path == VOLUME_MOUNT_PATH

    start(world, "i-7@200", 1, volumes)  # the requeued run: a new pod on the same claim
    again = kube.core.read_namespaced_pod(pod_name("i-7@200"), namespace)
    assert again.spec.volumes[0].persistent_volume_claim.claim_name == claim
    claims = kube.core.list_namespaced_persistent_volume_claim(namespace).items
    assert [c.metadata.name for c in claims] == [claim]


@pytest.mark.parametrize("size_gb", [1, 50])
def test_a_claim_is_made_once_and_outlives_its_pods(
    kube: Kube, namespace: str, size_gb: int
) -> None:
    volumes = KubernetesVolumes(kube, namespace=namespace)
    first = volumes.ensure("acct-1", "ckpts", size_gb)
    assert volumes.ensure("acct-1", "ckpts", size_gb + 7) == first  # the existing one
    assert first.size_gb == size_gb
    assert volumes.usage_bytes("acct-1", "ckpts") == size_gb * 2**30  # provisioned: upper bound
    volumes.delete("acct-1", "ckpts")
    volumes.delete("acct-1", "ckpts")  # twice is fine
    with pytest.raises(NotFound, match="ckpts"):
        volumes.usage_bytes("acct-1", "ckpts")

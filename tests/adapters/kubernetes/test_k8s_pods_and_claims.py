"""Instance pods and volume claims on a real API server: what a pod carries, the requeue on the
same claim, claims that outlive pods."""

from __future__ import annotations

import base64

import kubernetes.client
import pytest
from k8s_world import K8sWorld

from lowcostgpu.adapters.kubernetes import Kube, KubernetesVolumes
from lowcostgpu.adapters.kubernetes.objects import (
    EXIT_FINALIZER,
    GPU_RESOURCE,
    VOLUME_MOUNT_PATH,
    claim_name,
    pod_name,
)
from lowcostgpu.domain.errors import InvalidRequest, NotFound
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


def test_a_resize_asks_the_claim_for_more_storage_and_never_less(
    kube: Kube, namespace: str
) -> None:
    expandable = f"expandable-{namespace}"
    body = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": expandable},
        "provisioner": "example.com/none",
        "allowVolumeExpansion": True,
    }
    kubernetes.client.StorageV1Api(kube.core.api_client).create_storage_class(body)
    volumes = KubernetesVolumes(kube, namespace=namespace, storage_class=expandable)
    volumes.ensure("acct-1", "ckpts", 1)
    volumes.resize("acct-1", "ckpts", 5)
    volumes.resize("acct-1", "ckpts", 5)  # carried out twice by the outbox: no change
    volumes.resize("acct-1", "ckpts", 2)  # smaller: the plane refuses it; here nothing happens
    # No provisioner here binds it: Kubernetes expands bound claims only, so the size is kept
    # on the claim (expanded once bound, by the next start's `ensure`), and `ensure` says it.
    claim = kube.core.read_namespaced_persistent_volume_claim(
        claim_name("acct-1", "ckpts"), namespace
    )
    assert claim.metadata.annotations["lowcostgpu.io/size-gb"] == "5"
    assert volumes.ensure("acct-1", "ckpts", 1).size_gb == 5
    volumes.resize("acct-1", "nothing-yet", 3)  # no claim: made at its size by `ensure`
    # Once bound (a provisioner would say so), the next start's `ensure` asks for the size.
    bound = {"status": {"phase": "Bound"}}
    kube.core.patch_namespaced_persistent_volume_claim_status(claim.metadata.name, namespace, bound)
    volumes.ensure("acct-1", "ckpts", 1)
    claim = kube.core.read_namespaced_persistent_volume_claim(claim.metadata.name, namespace)
    assert claim.spec.resources.requests["storage"] == "5Gi"
    volumes.delete("acct-1", "ckpts")
    kubernetes.client.StorageV1Api(kube.core.api_client).delete_storage_class(expandable)


@pytest.mark.parametrize("mode", ["ReadWriteOnce", "ReadWriteMany"])
def test_claims_are_made_with_the_access_mode_the_operator_chose(
    kube: Kube, namespace: str, mode: str
) -> None:
    """ReadWriteMany: the members of a multi-node instance mount its volume on several nodes."""
    volumes = KubernetesVolumes(kube, namespace=namespace, access_mode=mode)
    volumes.ensure("acct-1", f"ckpts-{mode.lower()}", 1)
    made = kube.core.read_namespaced_persistent_volume_claim(
        claim_name("acct-1", f"ckpts-{mode.lower()}"), namespace
    )
    assert made.spec.access_modes == [mode]


def test_an_access_mode_lowcostgpu_does_not_make_claims_with_is_refused(kube: Kube) -> None:
    with pytest.raises(InvalidRequest, match="ReadWriteMany"):
        KubernetesVolumes(kube, access_mode="ReadOnlyMany")

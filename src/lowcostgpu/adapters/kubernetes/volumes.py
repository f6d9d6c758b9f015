"""Volumes as PersistentVolumeClaims: they outlive pods, so a requeued run mounts the same data.

A deleted claim stays (Terminating) while a pod uses it (the pvc-protection finalizer); such a
claim counts as gone, and `ensure` of its name is a Conflict until Kubernetes has removed it.

`usage_bytes`: the Kubernetes API does not know how much of a volume is used (only the kubelet's
stats endpoint does, per mounted pod), so it returns the claim's provisioned capacity
(`status.capacity.storage`, else the requested size): an upper bound, which is also what the
storage costs.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from kubernetes.utils import parse_quantity as _parse_quantity

from lowcostgpu.adapters.kubernetes.client import Kube, already_exists
from lowcostgpu.adapters.kubernetes.objects import (
    VOLUME_MOUNT_PATH,
    check_access_mode,
    claim,
    claim_name,
)
from lowcostgpu.domain.errors import Conflict, InvalidRequest, LowcostgpuError, NotFound
from lowcostgpu.ports.runtime import VolumeMount


def parse_quantity(quantity: str) -> int:
    """A Kubernetes quantity ("10Gi", "1G") in bytes."""
    return int(_parse_quantity(quantity))  # type: ignore[no-untyped-call]


log = logging.getLogger(__name__)
SIZE_ANNOTATION = "lowcostgpu.io/size-gb"  # the size a resize asked for, kept on the claim


def _asked_gb(pvc: Any) -> int:
    """The size the claim should have: a resize's (annotation), else what it requests."""
    annotations = pvc.metadata.annotations or {}
    requested = parse_quantity(pvc.spec.resources.requests["storage"]) // 2**30
    try:
        return max(requested, int(annotations.get(SIZE_ANNOTATION, 0)))
    except ValueError:
        return requested


class KubernetesVolumes:
    """`ports.runtime.Volumes` over PersistentVolumeClaims of one namespace."""

    def __init__(
        self,
        kube: Kube,
        *,
        namespace: str = "default",
        storage_class: str | None = None,
        access_mode: str = "ReadWriteOnce",
    ):
        """`access_mode`: the claims' (`objects.ACCESS_MODES`); a multi-node instance's members
        mount its claim on several nodes at once, which needs ReadWriteMany."""
        self.kube = kube
        self.namespace = namespace
        self.storage_class = storage_class
        self.access_mode = check_access_mode(access_mode)

    def check_fits(
        self, account_id: str, name: str, size_gb: int | None, *, region: str | None = None
    ) -> None:
        """Accepted: the cluster's provisioner decides, and a claim it cannot bind stays pending.
        One cluster is one region: `region` is ignored (`regions.RegionalVolumes` routes)."""

    def holds(self, account_id: str, name: str) -> bool:
        """Whether the volume's claim exists here (one being deleted does not): one read."""
        try:
            self._claim(account_id, name)
        except NotFound:
            return False
        return True

    def ensure(
        self, account_id: str, name: str, size_gb: int, *, region: str | None = None
    ) -> VolumeMount:
        if size_gb < 1:
            raise InvalidRequest(f"volume {name}: size must be ≥ 1 GB, got {size_gb}")
        body = claim(account_id, name, size_gb, self.storage_class, self.access_mode)
        claim_id = body["metadata"]["name"]
        try:
            self.kube.call(
                self.kube.core.create_namespaced_persistent_volume_claim,
                self.namespace,
                body,
                what=f"creating the claim {claim_id} of volume {name}",
            )
        except Conflict as exc:
            if not already_exists(exc):
                raise
            size_gb = self._requested_gb(claim_id, name)
        return VolumeMount(name=claim_id, size_gb=size_gb, path=VOLUME_MOUNT_PATH)

    def usage_bytes(self, account_id: str, name: str) -> int:
        pvc = self._claim(account_id, name)
        capacity = (pvc.status.capacity if pvc.status is not None else None) or {}
        quantity = capacity.get("storage") or pvc.spec.resources.requests["storage"]
        return parse_quantity(quantity)

    def delete(self, account_id: str, name: str) -> None:
        claim_id = claim_name(account_id, name)
        with contextlib.suppress(NotFound):
            self.kube.call(
                self.kube.core.delete_namespaced_persistent_volume_claim,
                claim_id,
                self.namespace,
                what=f"deleting the claim {claim_id} of volume {name}",
            )

    def resize(self, account_id: str, name: str, size_gb: int) -> None:
        """An expansion request: the claim's requested storage is patched up to `size_gb` (the
        storage class must allow volume expansion; the resize then happens in the cluster, and
        a file system is grown when a pod next mounts it). Kubernetes expands only a bound
        claim: the size is also kept on the claim (`SIZE_ANNOTATION`), and a claim not bound
        yet is expanded by `ensure` once it is. Idempotent; never shrinks; a claim that does not
        exist (not made yet, or deleted) is left alone."""
        try:
            pvc = self._claim(account_id, name)
        except NotFound:
            return
        if _asked_gb(pvc) < size_gb:
            patch = {"metadata": {"annotations": {SIZE_ANNOTATION: str(size_gb)}}}
            self._patch(pvc.metadata.name, patch, f"recording the size {size_gb} GB of {name}")
            pvc.metadata.annotations = {
                **(pvc.metadata.annotations or {}),
                SIZE_ANNOTATION: str(size_gb),
            }
        self._expand(pvc, name)

    def _expand(self, pvc: Any, name: str) -> None:
        """Ask a bound claim for the size recorded on it, if it asks for less."""
        wanted_gb = _asked_gb(pvc)
        bound = pvc.status is not None and pvc.status.phase == "Bound"
        if not bound or parse_quantity(pvc.spec.resources.requests["storage"]) >= wanted_gb * 2**30:
            return
        patch = {"spec": {"resources": {"requests": {"storage": f"{wanted_gb}Gi"}}}}
        self._patch(pvc.metadata.name, patch, f"expanding volume {name} to {wanted_gb} GB")

    def _patch(self, claim_id: str, patch: dict[str, Any], what: str) -> None:
        self.kube.call(
            self.kube.core.patch_namespaced_persistent_volume_claim,
            claim_id,
            self.namespace,
            patch,
            what=f"{what} (claim {claim_id})",
        )

    def _claim(self, account_id: str, name: str) -> Any:
        """The claim; one being deleted (its pvc-protection finalizer waits for its pods) is
        gone as far as volumes go."""
        claim_id = claim_name(account_id, name)
        try:
            pvc: Any = self._read(claim_id)
        except NotFound:
            pvc = None
        if pvc is None or pvc.metadata.deletion_timestamp is not None:
            raise NotFound(f"volume {name} of account {account_id} does not exist")
        return pvc

    def _requested_gb(self, claim_id: str, name: str) -> int:
        """The existing claim's size (a resize that waited for it to be bound asked now)."""
        pvc: Any = self._read(claim_id)
        if pvc.metadata.deletion_timestamp is not None:
            raise Conflict(
                f"volume claim {claim_id} is still being deleted",
                hint="Kubernetes keeps it until no pod uses it; try again once its pods are gone",
            )
        try:
            self._expand(pvc, name)
        except LowcostgpuError as exc:  # a start never fails for a resize the cluster refuses
            log.warning("volume %s not expanded yet: %s", name, exc)
        return max(_asked_gb(pvc), parse_quantity(pvc.spec.resources.requests["storage"]) // 2**30)

    def _read(self, claim_id: str) -> Any:
        return self.kube.call(
            self.kube.core.read_namespaced_persistent_volume_claim,
            claim_id,
            self.namespace,
            what=f"reading the claim {claim_id}",
        )

"""Names, labels and bodies of the Kubernetes objects lowcostgpu makes: pure functions, no I/O.

Allocation ids ("i-3f2a@1700000000") and account volume names are not valid Kubernetes names, so
objects are named `lcg-<readable part>-<hash>` and carry the exact id in an annotation; a hash of
it goes in a label, for selectors.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Final

from lowcostgpu.adapters.kubernetes.names import KubeNames
from lowcostgpu.domain.errors import InvalidRequest
from lowcostgpu.ports.runtime import WorkloadStart

MANAGED_BY: Final = "app.kubernetes.io/managed-by"
MANAGER: Final = "lowcostgpu"
ROLE_LABEL: Final = "lowcostgpu.io/role"  # workload | node
ALLOCATION_LABEL: Final = "lowcostgpu.io/allocation"  # a hash of the allocation id
ALLOCATION_ID: Final = "lowcostgpu.io/allocation-id"
INSTANCE_ID: Final = "lowcostgpu.io/instance-id"
GPU_INDICES: Final = "lowcostgpu.io/gpu-indices"
GANG_LABEL: Final = "lowcostgpu.io/gang"  # a hash of a multi-node run's rank-0 allocation id
RANK_LABEL: Final = "lowcostgpu.io/rank"  # its member's rank
EXIT_FINALIZER: Final = "lowcostgpu.io/exit-report"  # keeps an ended pod until forget()
GPU_RESOURCE: Final = "nvidia.com/gpu"
MAX_POD_GRACE_S: Final = 300
DEFAULT_POD_GRACE_S: Final = 30  # Kubernetes' own default terminationGracePeriodSeconds
VOLUME_MOUNT_PATH: Final = "/mnt/lowcostgpu/volume"
CONTAINER: Final = "workload"

_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9@.:_-]{0,127}")


def check_allocation_id(allocation_id: str) -> None:
    if not _ID.fullmatch(allocation_id):
        raise InvalidRequest(
            f"allocation id {allocation_id!r} is not valid for the Kubernetes runtime",
            hint="use letters, digits and '@.:_-' (at most 128 characters, starting with a letter "
            "or a digit)",
        )


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def object_name(prefix: str, raw: str) -> str:
    """A DNS-1123 label (≤ 63 characters) that is readable and unique for `raw`."""
    readable = re.sub(r"[^a-z0-9-]+", "-", raw.lower()).strip("-")[:40].strip("-")
    return "-".join(p for p in (prefix, readable, digest(raw)) if p)


def pod_name(allocation_id: str) -> str:
    return object_name("lcg", allocation_id)


def gang_service_name(gang_id: str) -> str:
    return object_name("lcg-gang", gang_id)


def gang_service(start: WorkloadStart) -> dict[str, Any]:
    """The headless Service that names a gang's rank-0 pod in the cluster's DNS
    (`<name>.<namespace>.svc`): the members' `MASTER_ADDR`. Its addresses are published before
    the pod is ready (the members rendezvous while starting)."""
    port = int(start.env.get("LOWCOSTGPU_MASTER_PORT", "29400"))
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": gang_service_name(start.gang_id),
            "labels": _labels("workload", GANG_LABEL, digest(start.gang_id)),
            "annotations": {ALLOCATION_ID: start.gang_id, INSTANCE_ID: start.instance_id},
        },
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {**_labels("workload", GANG_LABEL, digest(start.gang_id)), RANK_LABEL: "0"},
            "ports": [{"name": "rendezvous", "port": port, "targetPort": port}],
        },
    }


def claim_name(account_id: str, volume: str) -> str:
    return object_name("lcg-vol", f"{account_id}-{volume}")


def selector(role: str, **labels: str) -> str:
    return ",".join(
        [f"{MANAGED_BY}={MANAGER}", f"{ROLE_LABEL}={role}"]
        + [f"{k}={v}" for k, v in labels.items()]
    )


def rfc3339(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def pod_grace_s(spec_grace_s: int | None) -> int:
    """A pod's grace on eviction: its terminationGracePeriodSeconds, at most 300 s."""
    grace = DEFAULT_POD_GRACE_S if spec_grace_s is None else spec_grace_s
    return max(0, min(grace, MAX_POD_GRACE_S))


# --- workloads ------------------------------------------------------------------------------


def workload_pod(start: WorkloadStart, *, image: str, env_secret: str) -> dict[str, Any]:
    """An instance's run as a Pod bound to its host (the control plane is its scheduler).

    The environment (it holds the instance token) comes from a Secret, not the pod spec."""
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": image,
        "command": list(start.argv),
        "envFrom": [{"secretRef": {"name": env_secret}}],
        "resources": {"limits": {GPU_RESOURCE: str(len(start.gpu_indices))}},
    }
    volumes = []
    if start.volume is not None:
        container["volumeMounts"] = [{"name": "volume", "mountPath": start.volume.path}]
        container["workingDir"] = start.volume.path
        volumes.append(
            {"name": "volume", "persistentVolumeClaim": {"claimName": start.volume.name}}
        )
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(start.allocation_id),
            "labels": _pod_labels(start),
            "annotations": {
                ALLOCATION_ID: start.allocation_id,
                INSTANCE_ID: start.instance_id,
                GPU_INDICES: ",".join(str(i) for i in start.gpu_indices),
            },
            "finalizers": [EXIT_FINALIZER],
        },
        "spec": {
            "nodeName": start.host_id,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": pod_grace_s(start.grace_period_s),
            "containers": [container],
            "volumes": volumes,
        },
    }


def workload_env(start: WorkloadStart) -> dict[str, str]:
    env = dict(start.env)
    if start.volume is not None:
        env["LOWCOSTGPU_VOLUME"] = start.volume.path
    return env


def env_secret(start: WorkloadStart) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": pod_name(start.allocation_id),
            "labels": _labels("workload", ALLOCATION_LABEL, digest(start.allocation_id)),
        },
        "type": "Opaque",
        "stringData": workload_env(start),
    }


ACCESS_MODES: Final = ("ReadWriteOnce", "ReadWriteMany")


def check_access_mode(mode: str) -> str:
    """A volume claim's access mode, as `serve --kube-volume-access` takes it."""
    if mode not in ACCESS_MODES:
        raise InvalidRequest(
            f"volume access mode {mode!r} is not one lowcostgpu makes claims with",
            hint="use ReadWriteOnce (one node at a time) or ReadWriteMany (the members of a "
            "multi-node instance on several nodes; needs a storage class that provides it)",
        )
    return mode


def claim(
    account_id: str,
    volume: str,
    size_gb: int,
    storage_class: str | None,
    access_mode: str = "ReadWriteOnce",
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "accessModes": [access_mode],
        "resources": {"requests": {"storage": f"{size_gb}Gi"}},
    }
    if storage_class:
        spec["storageClassName"] = storage_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": claim_name(account_id, volume),
            "labels": {MANAGED_BY: MANAGER, ROLE_LABEL: "volume"},
            "annotations": {"lowcostgpu.io/account": account_id, "lowcostgpu.io/volume": volume},
        },
        "spec": spec,
    }


# --- cluster nodes: events about a host Node and the pods a drain evicts ---------------------


def drain_event(
    regarding: Mapping[str, str],
    *,
    names: KubeNames,
    reason: str,
    note: str,
    key: str,
    at: float,
    warning: bool,
    related: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """An events.k8s.io/v1 Event about a Node (in kube-system: servers before ~1.22 refuse an
    Event about a cluster-scoped object anywhere else) or about a pod being evicted (in the pod's
    namespace, where its owner, who may not read kube-system, sees it). Its name derives from
    `key`, so a replayed effect makes no second event."""
    namespace = regarding.get("namespace") or "kube-system"
    body: dict[str, Any] = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": f"{regarding['name']}.{digest(key)}", "namespace": namespace},
        "eventTime": rfc3339(at),
        "reportingController": names.controller,
        "reportingInstance": names.reporting_instance,
        "action": "Drain",
        "reason": reason,
        "type": "Warning" if warning else "Normal",
        "note": note[:1024],
        "regarding": {"apiVersion": "v1", **regarding},
    }
    if related is not None:
        body["related"] = {"apiVersion": "v1", **related}
    return body


def node_ref(node: Any) -> dict[str, str]:
    return {"kind": "Node", "name": node.metadata.name, "uid": node.metadata.uid}


def pod_ref(pod: Any) -> dict[str, str]:
    meta = pod.metadata
    return {"kind": "Pod", "name": meta.name, "namespace": meta.namespace, "uid": meta.uid}


def gpus_of_node(node: Any) -> int:
    """The GPUs a Node's kubelet advertises (the device plugin's `nvidia.com/gpu`)."""
    allocatable = (node.status.allocatable if node.status else None) or {}
    try:
        return int(str(allocatable.get(GPU_RESOURCE, "0")))
    except ValueError:
        return 0


def gpus_of_pod(pod: Any) -> int:
    """The GPUs a pod holds on its node: its containers' `nvidia.com/gpu` limits (a request
    equals the limit for extended resources)."""
    total = 0
    for container in pod.spec.containers or []:
        resources = container.resources
        limits = (resources.limits if resources else None) or {}
        requests = (resources.requests if resources else None) or {}
        total += int(str(limits.get(GPU_RESOURCE) or requests.get(GPU_RESOURCE) or 0))
    return total


def pod_ended(pod: Any) -> bool:
    return pod.status is not None and pod.status.phase in ("Succeeded", "Failed")


def _pod_labels(start: WorkloadStart) -> dict[str, str]:
    """A workload pod's labels; a gang member's say which gang and which rank."""
    labels = _labels("workload", ALLOCATION_LABEL, digest(start.allocation_id))
    if start.nodes > 1:
        labels |= {GANG_LABEL: digest(start.gang_id), RANK_LABEL: str(start.rank)}
    return labels


def _labels(role: str, key: str, value: str) -> dict[str, str]:
    return {MANAGED_BY: MANAGER, ROLE_LABEL: role, key: value}

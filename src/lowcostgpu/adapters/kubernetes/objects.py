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

from lowcostgpu.core.nodes import (
    CLUSTER_LABEL,
    COMPUTE_CLASS_LABEL,
    PREEMPTIBLE_TAINT,
)
from lowcostgpu.domain.errors import InvalidRequest
from lowcostgpu.ports.runtime import WorkloadStart

MANAGED_BY: Final = "app.kubernetes.io/managed-by"
MANAGER: Final = "lowcostgpu"
ROLE_LABEL: Final = "lowcostgpu.io/role"  # workload | node
ALLOCATION_LABEL: Final = "lowcostgpu.io/allocation"  # a hash of the allocation id
NODE_LABEL: Final = "lowcostgpu.io/node"
PLANE_LABEL: Final = "lowcostgpu.io/plane"  # which control plane's Nodes (one per namespace)
ALLOCATION_ID: Final = "lowcostgpu.io/allocation-id"
INSTANCE_ID: Final = "lowcostgpu.io/instance-id"
NODE_ID: Final = "lowcostgpu.io/node-id"
GPU_INDICES: Final = "lowcostgpu.io/gpu-indices"
DRAIN_DEADLINE: Final = "lowcostgpu.io/drain-deadline"  # Unix seconds
DRAIN_REASON: Final = "lowcostgpu.io/drain-reason"
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


def node_name(node_id: str) -> str:
    """A cluster node's Node name: its id (already a DNS label) behind our prefix."""
    return object_name("lcg", node_id)


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
            "labels": _labels("workload", ALLOCATION_LABEL, digest(start.allocation_id)),
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


def claim(account_id: str, volume: str, size_gb: int, storage_class: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],
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


# --- cluster nodes ---------------------------------------------------------------------------


def cluster_node(payload: Mapping[str, Any], plane: str) -> dict[str, Any]:
    """A cluster node (an `AddNode` effect's payload) as a Node: labelled with its compute class
    and cluster, tainted when preemptible, its GPUs as `nvidia.com/gpu` capacity."""
    node_id, compute_class = str(payload["node_id"]), str(payload["compute_class"])
    labels = _labels("node", NODE_LABEL, node_id) | {PLANE_LABEL: plane}
    labels |= {COMPUTE_CLASS_LABEL: compute_class, CLUSTER_LABEL: str(payload["cluster_id"])}
    labels[ALLOCATION_LABEL] = digest(str(payload["allocation_id"]))
    taints = []
    if compute_class == "preemptible":
        t = PREEMPTIBLE_TAINT
        taints.append({"key": t.key, "value": t.value, "effect": t.effect})
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": node_name(node_id),
            "labels": labels,
            "annotations": {
                NODE_ID: node_id,
                ALLOCATION_ID: str(payload["allocation_id"]),
                "lowcostgpu.io/host": str(payload["host_id"]),
                GPU_INDICES: ",".join(str(i) for i in payload["gpu_indices"]),
            },
        },
        "spec": {"taints": taints},
    }


def node_status(gpus: int, at: float) -> dict[str, Any]:
    """What a node agent reports when it joins: capacity, and Ready."""
    resources = {GPU_RESOURCE: str(gpus), "pods": "110"}
    now = rfc3339(at)
    ready = {
        "type": "Ready",
        "status": "True",
        "reason": "LowcostgpuNodeReady",
        "message": "capacity handed to the cluster by lowcostgpu",
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    }
    return {"status": {"capacity": resources, "allocatable": resources, "conditions": [ready]}}


def node_event(
    node: str, uid: str, *, reason: str, note: str, key: str, at: float, warning: bool
) -> dict[str, Any]:
    """An events.k8s.io/v1 Event about a Node. A new-style Event about a cluster-scoped object
    lives in kube-system (servers before ~1.22 refuse any other namespace). Its name derives from
    the effect's key, so a replayed effect makes no second event."""
    return {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": f"{node}.{digest(key)}", "namespace": "kube-system"},
        "eventTime": rfc3339(at),
        "reportingController": "lowcostgpu.io/node-provider",
        "reportingInstance": "lowcostgpu",
        "action": "Drain",
        "reason": reason,
        "type": "Warning" if warning else "Normal",
        "note": note[:1024],
        "regarding": {"kind": "Node", "apiVersion": "v1", "name": node, "uid": uid},
    }


def _labels(role: str, key: str, value: str) -> dict[str, str]:
    return {MANAGED_BY: MANAGER, ROLE_LABEL: role, key: value}

"""Evicting pods, as `kubectl drain` does: through the Eviction API, with each pod's grace.

An eviction is the polite delete: the API server checks PodDisruptionBudgets first and answers
429 when one would be broken. Until the node's deadline that is respected (the next pass tries
again); at the deadline the pod is deleted anyway — the deadline is the contract.

At the deadline pods are deleted with a grace of `KILL_GRACE_S` = 1 s, which is what
`kubectl delete --grace-period=0` sends without `--force`: the kubelet kills the containers at
once and then removes the pod object itself. A grace of 0 in the API is a force delete: the
object is gone before the kubelet has stopped anything, so the GPUs would look free while the
old containers still hold them, and the pod started there next would fail the kubelet's
admission (`OutOfnvidia.com/gpu`). Whoever gives the host's GPUs to new work waits for the
kubelet's removal instead (`runtime.KubernetesRuntime.start`).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import Any, Final, Literal

from kubernetes import client

from lowcostgpu.adapters.kubernetes.client import Kube, TooManyRequests
from lowcostgpu.adapters.kubernetes.objects import pod_ended, pod_grace_s
from lowcostgpu.domain.errors import NotFound

log = logging.getLogger(__name__)
Evicted = Literal["evicted", "blocked", "gone"]
KILL_GRACE_S: Final = 1


def pods_on(kube: Kube, node: str) -> list[Any]:
    """Every pod bound to `node`, in every namespace."""
    found = kube.call(
        kube.core.list_pod_for_all_namespaces,
        field_selector=f"spec.nodeName={node}",
        what=f"listing the pods on node {node}",
    )
    return list(found.items)


def evictable(pod: Any) -> bool:
    """Pods a drain evicts: not DaemonSet pods (they tolerate cordons and come back) and not
    static (mirror) pods, which the API cannot remove."""
    annotations = pod.metadata.annotations or {}
    if "kubernetes.io/config.mirror" in annotations:
        return False
    return not any(o.kind == "DaemonSet" for o in pod.metadata.owner_references or [])


def evict(kube: Kube, pod: Any, grace_s: int) -> Evicted:
    """Ask the Eviction API to remove `pod` with `grace_s` (429 from a PDB: "blocked")."""
    name, namespace = pod.metadata.name, pod.metadata.namespace
    body = client.V1Eviction(
        api_version=kube.eviction_version(),
        kind="Eviction",
        metadata=client.V1ObjectMeta(name=name, namespace=namespace),
        delete_options=client.V1DeleteOptions(grace_period_seconds=grace_s),
    )
    try:
        kube.call(
            kube.core.create_namespaced_pod_eviction,
            name,
            namespace,
            body,
            what=f"the eviction of pod {namespace}/{name}",
        )
    except TooManyRequests as exc:
        log.info("eviction of %s/%s blocked for now: %s", namespace, name, exc.message)
        return "blocked"
    except NotFound:
        return "gone"
    return "evicted"


def delete_pod(kube: Kube, pod: Any, grace_s: int) -> None:
    """Delete `pod` with `grace_s` (0: at once); a pod already gone is fine."""
    name, namespace = pod.metadata.name, pod.metadata.namespace
    with contextlib.suppress(NotFound):
        kube.call(
            kube.core.delete_namespaced_pod,
            name,
            namespace,
            grace_period_seconds=grace_s,
            what=f"deleting pod {namespace}/{name}",
        )


def grace_within(pod: Any, seconds_left: int) -> int:
    """The pod's own grace (≤ 300 s), but never past the node's deadline."""
    return max(0, min(pod_grace_s(pod.spec.termination_grace_period_seconds), seconds_left))


def drain_pass(
    kube: Kube,
    node: str,
    seconds_left: int,
    notify: Callable[[Any, int], None] | None = None,
) -> list[str]:
    """Evict every evictable pod on `node` not already terminating (`notify(pod, grace_s)` first,
    so that its owner learns why); once no time is left, delete what a PDB still holds. Returns
    the pods still blocked (retried by the next pass)."""
    blocked = []
    for pod in pods_on(kube, node):
        if not evictable(pod) or pod.metadata.deletion_timestamp is not None:
            continue
        grace = grace_within(pod, seconds_left)
        if notify is not None:
            notify(pod, grace)
        if evict(kube, pod, grace) != "blocked":
            continue
        if seconds_left <= 0:
            log.warning(
                "deadline of node %s: deleting PDB-protected pod %s", node, pod.metadata.name
            )
            delete_pod(kube, pod, KILL_GRACE_S)
        else:
            blocked.append(f"{pod.metadata.namespace}/{pod.metadata.name}")
    return blocked


def clear(kube: Kube, node: str) -> None:
    """At the deadline: every evictable pod still on `node` is killed now (see `KILL_GRACE_S`);
    DaemonSet and static pods stay, as after `kubectl drain` (the device plugin among them)."""
    for pod in pods_on(kube, node):
        grace = pod.metadata.deletion_grace_period_seconds
        if evictable(pod) and (grace is None or grace > KILL_GRACE_S):
            delete_pod(kube, pod, KILL_GRACE_S)


def left_on(kube: Kube, node: str) -> list[Any]:
    """The evictable pods still on `node`, terminating ones included: a pod object is gone only
    once the kubelet has confirmed that its containers stopped."""
    return [pod for pod in pods_on(kube, node) if evictable(pod) and not pod_ended(pod)]

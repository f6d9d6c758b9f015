"""Pods that can never land: caught and explained instead of left Pending without a word.

Preemptible nodes are tainted (`<prefix>/preemptible=true:NoSchedule` by default, `KubeNames`),
so only pods that tolerate preemption land there and critical components stay on standard nodes.
A pod that selects our nodes (by `<prefix>/cluster` or `<prefix>/compute-class`) where every
matching node is preemptible, without the toleration, would wait forever: `check_pod` says why
and what to do; `KubernetesNodes` posts that as a Warning Event on the pod.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from lowcostgpu.adapters.kubernetes.names import KubeNames
from lowcostgpu.adapters.kubernetes.objects import digest, rfc3339
from lowcostgpu.core.nodes import Taint
from lowcostgpu.domain.errors import InvalidRequest


def toleration(taint: Taint) -> str:
    return f"{{key: {taint.key}, operator: Exists, effect: {taint.effect}}}"


def tolerates(tolerations: Iterable[Any] | None, taint: Taint) -> bool:
    for t in tolerations or []:
        operator = t.operator or "Equal"
        if t.effect and t.effect != taint.effect:
            continue
        if not t.key and operator == "Exists":
            return True  # tolerates every taint
        if t.key == taint.key and (operator == "Exists" or t.value == taint.value):
            return True
    return False


def targets_our_nodes(pod: Any, names: KubeNames) -> bool:
    keys = (names.cluster_label, names.compute_class_label)
    return any(key in (pod.spec.node_selector or {}) for key in keys)


def check_pod(pod: Any, nodes: Iterable[Any], names: KubeNames) -> None:
    """Raise `InvalidRequest` when `pod` selects our nodes but none of them can take it."""
    wanted = pod.spec.node_selector or {}
    if not targets_our_nodes(pod, names):
        return
    taint = names.taint
    shown = ",".join(f"{k}={v}" for k, v in sorted(wanted.items()))
    name = f"{pod.metadata.namespace}/{pod.metadata.name}"
    matching = [
        n
        for n in nodes
        if all((n.metadata.labels or {}).get(k) == v for k, v in wanted.items())
        and not n.spec.unschedulable
    ]
    if not matching:
        raise InvalidRequest(
            f"pod {name} selects {shown}, and no schedulable node has those labels",
            hint="check the cluster id and compute class (`kubectl get nodes -L "
            f"{names.compute_class_label},{names.cluster_label}`), or raise "
            "desired_preemptible_gpus",
        )
    if any(not _tainted(n, taint) for n in matching) or tolerates(pod.spec.tolerations, taint):
        return
    raise InvalidRequest(
        f"pod {name} selects {shown}: only preemptible nodes match, and the pod does not "
        f"tolerate their taint {taint}",
        hint=f"to run on preemptible capacity (evicted with its grace when reclaimed) add the "
        f"toleration {toleration(taint)}; critical components select "
        f"{names.compute_class_label}=standard instead",
    )


def _tainted(node: Any, taint: Taint) -> bool:
    return any(t.key == taint.key for t in node.spec.taints or [])


def pod_event(pod: Any, error: InvalidRequest, at: float, names: KubeNames) -> dict[str, Any]:
    """The explanation as an events.k8s.io/v1 Warning on the pod (one per pod: a stable name)."""
    return {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {
            "name": f"{pod.metadata.name}.{digest(str(pod.metadata.uid))}",
            "namespace": pod.metadata.namespace,
        },
        "eventTime": rfc3339(at),
        "reportingController": names.controller,
        "reportingInstance": names.reporting_instance,
        "action": "Schedule",
        "reason": "PreemptibleTaintNotTolerated",
        "type": "Warning",
        "note": str(error)[:1024],
        "regarding": {
            "kind": "Pod",
            "apiVersion": "v1",
            "name": pod.metadata.name,
            "namespace": pod.metadata.namespace,
            "uid": pod.metadata.uid,
        },
    }

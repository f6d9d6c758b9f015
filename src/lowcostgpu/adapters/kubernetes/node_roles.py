"""A fleet host's roles as Node changes: pure functions from a Node to the patch that puts it
in a role (see the table in `nodes.py`). Only our own keys are touched: the operator's and other
controllers' labels, taints and finalizers are kept as they are.

A change is `{"labels": …, "annotations": …, "taints": […], "unschedulable": bool,
"finalizers": […]}` (a None value in labels or annotations removes the key); `role_patch` turns
it into a JSON merge patch carrying the Node's resourceVersion, so a concurrent writer makes it a
409 (read again and redone) instead of a lost update. None: the Node is in that role already.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lowcostgpu.adapters.kubernetes.names import KubeNames
from lowcostgpu.core.nodes import Taint

Change = dict[str, Any]


def has_node(node: Any, names: KubeNames, node_id: str) -> bool:
    """Whether the host Node holds cluster node `node_id` now (its role annotation)."""
    return (node.metadata.annotations or {}).get(names.node_id) == node_id


def _taint(t: Taint) -> dict[str, str]:
    return {"key": t.key, "value": t.value, "effect": t.effect} if t.value else {
        "key": t.key, "effect": t.effect
    }  # fmt: skip


def _others(node: Any, names: KubeNames) -> list[dict[str, Any]]:
    """The Node's taints that are not ours (kept; the API server's own among them)."""
    kept = []
    for t in node.spec.taints or []:
        if t.key in names.ours:
            continue
        body = {"key": t.key, "effect": t.effect}
        if t.value:
            body["value"] = t.value
        if t.time_added is not None:
            body["timeAdded"] = t.time_added.strftime("%Y-%m-%dT%H:%M:%SZ")
        kept.append(body)
    return kept


def _role_keys(names: KubeNames) -> tuple[list[str], list[str]]:
    labels = [names.cluster_label, names.compute_class_label, names.plane_label]
    labels += [names.key("allocation"), names.risk_label]
    annotations = [names.node_id, names.allocation_id, names.drain_deadline, names.drain_reason]
    annotations.append(names.risk_since)
    return labels, annotations


def cluster_role(
    node: Any,
    names: KubeNames,
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    preemptible: bool,
) -> Change | None:
    """A cluster's node: its labels, the preemptible taint if so, uncordoned."""
    label_keys, annotation_keys = _role_keys(names)
    taints = _others(node, names) + ([_taint(names.taint)] if preemptible else [])
    change: Change = {
        "labels": {k: None for k in label_keys} | dict(labels),
        "annotations": {k: None for k in annotation_keys} | dict(annotations),
        "taints": taints,
        "unschedulable": False,
        "finalizers": _finalizers(node, names, drain=False),
    }
    return _if_changed(node, change)


def draining_role(node: Any, names: KubeNames, annotations: Mapping[str, str]) -> Change | None:
    """T+0 of a drain: cordoned, the draining taint beside the class's, the deadline and reason
    annotated, and a finalizer so that nobody deletes the Node from under its drain."""
    taints = [t for t in _others(node, names)]
    if names.taint.key in {t.key for t in node.spec.taints or []}:
        taints.append(_taint(names.taint))
    taints.append(_taint(names.draining_taint))
    change: Change = {
        "labels": {names.risk_label: None},  # the notice replaces the advice
        "annotations": {names.risk_since: None} | dict(annotations),
        "taints": taints,
        "unschedulable": True,
        "finalizers": _finalizers(node, names, drain=True),
    }
    return _if_changed(node, change)


def risk_mark(node: Any, names: KubeNames, risk: str, at: int) -> Change | None:
    """A serving cluster node marked at risk of reclaim (`risk` "next", warned at `at`) or
    unmarked (`risk` ""): only the risk label and annotation move; taints, cordon and
    finalizers stay as they are."""
    taints = _others(node, names)
    present = {t.key for t in node.spec.taints or []}
    taints += [_taint(t) for t in (names.taint, names.draining_taint) if t.key in present]
    change: Change = {
        "labels": {names.risk_label: risk or None},
        "annotations": {names.risk_since: str(at) if risk else None},
        "taints": taints,
        "unschedulable": bool(node.spec.unschedulable),
        "finalizers": list(node.metadata.finalizers or []),
    }
    return _if_changed(node, change)


def pool_role(node: Any, names: KubeNames) -> Change | None:
    """Back in the pool: cordoned, none of our labels, annotations, taints or finalizer."""
    label_keys, annotation_keys = _role_keys(names)
    change: Change = {
        "labels": {k: None for k in label_keys},
        "annotations": {k: None for k in annotation_keys},
        "taints": _others(node, names),
        "unschedulable": True,
        "finalizers": _finalizers(node, names, drain=False),
    }
    return _if_changed(node, change)


def _finalizers(node: Any, names: KubeNames, *, drain: bool) -> list[str]:
    kept = [f for f in node.metadata.finalizers or [] if f != names.drain_finalizer]
    return [*kept, names.drain_finalizer] if drain else kept


def _if_changed(node: Any, change: Change) -> Change | None:
    labels, annotations = node.metadata.labels or {}, node.metadata.annotations or {}
    same = (
        all(labels.get(k) == v for k, v in change["labels"].items())
        and all(annotations.get(k) == v for k, v in change["annotations"].items())
        and _taint_keys(change["taints"]) == _taint_keys(_current_taints(node))
        and bool(node.spec.unschedulable) == change["unschedulable"]
        and list(node.metadata.finalizers or []) == change["finalizers"]
    )
    return None if same else change


def _current_taints(node: Any) -> list[dict[str, Any]]:
    return [
        {"key": t.key, "value": t.value or "", "effect": t.effect} for t in node.spec.taints or []
    ]


def _taint_keys(taints: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    return sorted((t["key"], t.get("value") or "", t["effect"]) for t in taints)


def role_patch(node: Any, change: Change) -> dict[str, Any]:
    """The change as a JSON merge patch (lists replace lists) with the Node's resourceVersion."""
    return {
        "metadata": {
            "resourceVersion": node.metadata.resource_version,
            "labels": change["labels"],
            "annotations": change["annotations"],
            "finalizers": change["finalizers"],
        },
        "spec": {"taints": change["taints"], "unschedulable": change["unschedulable"]},
    }

"""Cluster nodes as Kubernetes Node objects: the node provider for the Kubernetes runtime.

The core decides and emits `AddNode`, `CordonNode`, `SignalWorkload`/`KillWorkload` on the node's
allocation, and `RemoveNode` (see `core.nodes`); this provider makes them true in the API server:

- `AddNode`: a Node labelled `lowcostgpu.io/compute-class=standard|preemptible` and
  `lowcostgpu.io/cluster=<id>`, tainted `lowcostgpu.io/preemptible=true:NoSchedule` when
  preemptible, with `nvidia.com/gpu` capacity, marked Ready (the provider is the node's agent).
- `CordonNode`: `spec.unschedulable`, the drain's deadline and reason as annotations, an
  events.k8s.io/v1 Event (`Preempted`, Warning, in kube-system), and a first eviction pass.
- the node's SIGTERM: an eviction pass (each pod with its grace, capped at the deadline);
  every `reports()` (each loop tick) passes again, so PDB-blocked evictions are retried, also
  after a restart of the control plane — the drain lives in the Node's annotations, not here.
- the node's report: `exited` once a draining node holds no evictable pod, which ends the drain
  in the core; `KillWorkload` at the deadline deletes what is left; `RemoveNode` deletes the Node.

Every operation is idempotent: effects may be carried out again after a crash.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

from lowcostgpu.adapters.kubernetes import drain, placement
from lowcostgpu.adapters.kubernetes.client import Kube, already_exists
from lowcostgpu.adapters.kubernetes.objects import (
    ALLOCATION_ID,
    ALLOCATION_LABEL,
    DRAIN_DEADLINE,
    DRAIN_REASON,
    GPU_RESOURCE,
    NODE_ID,
    PLANE_LABEL,
    cluster_node,
    digest,
    node_event,
    node_name,
    node_status,
    selector,
)
from lowcostgpu.core.nodes import DRAIN_PREEMPTED, NodeState
from lowcostgpu.domain.errors import Conflict, InvalidRequest, NotFound
from lowcostgpu.domain.status import NodeStatus
from lowcostgpu.ports.runtime import Runtime, WorkloadReport
from lowcostgpu.ports.store import OutboxEntry, Store

log = logging.getLogger(__name__)
HEARTBEAT_S = 20.0  # well inside the node lifecycle controller's 40 s grace


class KubernetesNodes:
    """The node provider (`ports.nodes.NodeProvider`) over one API server."""

    def __init__(
        self,
        kube: Kube,
        store: Store,
        *,
        plane: str = "default",
        heartbeat_s: float = HEARTBEAT_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.kube = kube
        self.store = store
        self.plane = plane  # our Nodes carry lowcostgpu.io/plane=<plane>; others are not ours
        self.clock = clock
        self.heartbeat_s = heartbeat_s
        self._heartbeats: dict[str, float] = {}
        self._explained: set[str] = set()  # pods whose Warning was posted by this process

    # -- effects -------------------------------------------------------------------------------

    def carry_out(self, entry: OutboxEntry, runtime: Runtime) -> None:
        p = entry.payload
        match entry.kind:
            case "AddNode":
                self.add(p)
            case "CordonNode":
                self.cordon(str(p["node_id"]), entry.key)
            case "RemoveNode":
                self.remove(str(p["node_id"]))

    def add(self, payload: Any) -> None:
        state = self._state(str(payload["node_id"]))
        if state is not None and state.status is NodeStatus.REMOVED:
            return  # a late replay: the node has come and gone since
        body = cluster_node(payload, self.plane)
        name = body["metadata"]["name"]
        try:
            self.kube.call(self.kube.core.create_node, body, what=f"creating node {name}")
        except Conflict as exc:
            if not already_exists(exc):
                raise
        self._heartbeat(name, len(payload["gpu_indices"]))

    def _heartbeat(self, name: str, gpus: int) -> None:
        """Ready, with a fresh heartbeat: the node lifecycle controller marks a Node without
        one for 40 s NotReady (and evicts its pods later), so the provider, standing in for the
        node's kubelet, renews it every `heartbeat_s`."""
        self.kube.call(
            self.kube.core.patch_node_status,
            name,
            node_status(gpus, self.clock()),
            what=f"marking node {name} Ready",
        )
        self._heartbeats[name] = self.clock()

    def cordon(self, node_id: str, effect_key: str) -> None:
        name = node_name(node_id)
        node = self._read(name)
        state = self._state(node_id)
        if node is None or state is None or state.deadline is None:
            log.info("cordon of %s: the node is gone already", node_id)
            return
        annotations = {DRAIN_DEADLINE: str(state.deadline), DRAIN_REASON: state.drain_reason}
        patch = {"metadata": {"annotations": annotations}, "spec": {"unschedulable": True}}
        self.kube.call(self.kube.core.patch_node, name, patch, what=f"cordoning node {name}")
        self._event(name, node.metadata.uid, state, effect_key)
        self._drain(name, state.deadline)

    def remove(self, node_id: str) -> None:
        name = node_name(node_id)
        drain.clear(self.kube, name)
        with contextlib.suppress(NotFound):
            self.kube.call(self.kube.core.delete_node, name, what=f"deleting node {name}")

    # -- the node's allocation, as the runtime sees it -----------------------------------------

    def node_of(self, allocation_id: str) -> Any | None:
        """Our Node that holds `allocation_id`, if any."""
        labels = {ALLOCATION_LABEL: digest(allocation_id)}
        found = self.kube.call(
            self.kube.core.list_node,
            label_selector=selector("node", **labels, **{PLANE_LABEL: self.plane}),
            what="looking up a node by allocation",
        )
        return next(iter(found.items), None)

    def signal(self, node: Any) -> None:
        """The node's SIGTERM: its pods are evicted (a cordon without deadline evicts nothing)."""
        deadline = (node.metadata.annotations or {}).get(DRAIN_DEADLINE)
        if deadline is not None:
            self._drain(node.metadata.name, int(deadline))

    def kill(self, node: Any) -> None:
        drain.clear(self.kube, node.metadata.name)

    def reports(self) -> list[WorkloadReport]:
        """One report per Node of ours; a pass over draining ones (PDB retries); pending pods
        that can never land on our nodes get a Warning Event that says why."""
        found = self.kube.call(
            self.kube.core.list_node,
            label_selector=selector("node", **{PLANE_LABEL: self.plane}),
            what="listing our nodes",
        )
        self.explain_pending(found.items)
        return [self._report(node) for node in found.items]

    def check_pod(self, namespace: str, name: str) -> None:
        """`InvalidRequest` (what is wrong, what to do) if the pod can never land on our nodes."""
        pod = self.kube.call(
            self.kube.core.read_namespaced_pod, name, namespace, what=f"reading pod {name}"
        )
        found = self.kube.call(
            self.kube.core.list_node,
            label_selector=selector("node", **{PLANE_LABEL: self.plane}),
            what="listing our nodes",
        )
        placement.check_pod(pod, found.items)

    def explain_pending(self, nodes: list[Any]) -> None:
        pending: Any = self.kube.call(
            self.kube.core.list_pod_for_all_namespaces,
            field_selector="spec.nodeName=,status.phase=Pending",
            what="listing unscheduled pods",
        )
        for pod in pending.items:
            if pod.metadata.uid in self._explained or not placement.targets_our_nodes(pod):
                continue
            try:
                placement.check_pod(pod, nodes)
            except InvalidRequest as exc:
                log.warning("%s", exc)
                self._post(pod.metadata.namespace, placement.pod_event(pod, exc, self.clock()))
                self._explained.add(pod.metadata.uid)

    # -- internals -----------------------------------------------------------------------------

    def _report(self, node: Any) -> WorkloadReport:
        annotations = node.metadata.annotations or {}
        allocation_id, node_id = annotations.get(ALLOCATION_ID, ""), annotations.get(NODE_ID, "")
        deadline = annotations.get(DRAIN_DEADLINE)
        name = node.metadata.name
        if self.clock() - self._heartbeats.get(name, 0.0) >= self.heartbeat_s:  # draining too
            capacity = (node.status.capacity if node.status else None) or {}
            self._heartbeat(name, int(capacity.get(GPU_RESOURCE, "0")))
        if deadline is None:
            return WorkloadReport(allocation_id, node_id, "running")
        left = self._drain(node.metadata.name, int(deadline))
        if left:
            return WorkloadReport(allocation_id, node_id, "running", reason=f"{left} pod(s) left")
        return WorkloadReport(allocation_id, node_id, "exited", exit_code=0, reason="drained")

    def _drain(self, name: str, deadline: int) -> int:
        """An eviction pass; the number of evictable pods still on the node."""
        seconds_left = deadline - int(self.clock())
        drain.drain_pass(self.kube, name, seconds_left)
        return sum(1 for pod in drain.pods_on(self.kube, name) if drain.evictable(pod))

    def _event(self, name: str, uid: str, state: NodeState, effect_key: str) -> None:
        preempted = state.drain_reason == DRAIN_PREEMPTED
        grace = state.grace_period_s
        if preempted:  # never the work it was reclaimed for: it may be another account's
            note = (
                f"reclaimed for on-demand work: pods are evicted with their grace, "
                f"node removed in {grace} s"
            )
        else:
            note = f"drained ({state.drain_reason}): pods are evicted, node removed in {grace} s"
        body = node_event(
            name,
            uid,
            reason="Preempted" if preempted else "Draining",
            note=note,
            key=effect_key,
            at=self.clock(),
            warning=preempted,
        )
        self._post("kube-system", body)

    def _post(self, namespace: str, event: dict[str, Any]) -> None:
        """Create an Event; one with its name there already (a replayed effect) is fine."""
        try:
            self.kube.call(
                self.kube.events.create_namespaced_event,
                namespace,
                event,
                what=f"the {event['reason']} event {event['metadata']['name']}",
            )
        except Conflict as exc:
            if not already_exists(exc):
                raise

    def _read(self, name: str) -> Any | None:
        try:
            return self.kube.call(self.kube.core.read_node, name, what=f"reading node {name}")
        except NotFound:
            return None

    def _state(self, node_id: str) -> NodeState | None:
        nodes = self.store.nodes(include_removed=True)
        return next((n.state for n in nodes if n.state.id == node_id), None)

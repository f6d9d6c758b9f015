"""Cluster nodes on Kubernetes: a node is a whole fleet host, and the host is a real Node.

The operator's GPU machines are registered by their own kubelets (their `nvidia.com/gpu` comes
from the device plugin); lowcostgpu never creates, deletes or writes the status of a Node. It
only moves a host between roles, by labels, taints and the cordon (names from `KubeNames`):

| role | labels | taints | cordon |
|---|---|---|---|
| pool (free, or instance pods bound to it by name) | none of ours | none of ours | yes |
| a cluster's standard node | cluster, compute-class=standard | none | no |
| a cluster's preemptible node | cluster, compute-class=preemptible | preemptible | no |
| draining (either class) | as before | + draining | yes, + drain finalizer |

The pool's cordon keeps kube-scheduler from placing anyone's pods on GPUs that lowcostgpu hands
out (instance pods name their node and skip the scheduler; DaemonSets such as the device plugin
tolerate cordons). The core decides; this provider carries out its effects:

- `AddNode`: the host leaves the pool for the cluster's role (uncordoned), if it is a whole host
  (refused otherwise: Kubernetes schedules onto Nodes, not GPU slices).
- `CordonNode`: T+0 of the drain: cordon, the draining taint, the deadline and reason as
  annotations, a finalizer (nobody deletes the Node mid-drain), a Warning Event on the Node and,
  as each pod is evicted, one on the pod in its own namespace; then a first eviction pass.
- the node's SIGTERM: an eviction pass; every `reports()` (each loop tick) passes again, so
  PDB-blocked evictions are retried, also after a restart of the control plane (the drain lives
  in the Node's annotations, not here).
- the node's report: `exited` once the kubelet has removed every evictable pod or reported it
  ended (terminating pods still count: their containers may still hold the GPUs; an ended pod
  holds none); `KillWorkload` at the deadline deletes
  what is left (`drain.KILL_GRACE_S`); `RemoveNode` puts the host back in the pool.
- `MarkNodeRisk`: a serving preemptible node among the next victims gets the risk label
  (`<prefix>/preemption-risk=next`) and annotation, or loses them when the pressure ends; a
  draining Node is never marked (its drain drops the mark: the notice replaces the advice).

Every operation is idempotent and checks that the Node still carries the node it is about
(`node-id` annotation): a late replay never touches the host's next role.

Cost: `reports()` is one LIST of this plane's role Nodes, one LIST of pods per draining Node, one
LIST of unscheduled pods, and every `POOL_CHECK_S` one LIST of all Nodes (the pool's cordon).

The provider is the order of things (each effect, each report); its parts: `node_roles` (a
role as a Node change), `host_nodes` (reading and patching the host Nodes), `drain` (the
evictions), `drain_events` (the drain's Events) and `placement` (pods that can never land).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Mapping
from typing import Any, Final

from lowcostgpu.adapters.kubernetes import drain, placement
from lowcostgpu.adapters.kubernetes.client import Kube
from lowcostgpu.adapters.kubernetes.drain_events import DrainEvents, post_event
from lowcostgpu.adapters.kubernetes.host_nodes import (
    carries,
    check_whole_host,
    list_nodes,
    patch_host,
    read_host,
)
from lowcostgpu.adapters.kubernetes.names import DEFAULT_NAMES, KubeNames
from lowcostgpu.adapters.kubernetes.node_roles import (
    cluster_role,
    draining_role,
    has_node,
    pool_role,
    risk_mark,
)
from lowcostgpu.adapters.kubernetes.objects import digest
from lowcostgpu.adapters.risk_marks import RiskMarks
from lowcostgpu.core.nodes import NodeState
from lowcostgpu.domain.errors import InvalidRequest, NotFound
from lowcostgpu.domain.status import NodeStatus
from lowcostgpu.ports.runtime import Runtime, WorkloadReport
from lowcostgpu.ports.store import Store
from lowcostgpu.ports.store_records import OutboxEntry

log = logging.getLogger(__name__)
POOL_CHECK_S: Final = 30.0


class KubernetesNodes:
    """The node provider (`ports.nodes.NodeProvider`) over one API server's fleet hosts."""

    def __init__(
        self,
        kube: Kube,
        store: Store,
        *,
        names: KubeNames = DEFAULT_NAMES,
        plane: str = "default",
        hosts: Collection[str] = (),
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.kube = kube
        self.store = store
        self.names = names
        self.plane = plane  # role Nodes carry <prefix>/plane=<plane>; others are not ours
        self.hosts = frozenset(hosts)  # the fleet's hosts here: cordoned while in the pool
        self.clock = clock
        self._pool_checked_at = float("-inf")
        self._explained: set[str] = set()  # pods whose Warning was posted by this process
        self._risk_marks = RiskMarks()
        self._events = DrainEvents(kube, names, clock)

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
            case "MarkNodeRisk":
                self.mark_risk(str(p["node_id"]), str(p["risk"]), int(p["at"]))

    def add(self, payload: Mapping[str, Any]) -> None:
        node_id, host = str(payload["node_id"]), str(payload["host_id"])
        state = self._state(node_id)
        if state is not None and state.status is NodeStatus.REMOVED:
            return  # a late replay: the node has come and gone since
        node = read_host(self.kube, host)
        check_whole_host(node_id, node, len(payload["gpu_indices"]))
        labels = {
            self.names.cluster_label: str(payload["cluster_id"]),
            self.names.compute_class_label: str(payload["compute_class"]),
            self.names.plane_label: self.plane,
            self.names.key("allocation"): digest(str(payload["allocation_id"])),
        }
        annotations = {
            self.names.node_id: node_id,
            self.names.allocation_id: str(payload["allocation_id"]),
        }
        preemptible = str(payload["compute_class"]) == "preemptible"
        patch_host(
            self.kube,
            host,
            lambda n: None if has_node(n, self.names, node_id) else n,
            lambda n: cluster_role(n, self.names, labels, annotations, preemptible),
            what=f"giving host {host} to cluster {payload['cluster_id']} as node {node_id}",
        )

    def cordon(self, node_id: str, effect_key: str) -> None:
        state = self._state(node_id)
        if state is None or state.deadline is None or state.host_id is None:
            log.info("cordon of %s: the node is gone already", node_id)
            return
        host = state.host_id
        annotations = {
            self.names.drain_deadline: str(state.deadline),
            self.names.drain_reason: state.drain_reason or "",
        }
        node = patch_host(
            self.kube,
            host,
            lambda n: n if has_node(n, self.names, node_id) else None,
            lambda n: draining_role(n, self.names, annotations),
            what=f"cordoning host {host} (node {node_id})",
        )
        if node is None:
            log.info("cordon of %s: host %s holds another role now", node_id, host)
            return
        self._events.node_event(node, state, effect_key)
        self._drain(node)

    def mark_risk(self, node_id: str, risk: str, at: int) -> None:
        """The risk label and annotation on the Node that serves `node_id`, or their removal
        (`risk` ""). A draining Node is not marked (its notice replaces the advice); a host
        that serves another role now is left alone (a late replay)."""
        state = self._state(node_id)
        if state is None or state.host_id is None:
            log.info("risk mark of %s: the node is gone already", node_id)
            return
        if not self._risk_marks.latest(node_id, at):
            return
        host = state.host_id

        def serving(n: Any) -> Any | None:
            if not has_node(n, self.names, node_id):
                return None
            draining = self.names.drain_deadline in (n.metadata.annotations or {})
            return None if draining and risk else n

        done = patch_host(
            self.kube,
            host,
            serving,
            lambda n: risk_mark(n, self.names, risk, at),
            what=f"{'marking' if risk else 'unmarking'} host {host} (node {node_id}) at risk",
        )
        if done is None:
            log.info("risk mark of %s: host %s is draining or holds another role", node_id, host)

    def remove(self, node_id: str) -> None:
        """The host goes back to the pool (cordoned, our labels, taints and finalizer gone)."""
        self._risk_marks.forget(node_id)
        state = self._state(node_id)
        if state is None or state.host_id is None:
            return
        host = state.host_id
        if carries(self.kube, self.names, host, node_id):
            drain.clear(self.kube, host)  # what a kill left terminating (usually nothing)
        patch_host(
            self.kube,
            host,
            lambda n: n if has_node(n, self.names, node_id) else None,
            lambda n: pool_role(n, self.names),
            what=f"returning host {host} to the pool (node {node_id} removed)",
        )

    # -- the node's allocation, as the runtime sees it -----------------------------------------

    def node_of(self, allocation_id: str) -> Any | None:
        """The host Node that holds `allocation_id` as a cluster node, if any."""
        labels = {self.names.key("allocation"): digest(allocation_id)}
        found = list_nodes(self.kube, labels | {self.names.plane_label: self.plane})
        return next(iter(found), None)

    def signal(self, node: Any) -> None:
        """The node's SIGTERM: its pods are evicted (a cordon without deadline evicts nothing)."""
        if self.names.drain_deadline in (node.metadata.annotations or {}):
            self._drain(node)

    def kill(self, node: Any) -> None:
        drain.clear(self.kube, node.metadata.name)

    def reports(self) -> list[WorkloadReport]:
        """One report per Node in a role of ours; a pass over draining ones (PDB retries);
        pending pods that can never land on our nodes get a Warning Event that says why."""
        nodes = list_nodes(self.kube, {self.names.plane_label: self.plane})
        if not self._risk_marks.checked:
            self._clear_stale_risk_marks(nodes)
        self._keep_pool_cordoned()
        self.explain_pending(nodes)
        return [self._report(node) for node in nodes]

    def _clear_stale_risk_marks(self, nodes: list[Any]) -> None:
        """At this process's first look, the risk marks a previous leader left: the risk state
        is not stored (`core.risk`), so no decision of ours would ever clear them; a pool still
        under pressure marks its next victims again in a new episode. O(role Nodes), once."""
        for node in nodes:
            name = node.metadata.name
            node_id = (node.metadata.annotations or {}).get(self.names.node_id)
            marked = self.names.risk_label in (node.metadata.labels or {})
            if marked and not self._risk_marks.ours(node_id):
                patch_host(
                    self.kube,
                    name,
                    lambda n: n,
                    lambda n: risk_mark(n, self.names, "", 0),
                    what=f"clearing a previous leader's risk mark on host {name}",
                )
        self._risk_marks.checked = True

    def check_pod(self, namespace: str, name: str) -> None:
        """`InvalidRequest` (what is wrong, what to do) if the pod can never land on our nodes."""
        pod = self.kube.call(
            self.kube.core.read_namespaced_pod, name, namespace, what=f"reading pod {name}"
        )
        placement.check_pod(
            pod, list_nodes(self.kube, {self.names.plane_label: self.plane}), self.names
        )

    def explain_pending(self, nodes: list[Any]) -> None:
        pending: Any = self.kube.call(
            self.kube.core.list_pod_for_all_namespaces,
            field_selector="spec.nodeName=,status.phase=Pending",
            what="listing unscheduled pods",
        )
        for pod in pending.items:
            uid = pod.metadata.uid
            if uid in self._explained or not placement.targets_our_nodes(pod, self.names):
                continue
            try:
                placement.check_pod(pod, nodes, self.names)
            except InvalidRequest as exc:
                log.warning("%s", exc)
                post_event(self.kube, placement.pod_event(pod, exc, self.clock(), self.names))
                self._explained.add(uid)

    # -- internals -----------------------------------------------------------------------------

    def _report(self, node: Any) -> WorkloadReport:
        annotations = node.metadata.annotations or {}
        allocation_id = annotations.get(self.names.allocation_id, "")
        node_id = annotations.get(self.names.node_id, "")
        if self.names.drain_deadline not in annotations:
            return WorkloadReport(allocation_id, node_id, "running")
        left = self._drain(node)
        if left:
            return WorkloadReport(allocation_id, node_id, "running", reason=f"{left} pod(s) left")
        return WorkloadReport(allocation_id, node_id, "exited", exit_code=0, reason="drained")

    def _drain(self, node: Any) -> int:
        """An eviction pass; the number of evictable pods still on the node (the kubelet has
        not removed them yet, terminating or not)."""
        name, annotations = node.metadata.name, node.metadata.annotations or {}
        deadline = int(annotations[self.names.drain_deadline])
        reason = annotations.get(self.names.drain_reason, "")

        def warn(pod: Any, grace_s: int) -> None:
            self._events.pod_event(pod, node, reason, grace_s, deadline)

        drain.drain_pass(self.kube, name, deadline - int(self.clock()), warn)
        return len(drain.left_on(self.kube, name))

    def _keep_pool_cordoned(self) -> None:
        """Fleet hosts in no role of any plane are cordoned (every `POOL_CHECK_S`): a host the
        operator registered, or one whose removal a crash cut short, is not left open to
        kube-scheduler."""
        now = self.clock()
        if not self.hosts or now - self._pool_checked_at < POOL_CHECK_S:
            return
        self._pool_checked_at = now
        found: Any = self.kube.call(self.kube.core.list_node, what="listing the fleet's Nodes")
        for node in found.items:
            labels = node.metadata.labels or {}
            if node.metadata.name not in self.hosts or self.names.cluster_label in labels:
                continue
            if not node.spec.unschedulable:
                patch_host(
                    self.kube,
                    node.metadata.name,
                    lambda n: (
                        n if self.names.cluster_label not in (n.metadata.labels or {}) else None
                    ),
                    lambda n: pool_role(n, self.names),
                    what=f"cordoning pool host {node.metadata.name}",
                )

    def _state(self, node_id: str) -> NodeState | None:
        try:
            return self.store.node(node_id).state
        except NotFound:
            return None

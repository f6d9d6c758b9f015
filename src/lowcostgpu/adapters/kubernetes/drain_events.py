"""The Events a node's drain posts: one on the Node at T+0, one on each pod as it is evicted.

A drain is told to two audiences: the operator, on the Node (in kube-system), and each pod's
owner, in the pod's own namespace (they may not read kube-system), with its grace and deadline.
The words (a reclaim for on-demand work is a Warning `<setting>` event, any other drain a
Normal `NodeDraining`; never the work a node was reclaimed for: it may be another account's)
and the once-only rules (an Event's name derives from its effect, so a replay makes no second
one; a pod is told once per process) are here, apart from the provider's order of things
(`nodes.KubernetesNodes`), which only says when.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from lowcostgpu.adapters.kubernetes.client import Kube, already_exists
from lowcostgpu.adapters.kubernetes.names import KubeNames
from lowcostgpu.adapters.kubernetes.objects import drain_event, node_ref, pod_ref
from lowcostgpu.core.nodes import DRAIN_PREEMPTED, NodeState
from lowcostgpu.domain.errors import Conflict
from lowcostgpu.domain.events import iso_utc

DRAINING_REASON: Final = "NodeDraining"  # a drain that is not a reclaim (target lowered…)


class DrainEvents:
    """The drain's Events on one API server; remembers the pods it told (this process)."""

    def __init__(self, kube: Kube, names: KubeNames, clock: Callable[[], float]) -> None:
        self.kube = kube
        self.names = names
        self.clock = clock
        self._warned: set[str] = set()  # pods told of their eviction by this process

    def node_event(self, node: Any, state: NodeState, effect_key: str) -> None:
        reason, why = self._words(state.drain_reason or "")
        # never the work it was reclaimed for: it may be another account's
        note = (
            f"{why}: pods are evicted with their grace, node leaves the cluster in "
            f"{state.grace_period_s} s"
            if state.drain_reason == DRAIN_PREEMPTED
            else f"{why}: pods are evicted, node leaves the cluster in {state.grace_period_s} s"
        )
        post_event(
            self.kube,
            drain_event(
                node_ref(node),
                names=self.names,
                reason=reason,
                note=note,
                key=effect_key,
                at=self.clock(),
                warning=state.drain_reason == DRAIN_PREEMPTED,
            ),
        )

    def pod_event(self, pod: Any, node: Any, reason: str, grace_s: int, deadline: int) -> None:
        """Tell the pod's owner, in the pod's namespace, why it is evicted and by when."""
        uid = pod.metadata.uid
        if uid in self._warned:
            return
        event_reason, why = self._words(reason)
        note = (
            f"node {node.metadata.name} is {why}: this pod is evicted with {grace_s} s to "
            f"finish (SIGTERM now; deleted at {iso_utc(deadline)} if still running)"
        )
        post_event(
            self.kube,
            drain_event(
                pod_ref(pod),
                names=self.names,
                reason=event_reason,
                note=note,
                key=f"evict:{uid}:{node.metadata.uid}",
                at=self.clock(),
                warning=True,
                related=node_ref(node),
            ),
        )
        self._warned.add(uid)

    def _words(self, drain_reason: str) -> tuple[str, str]:
        """A drain's Event reason and why, in words, for the Node's and the pods' Events."""
        if drain_reason == DRAIN_PREEMPTED:
            return self.names.preempted_reason, "reclaimed for on-demand work"
        return DRAINING_REASON, f"drained ({drain_reason})"


def post_event(kube: Kube, event: dict[str, Any]) -> None:
    """Create an Event; one with its name there already (a replayed effect) is fine."""
    try:
        kube.call(
            kube.events.create_namespaced_event,
            event["metadata"]["namespace"],
            event,
            what=f"the {event['reason']} event {event['metadata']['name']}",
        )
    except Conflict as exc:
        if not already_exists(exc):
            raise

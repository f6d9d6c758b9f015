"""Support for the cluster tests (no tests here): a tiny shell applying plans to a node list."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import count

from lowcostgpu.core.cluster_reconcile import reconcile_cluster
from lowcostgpu.core.clusters import (
    ClusterPlan,
    ClusterSpec,
    ClusterState,
    create_cluster,
    new_node,
)
from lowcostgpu.core.drain import Placed, Reclaimed, WorkloadExited
from lowcostgpu.core.effects import EmitEvent
from lowcostgpu.core.node_lifecycle import Leave, node_step
from lowcostgpu.core.nodes import NodeState
from lowcostgpu.core.state import Ticket
from lowcostgpu.domain.capacity import CapacityClass, PoolKey
from lowcostgpu.domain.status import NodeStatus

POOL = PoolKey("eu-west", "a100-sxm4")


def ready(node: NodeState, now: int) -> NodeState:
    """The scheduler placed the node (on a host of its own: the tests here need no fleet)."""
    placed = Placed(f"{node.id}@{now}", f"host-{node.id}", range(node.gpus))
    return node_step(node, placed, now).state


@dataclass
class Sim:
    cluster: ClusterState
    nodes: dict[str, NodeState] = field(default_factory=dict)
    tickets: dict[str, Ticket] = field(default_factory=dict)
    events: list[EmitEvent] = field(default_factory=list)
    ids: Iterator[str] = field(default_factory=lambda: (f"n{i}" for i in count(1)))
    now: int = 1000

    @classmethod
    def start(cls, desired: int, gpus_per_node: int = 8, standard: int = 1) -> Sim:
        spec = ClusterSpec(POOL, gpus_per_node, standard, desired)
        sim = cls(create_cluster("c1", spec, 1000, account_id="acct"))
        for i in range(standard):
            node = new_node(f"s{i}", sim.cluster, CapacityClass.ON_DEMAND, sim.now)
            sim.nodes[node.id] = ready(node, sim.now)
        return sim

    def reconcile(self) -> ClusterPlan:
        plan = reconcile_cluster(
            self.cluster, list(self.nodes.values()), self.now, new_node_ids=self.ids
        )
        self.apply(plan)
        return plan

    def apply(self, plan: ClusterPlan) -> None:
        self.cluster = plan.cluster
        for node in (*plan.new_nodes, *plan.removed):
            self.nodes[node.id] = node
        for ticket in plan.tickets:
            self.tickets[ticket.subject_id] = ticket
        for node_id in plan.dequeued_ids:
            del self.tickets[node_id]
        for drain in plan.drains:
            node = self.nodes[drain.node_id]
            self.nodes[drain.node_id] = node_step(node, Leave(drain.reason), self.now).state
        self.events.extend(plan.events)

    def place(self, limit: int | None = None) -> list[str]:
        """The scheduler places the oldest tickets (by queue place), `limit` of them."""
        order = sorted(self.tickets.values(), key=Ticket.order_key)[:limit]
        for ticket in order:
            node = self.nodes[ticket.subject_id]
            self.nodes[node.id] = ready(node, self.now)
            del self.tickets[ticket.subject_id]
        return [t.subject_id for t in order]

    def preempt(self, node_id: str) -> None:
        self.nodes[node_id] = node_step(self.nodes[node_id], Reclaimed("od"), self.now).state

    def finish_drains(self) -> None:
        for node in list(self.nodes.values()):
            if node.status is NodeStatus.CORDONED:
                self.nodes[node.id] = node_step(node, WorkloadExited(), self.now).state

    def of(self, status: NodeStatus, preemptible: bool = True) -> list[NodeState]:
        return sorted(
            (n for n in self.nodes.values() if n.status is status and n.preemptible is preemptible),
            key=lambda n: n.id,
        )

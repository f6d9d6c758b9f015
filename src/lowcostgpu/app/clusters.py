"""Clusters in the control plane: requests, their records in each decision, node effects.

A cluster request is a decision like a launch (`ControlPlane._decide`): the engine decides on the
state rebuilt from the store (instances, clusters, nodes), the changed clusters and nodes are
written with their expected versions in the same commit as the instances, the outbox and the
events. Ticks reconcile clusters (the engine does it at the end of every input).

Nodes on the local runtime: until the Kubernetes node provider exists, a node is represented by a
placeholder workload on its allocation (`PLACEHOLDER_ARGV`, a `sleep` that SIGTERM ends), so the
drain is real: SIGTERM at T+0, the node removed when the placeholder exits, SIGKILL at the
deadline. `CordonNode` and `RemoveNode` are recorded (done in the outbox) for that provider.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, NoReturn

from lowcostgpu.app.decisions import Decision
from lowcostgpu.core import cluster_engine
from lowcostgpu.core.clusters import ClusterSpec, ClusterState
from lowcostgpu.core.effects import Effect
from lowcostgpu.core.engine import EngineState, EngineStep
from lowcostgpu.core.metering import UsageSpan, node_gpu_span
from lowcostgpu.core.nodes import (
    NodeState,
    allocated_preemptible_gpus,
    convert_node_class,
    pending_preemptible_gpus,
)
from lowcostgpu.domain.capacity import CapacityClass, Host, PoolKey, Timestamp
from lowcostgpu.domain.catalog import Catalog
from lowcostgpu.domain.errors import NotFound
from lowcostgpu.ports.clock import IdSource
from lowcostgpu.ports.runtime import Runtime, WorkloadReport, WorkloadStart
from lowcostgpu.ports.store import (
    ClusterWrite,
    Commit,
    NodeWrite,
    OutboxEntry,
    Store,
    StoredCluster,
    StoredNode,
)

if TYPE_CHECKING:
    from lowcostgpu.app.plane import PlaneConfig

log = logging.getLogger(__name__)
PLACEHOLDER_ARGV = ("sleep", "infinity")
NODE_EFFECTS = frozenset({"AddNode", "CordonNode", "RemoveNode"})


@dataclass(frozen=True, slots=True)
class ClusterRequest:
    """A cluster as a user asks for it (the API's body)."""

    account_id: str
    gpu_type: str
    gpus_per_node: int
    standard_nodes: int = 1
    desired_preemptible_gpus: int = 0
    region: str | None = None
    grace_period_s: int = 300


@dataclass(frozen=True, slots=True)
class ClusterView:
    """A cluster with its live nodes: what `get` shows."""

    cluster: ClusterState
    nodes: tuple[NodeState, ...]

    @property
    def allocated_preemptible_gpus(self) -> int:
        return allocated_preemptible_gpus(self.nodes)

    @property
    def pending_preemptible_gpus(self) -> int:
        return pending_preemptible_gpus(self.nodes)


# --- the records of one decision -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClusterRecords:
    """The live clusters and nodes as loaded for a decision, with their versions."""

    clusters: dict[str, StoredCluster]
    nodes: dict[str, StoredNode]

    @classmethod
    def load(cls, store: Store) -> ClusterRecords:
        return cls(
            {c.state.id: c for c in store.clusters()}, {n.state.id: n for n in store.nodes()}
        )

    def cluster_states(self) -> list[ClusterState]:
        return [c.state for c in self.clusters.values()]

    def node_states(self) -> list[NodeState]:
        return [n.state for n in self.nodes.values()]

    def written(self, commit: Commit, state: EngineState) -> Commit:
        """`commit` plus the clusters and nodes the decision created or changed."""
        clusters = [
            ClusterWrite(c, _version(self.clusters.get(c.id)))
            for c in state.clusters.values()
            if c.id not in self.clusters or self.clusters[c.id].state != c
        ]
        nodes = [
            NodeWrite(n, _version(self.nodes.get(n.id)))
            for n in state.nodes.values()
            if n.id not in self.nodes or self.nodes[n.id].state != n
        ]
        return replace(commit, clusters=clusters, nodes=nodes)


def _version(stored: StoredCluster | StoredNode | None) -> int | None:
    return None if stored is None else stored.version


def absorb_node_reports(
    state: EngineState, reports: Sequence[WorkloadReport], now: Timestamp, config: PlaneConfig
) -> tuple[EngineState, list[Effect]]:
    """A node's placeholder that exited means its pods are gone: the drain can end."""
    by_allocation = {n.allocation_id: n.id for n in state.nodes.values() if n.allocation_id}
    effects: list[Effect] = []
    for report in sorted(reports, key=lambda r: r.allocation_id):
        node_id = by_allocation.get(report.allocation_id)
        if node_id is None or report.phase not in ("exited", "start_failed"):
            continue
        step = cluster_engine.node_exited(state, node_id, now, config.scheduler)
        state, effects = step.state, [*effects, *step.effects]
    return state, effects


def node_allocations(state: EngineState) -> set[str]:
    return {n.allocation_id for n in state.nodes.values() if n.allocation_id}


def node_spans(store: Store, state: EngineState) -> list[UsageSpan]:
    """GPU usage of every node, removed ones too (their last interval may still be open)."""
    latest = {n.state.id: n.state for n in store.nodes(include_removed=True)}
    latest.update(state.nodes)
    return [span for n in latest.values() if (span := node_gpu_span(n)) is not None]


# --- the node effects on the local runtime -------------------------------------------------------


class PlaceholderNodes:
    """Carries out node effects by a placeholder workload per node (see the module docstring)."""

    def __init__(self, argv: Sequence[str] = PLACEHOLDER_ARGV) -> None:
        self.argv = tuple(argv)

    def carry_out(self, entry: OutboxEntry, runtime: Runtime) -> None:
        p = entry.payload
        if entry.kind != "AddNode":
            log.info("%s %s recorded (no node provider on this runtime)", entry.kind, p)
            return
        node_id = str(p["node_id"])
        runtime.start(
            WorkloadStart(
                instance_id=node_id,
                allocation_id=str(p["allocation_id"]),
                host_id=str(p["host_id"]),
                gpu_indices=tuple(int(i) for i in p["gpu_indices"]),
                restart_count=0,
                argv=self.argv,
                env={
                    "LOWCOSTGPU_NODE_ID": node_id,
                    "LOWCOSTGPU_CLUSTER_ID": str(p["cluster_id"]),
                    "LOWCOSTGPU_COMPUTE_CLASS": str(p["compute_class"]),
                },
            )
        )


# --- the requests (a mixin of ControlPlane) -------------------------------------------------------


class ClusterRequests:
    """`ControlPlane`'s cluster methods. `account_id` None: any account (the operator's view);
    a cluster of another account is NotFound, as if it did not exist."""

    store: Store
    ids: IdSource
    hosts: list[Host]
    catalog: Catalog
    config: PlaneConfig

    def _decide(self, decide: Callable[[EngineState, Timestamp], Decision]) -> EngineStep:
        raise NotImplementedError  # pragma: no cover (ControlPlane's)

    def create_cluster(self, request: ClusterRequest) -> ClusterView:
        cluster_id = self.ids.new_id("c")
        spec = ClusterSpec(
            pool=self._pool(request.gpu_type, request.region),
            gpus_per_node=request.gpus_per_node,
            standard_nodes=request.standard_nodes,
            desired_preemptible_gpus=request.desired_preemptible_gpus,
            grace_period_s=request.grace_period_s,
        )

        def decide(state: EngineState, now: Timestamp) -> Decision:
            step = cluster_engine.create_cluster(
                state, cluster_id, spec, now, self.config.scheduler, account_id=request.account_id
            )
            return Decision(step)

        self._decide(decide)
        return self.get_cluster(cluster_id)

    def update_cluster_target(
        self, cluster_id: str, desired_preemptible_gpus: int, account_id: str | None = None
    ) -> ClusterView:
        self.get_cluster(cluster_id, account_id)

        def decide(state: EngineState, now: Timestamp) -> Decision:
            return Decision(
                cluster_engine.update_cluster_target(
                    state, cluster_id, desired_preemptible_gpus, now, self.config.scheduler
                )
            )

        self._decide(decide)
        return self.get_cluster(cluster_id)

    def delete_cluster(self, cluster_id: str, account_id: str | None = None) -> ClusterView:
        self.get_cluster(cluster_id, account_id)

        def decide(state: EngineState, now: Timestamp) -> Decision:
            return Decision(
                cluster_engine.delete_cluster(state, cluster_id, now, self.config.scheduler)
            )

        self._decide(decide)
        return self.get_cluster(cluster_id)

    def get_cluster(self, cluster_id: str, account_id: str | None = None) -> ClusterView:
        cluster = self.store.cluster(cluster_id).state
        if account_id is not None and cluster.account_id != account_id:
            raise NotFound(f"no cluster {cluster_id}", hint="list clusters to see their ids")
        nodes = tuple(n.state for n in self.store.nodes(cluster_id=cluster_id))
        return ClusterView(cluster, nodes)

    def list_clusters(self, account_id: str | None = None) -> list[ClusterView]:
        nodes: dict[str, list[NodeState]] = {}
        for n in self.store.nodes():
            nodes.setdefault(n.state.cluster_id, []).append(n.state)
        return [
            ClusterView(c.state, tuple(nodes.get(c.state.id, ())))
            for c in self.store.clusters(account_id=account_id)
        ]

    def convert_node(
        self, cluster_id: str, node_id: str, to: str, account_id: str | None = None
    ) -> NoReturn:
        """Always refused (409): nodes never change class in place; the error says what to do."""
        view = self.get_cluster(cluster_id, account_id)
        node = next((n for n in view.nodes if n.id == node_id), None)
        if node is None:
            raise NotFound(f"no node {node_id} in cluster {cluster_id}")
        convert_node_class(node, CapacityClass.parse(to))

    def _pool(self, gpu_type: str, region: str | None) -> PoolKey:
        self.catalog.gpu(gpu_type)  # NotFound lists the known types
        regions = sorted({h.pool.region for h in self.hosts if h.pool.gpu_type == gpu_type})
        if not regions:
            raise NotFound(
                f"this fleet has no {gpu_type} GPUs",
                hint="see `lowcostgpu fleet` for the GPU types and regions it has",
            )
        if region is None:
            return PoolKey(regions[0], gpu_type)
        if region not in regions:
            raise NotFound(
                f"no {gpu_type} GPUs in region {region}",
                hint=f"{gpu_type} is available in: {', '.join(regions)}",
            )
        return PoolKey(region, gpu_type)

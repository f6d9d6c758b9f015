"""Clusters in the control plane: the cluster requests (`ClusterService`) and their views.

A cluster request is a decision like a launch: `ClusterService` is given the plane's `decide`
(`app.decider.Decider.decide`), so the engine decides on the live state in memory (`app.live`:
instances, clusters, nodes), the changed clusters and nodes are written with their expected
versions in the same commit as the instances, the outbox and the events. Ticks reconcile clusters
(the engine does it at the end of every input). The node effects are carried out by a node
provider (`ports.nodes`; on the local runtime `adapters.local.PlaceholderNodes`).

This module does not import `app.plane` (an import-linter contract): the plane builds the
service and hands it what it needs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import NoReturn

from lowcostgpu.app.decisions import Decision
from lowcostgpu.app.launch import FleetPools
from lowcostgpu.core import cluster_engine
from lowcostgpu.core.clusters import ClusterSpec, ClusterState
from lowcostgpu.core.engine import EngineState, EngineStep
from lowcostgpu.core.nodes import (
    NodeState,
    allocated_preemptible_gpus,
    convert_node_class,
    pending_preemptible_gpus,
)
from lowcostgpu.core.risk import NO_RISK, RiskState, node_risk_since
from lowcostgpu.core.scheduler import SchedulerConfig
from lowcostgpu.domain.capacity import CapacityClass, PoolKey, Timestamp
from lowcostgpu.domain.catalog import Catalog
from lowcostgpu.domain.errors import InvalidRequest, NotFound
from lowcostgpu.ports.clock import IdSource
from lowcostgpu.ports.store import Store

Decide = Callable[[Callable[[EngineState, Timestamp], Decision]], EngineStep]
"""The plane's way to decide: on its live state, written, kept, the effects carried out."""


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
    risk_since: Mapping[str, Timestamp] = field(default_factory=dict)  # node id → warned at

    @property
    def allocated_preemptible_gpus(self) -> int:
        return allocated_preemptible_gpus(self.nodes)

    @property
    def pending_preemptible_gpus(self) -> int:
        return pending_preemptible_gpus(self.nodes)


class ClusterService:
    """The cluster requests (`plane.clusters`). `account_id` None: any account (the operator's
    view); a cluster of another account is NotFound, as if it did not exist.

    `scheduler`: the scheduler's config now (the plane's config changes at run time); `decide`:
    the plane's decision (`app.decider.Decider.decide`)."""

    def __init__(
        self,
        *,
        store: Store,
        ids: IdSource,
        pools: FleetPools,
        catalog: Catalog,
        scheduler: Callable[[], SchedulerConfig],
        decide: Decide,
        whole_host_nodes: Callable[[], bool] = lambda: False,
        risk: Callable[[], RiskState] = lambda: NO_RISK,
    ) -> None:
        self.store = store
        self._risk = risk
        self._whole_host_nodes = whole_host_nodes
        self.ids = ids
        self.pools = pools
        self.catalog = catalog
        self._scheduler = scheduler
        self._decide = decide

    def create_cluster(self, request: ClusterRequest) -> ClusterView:
        pool = self._pool(request.gpu_type, request.region)
        if self._whole_host_nodes():
            self._check_whole_hosts(pool, request.gpus_per_node)
        cluster_id = self.ids.new_id("c")
        spec = ClusterSpec(
            pool=pool,
            gpus_per_node=request.gpus_per_node,
            standard_nodes=request.standard_nodes,
            desired_preemptible_gpus=request.desired_preemptible_gpus,
            grace_period_s=request.grace_period_s,
        )

        def decide(state: EngineState, now: Timestamp) -> Decision:
            step = cluster_engine.create_cluster(
                state, cluster_id, spec, now, self._scheduler(), account_id=request.account_id
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
                    state, cluster_id, desired_preemptible_gpus, now, self._scheduler()
                )
            )

        self._decide(decide)
        return self.get_cluster(cluster_id)

    def delete_cluster(self, cluster_id: str, account_id: str | None = None) -> ClusterView:
        self.get_cluster(cluster_id, account_id)

        def decide(state: EngineState, now: Timestamp) -> Decision:
            return Decision(
                cluster_engine.delete_cluster(state, cluster_id, now, self._scheduler())
            )

        self._decide(decide)
        return self.get_cluster(cluster_id)

    def get_cluster(self, cluster_id: str, account_id: str | None = None) -> ClusterView:
        cluster = self.store.cluster(cluster_id).state
        if account_id is not None and cluster.account_id != account_id:
            raise NotFound(f"no cluster {cluster_id}", hint="list clusters to see their ids")
        return self._view(cluster)

    def list_clusters(self, account_id: str | None = None) -> list[ClusterView]:
        """The account's clusters (every one for the operator) with their live nodes, read by
        cluster: O(the account's clusters and their nodes), not every node of the fleet."""
        return [self._view(c.state) for c in self.store.clusters(account_id=account_id)]

    def _view(self, cluster: ClusterState) -> ClusterView:
        """The cluster with its live nodes and, for those among the next victims of on-demand
        reclaims, when they were warned (`core.risk`, from the live snapshot)."""
        nodes = tuple(n.state for n in self.store.nodes(cluster_id=cluster.id))
        risk = self._risk()
        since = {n.id: at for n in nodes if (at := node_risk_since(risk, n)) is not None}
        return ClusterView(cluster, nodes, since)

    def convert_node(
        self, cluster_id: str, node_id: str, to: str, account_id: str | None = None
    ) -> NoReturn:
        """Always refused (409): nodes never change class in place; the error says what to do."""
        view = self.get_cluster(cluster_id, account_id)
        node = next((n for n in view.nodes if n.id == node_id), None)
        if node is None:
            raise NotFound(f"no node {node_id} in cluster {cluster_id}")
        convert_node_class(node, CapacityClass.parse(to))

    def _check_whole_hosts(self, pool: PoolKey, gpus_per_node: int) -> None:
        """On a runtime whose nodes are whole hosts (Slurm, Kubernetes), a node must take every
        GPU of whichever host the scheduler gives it. The scheduler places a node on any host
        with that many free GPUs, so only the pool's largest host size guarantees it: a 4-GPU
        node in a pool of 4- and 8-GPU hosts could land on half of an 8-GPU host."""
        sizes = self.pools.host_sizes(pool)
        if not sizes or gpus_per_node != sizes[-1]:
            listed = ", ".join(str(s) for s in sizes)
            raise InvalidRequest(
                f"on this runtime a cluster node is a whole host: gpus_per_node must be the GPU "
                f"count of the largest {pool.gpu_type} host in {pool.region} (hosts of "
                f"{listed}), got {gpus_per_node!r}",
                hint=f"ask for gpus_per_node={sizes[-1]}" if sizes else None,
            )

    def _pool(self, gpu_type: str, region: str | None) -> PoolKey:
        canonical = self.catalog.resolve_gpu(gpu_type).name  # `a100` → a100-sxm4, or an error
        return self.pools.pool(canonical, region)

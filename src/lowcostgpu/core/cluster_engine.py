"""Cluster requests through the engine: create, change the target, delete, node reports.

Each is one pure input like `engine.launch`: it returns an `EngineStep` whose state holds the
cluster and its nodes next to the instances, on the same fleet. Standard nodes are on-demand
requests answered synchronously: all of them are placed (possibly by reclaiming preemptible work,
preemptible nodes of other clusters included) or the creation is refused with
`InsufficientCapacity` and nothing changes. Preemptible nodes are queued by the reconcile that
ends every input (`Work.schedule`).

Every size a customer asks for is bounded by what the cluster's pool could ever hold
(`check_sizes`): the nodes of its size that fit the pool's hosts. A target beyond that could never
be met, and each node asked for is work and memory: an unbounded number would let one request
stop the control plane for everyone.
"""

from __future__ import annotations

from dataclasses import replace

from lowcostgpu.core import cluster_reconcile, clusters
from lowcostgpu.core.clusters import ClusterSpec, ClusterState, fresh_node_ids, new_node
from lowcostgpu.core.drain import WorkloadExited
from lowcostgpu.core.engine import EngineState, EngineStep, Work
from lowcostgpu.core.node_lifecycle import NodeEvent
from lowcostgpu.core.scheduler import DEFAULT_CONFIG, SchedulerConfig, place_on_demand
from lowcostgpu.domain.capacity import CapacityClass, Timestamp
from lowcostgpu.domain.errors import Conflict, InvalidRequest, NotFound

_STANDARD = CapacityClass.ON_DEMAND


def create_cluster(
    state: EngineState,
    cluster_id: str,
    spec: ClusterSpec,
    now: Timestamp,
    config: SchedulerConfig = DEFAULT_CONFIG,
    *,
    account_id: str = "",
) -> EngineStep:
    """A new cluster: its standard nodes placed now (or `InsufficientCapacity`), its preemptible
    nodes queued toward the target."""
    if cluster_id in state.clusters:
        raise Conflict(f"cluster {cluster_id} already exists")
    cluster = clusters.create_cluster(cluster_id, spec, now, account_id=account_id)
    _check_pool(state, cluster)
    check_sizes(state, cluster)
    work = Work(state)
    requests = clusters.standard_node_requests(cluster, fresh_node_ids(cluster))
    for request in requests:
        plan = place_on_demand(work.fleet, request, now, config)  # raises when impossible
        work.nodes[request.subject_id] = new_node(request.subject_id, cluster, _STANDARD, now)
        work.carry_out(plan, now)
    work.clusters[cluster_id] = replace(cluster, node_serial=len(requests))
    work.schedule(now, config)
    return work.done()


def update_cluster_target(
    state: EngineState,
    cluster_id: str,
    desired_preemptible_gpus: int,
    now: Timestamp,
    config: SchedulerConfig = DEFAULT_CONFIG,
) -> EngineStep:
    """Change the preemptible target; the reconcile scales toward it at once."""
    old = state.cluster(cluster_id)
    cluster = clusters.update_target(old, desired_preemptible_gpus, now=now)
    check_sizes(state, cluster)
    work = Work(state)
    work.clusters[cluster_id] = cluster
    changed = clusters.target_changed(old, cluster, now)
    if changed is not None:
        work.effects.append(changed)
    work.schedule(now, config)
    return work.done()


def delete_cluster(
    state: EngineState,
    cluster_id: str,
    now: Timestamp,
    config: SchedulerConfig = DEFAULT_CONFIG,
) -> EngineStep:
    """Drain every node (standard ones too); the cluster is DELETED when the last one is gone."""
    cluster = state.cluster(cluster_id)
    work = Work(state)
    mine = work.nodes_of(cluster_id)
    work.apply_cluster_plan(cluster_reconcile.delete_cluster(cluster, mine, now), now)
    work.schedule(now, config)
    return work.done()


def report_node(
    state: EngineState,
    node_id: str,
    event: NodeEvent,
    now: Timestamp,
    config: SchedulerConfig = DEFAULT_CONFIG,
) -> EngineStep:
    """A report about a node (its pods are gone: `WorkloadExited`), then a queue pass."""
    if node_id not in state.nodes:
        raise NotFound(f"no node {node_id}")
    work = Work(state)
    if node_id in work.nodes:  # a removed node takes no more reports
        work.advance_node(node_id, event, now)
    work.schedule(now, config)
    return work.done()


def node_exited(
    state: EngineState, node_id: str, now: Timestamp, config: SchedulerConfig = DEFAULT_CONFIG
) -> EngineStep:
    """The node's workload (in the local runtime, its placeholder process) has exited."""
    return report_node(state, node_id, WorkloadExited(), now, config)


def _check_pool(state: EngineState, cluster: ClusterState) -> None:
    largest = state.fleet.largest_host_gpus(cluster.pool)
    if not largest:
        raise NotFound(
            f"no {cluster.pool.gpu_type} capacity in region {cluster.pool.region}",
            hint="see `lowcostgpu fleet` for the pools this fleet has",
        )
    if cluster.gpus_per_node > largest:
        raise InvalidRequest(
            f"gpus_per_node={cluster.gpus_per_node}: a node must fit one host, and the largest "
            f"{cluster.pool.gpu_type} host in {cluster.pool.region} has {largest} GPUs",
            hint=f"ask for 1 to {largest} GPUs per node",
        )


def pool_node_slots(state: EngineState, cluster: ClusterState) -> int:
    """How many nodes of the cluster's size its pool could ever hold: each host's GPUs in whole
    nodes. O(the pool's hosts), once per cluster request."""
    size = cluster.gpus_per_node
    return sum(h.host.gpu_count // size for h in state.fleet.hosts_in(cluster.pool))


def check_sizes(state: EngineState, cluster: ClusterState) -> None:
    """Refuse standard nodes or a preemptible target beyond what the pool could ever hold,
    saying the maximum: standard nodes at most the pool's node slots, the preemptible target at
    most the slots left beside them (in GPUs)."""
    slots, size = pool_node_slots(state, cluster), cluster.gpus_per_node
    where = f"the {cluster.pool.gpu_type} pool in {cluster.pool.region}"
    standard = cluster.spec.standard_nodes
    if standard > slots:
        raise InvalidRequest(
            f"standard_nodes={standard}: {where} can hold at most {slots} node(s) of {size} GPUs",
            hint=f"ask for 1 to {slots} standard nodes",
            maximum=slots,
        )
    most = (slots - standard) * size
    desired = cluster.desired_preemptible_gpus
    if desired > most:
        raise InvalidRequest(
            f"desired_preemptible_gpus={desired}: beside {standard} standard node(s), {where} can "
            f"hold at most {most} preemptible GPUs in nodes of {size}",
            hint=f"ask for 0 to {most} GPUs, a multiple of {size}",
            maximum=most,
        )

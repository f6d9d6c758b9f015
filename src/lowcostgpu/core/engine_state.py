"""The engine's state, its indexes, and what one input returns (`EngineStep`).

The server keeps one `EngineState` in memory across decisions (DESIGN.md section 2), so a
decision must cost O(what it touches), not O(live objects). The maps are persistent
(`immutables.Map`): a new state shares all but the changed entries with the old one. What the
engine would otherwise find by scanning every record is kept in small persistent indexes
(`StateIndex`): the open deadlines (for `tick` and `next_wake`) and the nodes of each cluster
(for the reconcile). `core.work.Work` keeps them in line on every write; `build_index` derives
them from scratch (O(n)) when a state is built from records.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from immutables import Map

from lowcostgpu.core.clusters import ClusterState
from lowcostgpu.core.effects import Effect
from lowcostgpu.core.holds import OnDemandHold
from lowcostgpu.core.instance_state import DRAINING, InstanceState
from lowcostgpu.core.nodes import NodeState
from lowcostgpu.core.overlay import as_map
from lowcostgpu.core.risk import NO_RISK, RiskState
from lowcostgpu.core.snapshot import FleetSnapshot
from lowcostgpu.core.sorted_chunks import SortedChunks
from lowcostgpu.core.state import SurvivorHold
from lowcostgpu.domain.capacity import PoolKey, Timestamp
from lowcostgpu.domain.errors import NotFound
from lowcostgpu.domain.status import ClusterStatus, NodeStatus


def instance_deadline(inst: InstanceState) -> Timestamp | None:
    """The deadline `tick` must act on: a draining instance's SIGKILL time, or the end of a
    requeued gang's hold of its surviving hosts. (A finished drain keeps its `deadline` field;
    it is history, not a timer.)"""
    if inst.status in DRAINING:
        return inst.deadline
    return inst.held_until if inst.held else None


def survivor_hold(inst: InstanceState) -> SurvivorHold | None:
    """The hold a requeued gang has on its surviving hosts, while it has one."""
    if not inst.held or inst.held_until is None:
        return None
    return SurvivorHold(inst.pool, inst.held_hosts, inst.held_until)


def node_deadline(node: NodeState) -> Timestamp | None:
    """A cordoned node's deadline: when its pods are killed and it is removed."""
    return node.deadline if node.status is NodeStatus.CORDONED else None


@dataclass(frozen=True, slots=True)
class StateIndex:
    """What the engine looks up instead of scanning, for the maps `instances` and `nodes`.

    `instance_deadlines`: id → deadline of every draining instance with a deadline;
    `node_deadlines`: id → deadline of every cordoned node with one; `cluster_nodes`: cluster id
    → the ids of its nodes in `nodes` (removed ones too, until `forget_history`: the reconcile
    reads them to replace reclaimed nodes). An index describes the very map objects it names; an
    `EngineState` given other maps rebuilds it.
    """

    instances: Mapping[str, InstanceState] = field(compare=False, repr=False)
    nodes: Mapping[str, NodeState] = field(compare=False, repr=False)
    instance_deadlines: Map[str, Timestamp] = field(default_factory=Map)
    node_deadlines: Map[str, Timestamp] = field(default_factory=Map)
    cluster_nodes: Map[str, frozenset[str]] = field(default_factory=Map)
    # The instance deadlines again as sorted (deadline, id): `next_wake` reads the first one
    # instead of taking the least of every draining instance's (thousands in a reclaim storm).
    instance_deadline_order: SortedChunks[tuple[Timestamp, str]] = field(
        default_factory=SortedChunks
    )
    # Requeued gangs holding their surviving hosts, by instance id (`survivor_hold`): the queue
    # pass keeps those hosts for them. Few (a hold lasts minutes), so a pass reads them all.
    survivor_holds: Map[str, SurvivorHold] = field(default_factory=Map)

    def describes(
        self, instances: Mapping[str, InstanceState], nodes: Mapping[str, NodeState]
    ) -> bool:
        return self.instances is instances and self.nodes is nodes


def build_index(
    instances: Mapping[str, InstanceState], nodes: Mapping[str, NodeState]
) -> StateIndex:
    """The index of `instances` and `nodes`, from scratch: O(instances + nodes)."""
    deadlines = {i.id: d for i in instances.values() if (d := instance_deadline(i)) is not None}
    holds = {i: h for i in deadlines if (h := survivor_hold(instances[i])) is not None}
    node_deadlines = {n.id: d for n in nodes.values() if (d := node_deadline(n)) is not None}
    by_cluster: dict[str, set[str]] = {}
    for n in nodes.values():
        by_cluster.setdefault(n.cluster_id, set()).add(n.id)
    return StateIndex(
        instances,
        nodes,
        Map(deadlines),
        Map(node_deadlines),
        Map({c: frozenset(ids) for c, ids in by_cluster.items()}),
        SortedChunks.of((d, i) for i, d in deadlines.items()),
        Map(holds),
    )


_UNBUILT = StateIndex(Map(), Map())


@dataclass(frozen=True, slots=True)
class EngineState:
    """The fleet and what holds or waits for it. `nodes` and `clusters` keep removed nodes and
    deleted clusters (so the shell writes them); `state_from_instances` leaves them out, and a
    long-running pure driver may drop them with `forget_history`.

    The maps may be given as any mapping (a dict, a `MappingProxyType`): they are kept as
    `immutables.Map`, converted once (O(n)), and the index is rebuilt (O(n)) unless `index`
    describes exactly these maps. The engine's own steps pass both, so they pay neither. Note
    that a `Map` does not compare equal to a dict: compare `dict(state.holds) == {}` or use `len`.
    """

    fleet: FleetSnapshot
    instances: Mapping[str, InstanceState] = field(default_factory=Map)
    clusters: Mapping[str, ClusterState] = field(default_factory=Map)
    nodes: Mapping[str, NodeState] = field(default_factory=Map)
    # On-demand holds (`core.holds`): soft, so not stored; the shell keeps them between calls.
    holds: Mapping[PoolKey, OnDemandHold] = field(default_factory=Map)
    index: StateIndex = field(default=_UNBUILT, compare=False, repr=False)
    # Preemption risk (`core.risk`): recent on-demand arrivals and the instances warned, per
    # pool. Soft, as holds: not stored, and a restart forgets it (the next arrivals rebuild it).
    risk: RiskState = field(default=NO_RISK, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not (
            type(self.instances) is Map
            and type(self.nodes) is Map
            and type(self.clusters) is Map
            and type(self.holds) is Map
        ):  # given as plain mappings: O(n), once
            for name in ("instances", "clusters", "nodes", "holds"):
                object.__setattr__(self, name, as_map(getattr(self, name)))
        if not self.index.describes(self.instances, self.nodes):
            object.__setattr__(self, "index", build_index(self.instances, self.nodes))

    def instance(self, instance_id: str) -> InstanceState:
        try:
            return self.instances[instance_id]
        except KeyError:
            raise NotFound(f"no instance {instance_id}") from None

    def cluster(self, cluster_id: str) -> ClusterState:
        found = self.clusters.get(cluster_id)
        if found is None or found.status is ClusterStatus.DELETED:
            raise NotFound(f"no cluster {cluster_id}", hint="list clusters to see their ids")
        return found

    def node(self, node_id: str) -> NodeState:
        try:
            return self.nodes[node_id]
        except KeyError:
            raise NotFound(f"no node {node_id}") from None


@dataclass(frozen=True, slots=True)
class Touched:
    """The ids whose record one step created, changed or removed: what the shell must write."""

    instances: frozenset[str] = frozenset()
    nodes: frozenset[str] = frozenset()
    clusters: frozenset[str] = frozenset()

    def __bool__(self) -> bool:
        return bool(self.instances or self.nodes or self.clusters)

    def __or__(self, other: Touched) -> Touched:
        """What either of two steps touched (steps taken one after the other)."""
        return Touched(
            self.instances | other.instances,
            self.nodes | other.nodes,
            self.clusters | other.clusters,
        )


NOTHING = Touched()


@dataclass(frozen=True, slots=True)
class EngineStep:
    """The new state, the effects in the order they must be carried out, the earliest time the
    shell must call `tick` again, and the ids this step changed (`touched`)."""

    state: EngineState
    effects: tuple[Effect, ...] = ()
    wake_at: Timestamp | None = None
    touched: Touched = NOTHING


def next_wake(state: EngineState) -> Timestamp | None:
    """The earliest grace deadline still open, the end of a hold (its GPUs go back to the
    queue then), or when a risk episode's oldest arrival leaves its window (the episode may end
    then): when `tick` must run at the latest. O(cordoned nodes + holds + pools at risk)."""
    index = state.index
    firsts = []
    if index.instance_deadline_order:
        firsts.append(index.instance_deadline_order.chunks[0][0][0])
    if index.node_deadlines:
        firsts.append(min(index.node_deadlines.values()))
    if state.holds:
        firsts.append(min(hold.until for hold in state.holds.values()))
    if state.risk.pools and (risk_at := state.risk.wake_at()) is not None:
        firsts.append(risk_at)
    return min(firsts, default=None)

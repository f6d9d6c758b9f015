"""The state's indexes as one input changes them: drafts made on first use, folded at the end.

`core.work.Work` drafts the engine state's maps (`core.overlay.Draft`), and every write of an
instance or a node goes through the draft's watch, which keeps the indexes of
`engine_state.StateIndex` (deadlines, their (deadline, id) order, cluster members, survivor
holds) in line. The watch is a method of this object, not of the `Work`: a draft that held a
method of the work that holds the draft would make a reference cycle, and every input's work,
with the drafts, effects and states it reaches, would then wait for the cyclic garbage collector
instead of being freed when the step returns (measured in the simulator: about 8 KB of such
garbage per event, and the collector's passes over it a quarter of the run's time).
"""

from __future__ import annotations

from itertools import takewhile

from immutables import Map

from lowcostgpu.core.engine_state import (
    StateIndex,
    instance_deadline,
    node_deadline,
    survivor_hold,
)
from lowcostgpu.core.instance_state import InstanceState
from lowcostgpu.core.nodes import NodeState
from lowcostgpu.core.overlay import Draft, K, V
from lowcostgpu.core.sorted_chunks import SortedChunks
from lowcostgpu.core.state import SurvivorHold
from lowcostgpu.domain.capacity import PoolKey, Timestamp


class IndexDrafts:
    """The indexes of one input's work; each draft is made on first use (most inputs touch no
    deadline and no cluster)."""

    def __init__(self, index: StateIndex) -> None:
        self.base = index
        self._instance_deadlines: Draft[str, Timestamp] | None = None
        self._node_deadlines: Draft[str, Timestamp] | None = None
        self._cluster_nodes: Draft[str, frozenset[str]] | None = None
        self._deadline_order: SortedChunks[tuple[Timestamp, str]] | None = None
        self._survivor_holds: Draft[str, SurvivorHold] | None = None

    @property
    def instance_deadlines(self) -> Draft[str, Timestamp]:
        if self._instance_deadlines is None:
            self._instance_deadlines = Draft(self.base.instance_deadlines)
        return self._instance_deadlines

    @property
    def node_deadlines(self) -> Draft[str, Timestamp]:
        if self._node_deadlines is None:
            self._node_deadlines = Draft(self.base.node_deadlines)
        return self._node_deadlines

    @property
    def cluster_nodes(self) -> Draft[str, frozenset[str]]:
        if self._cluster_nodes is None:
            self._cluster_nodes = Draft(self.base.cluster_nodes)
        return self._cluster_nodes

    @property
    def survivor_holds(self) -> Draft[str, SurvivorHold]:
        if self._survivor_holds is None:
            self._survivor_holds = Draft(self.base.survivor_holds)
        return self._survivor_holds

    def instances_due(self, now: Timestamp) -> list[str]:
        """The instances whose grace deadline has come, by id: the front of the (deadline, id)
        order as this work has it. Cost: O(due · log due), not O(draining)."""
        order = self._deadline_order
        if order is None:
            order = self.base.instance_deadline_order
        return sorted(i for _, i in takewhile(lambda entry: entry[0] <= now, order))

    def live_survivor_holds(self, now: Timestamp) -> dict[PoolKey, dict[str, SurvivorHold]]:
        """The survivor holds in force, by pool: O(holds), few."""
        drafted = self._survivor_holds
        source = drafted if drafted is not None else self.base.survivor_holds
        by_pool: dict[PoolKey, dict[str, SurvivorHold]] = {}
        for instance_id, hold in source.items():
            if hold.until > now:
                by_pool.setdefault(hold.pool, {})[instance_id] = hold
        return by_pool

    def instance_written(self, instance_id: str, inst: InstanceState | None) -> None:
        """The instances draft's watch: its survivor hold and its deadline follow the write."""
        hold = None if inst is None else survivor_hold(inst)
        holds = self._survivor_holds
        known = instance_id in (self.base.survivor_holds if holds is None else holds)
        if hold is not None or known:  # most writes: neither, and no draft is made
            if hold is None:
                del self.survivor_holds[instance_id]
            elif self.survivor_holds.get(instance_id) != hold:
                self.survivor_holds[instance_id] = hold
        deadline = None if inst is None else instance_deadline(inst)
        drafted = self._instance_deadlines
        if deadline is None and drafted is None and instance_id not in self.base.instance_deadlines:
            return  # no deadline before or after: nothing to draft
        old = self.instance_deadlines.get(instance_id)
        if old != deadline:  # the sorted copy follows the map
            order = self._deadline_order
            if order is None:
                order = self.base.instance_deadline_order
            if old is not None:
                order = order.removed((old, instance_id))
            if deadline is not None:
                order = order.inserted((deadline, instance_id))
            self._deadline_order = order
        _keep(self.instance_deadlines, instance_id, deadline)

    def node_written(self, node_id: str, node: NodeState | None) -> None:
        """The nodes draft's watch: its deadline and its cluster's members follow the write."""
        deadline = None if node is None else node_deadline(node)
        if (
            deadline is not None
            or self._node_deadlines is not None
            or (node_id in self.base.node_deadlines)
        ):
            _keep(self.node_deadlines, node_id, deadline)
        if node is not None:
            ids = self.cluster_nodes.get(node.cluster_id, frozenset())
            if node_id not in ids:  # a node never changes cluster: only new ones are added
                self.cluster_nodes[node.cluster_id] = ids | {node_id}

    def finish(self, instances: Map[str, InstanceState], nodes: Map[str, NodeState]) -> StateIndex:
        """The index of the next state's `instances` and `nodes`: O(changes · log n)."""
        base = self.base
        order = self._deadline_order
        return StateIndex(
            instances,
            nodes,
            _finished(self._instance_deadlines, base.instance_deadlines),
            _finished(self._node_deadlines, base.node_deadlines),
            _finished(self._cluster_nodes, base.cluster_nodes),
            base.instance_deadline_order if order is None else order,
            _finished(self._survivor_holds, base.survivor_holds),
        )


def _finished(draft: Draft[K, V] | None, base: Map[K, V]) -> Map[K, V]:
    return base if draft is None else draft.finish()


def _keep(index: Draft[str, Timestamp], key: str, value: Timestamp | None) -> None:
    """Set or clear one index entry, writing only when it changes."""
    if value is None:
        if key in index:
            del index[key]
    elif index.get(key) != value:
        index[key] = value

"""The leader's live state: what the next decision is taken on, kept in memory between decisions.

The server has one decider (the store's lead lock), so the leader holds the truth in memory and
uses the store as its journal. `LiveState.load` reads the *live* rows once — instances that are
queued, hold GPUs or are draining (`Store.live_instances`), clusters that are not deleted, nodes
that are not removed — with their versions, and rebuilds the fleet from them (the only O(live)
step, at a takeover). A decision runs on `state`; `commit_for` turns what it produced into one
store commit that writes only the ids the step touched, at the versions kept here; after that
commit succeeds, `committed` keeps the step's state and the written versions, and finished
instances, removed nodes and deleted clusters leave: history costs nothing per decision.

A `StaleWrite` means the memory is wrong about the store (another writer): the caller drops this
object and loads a new one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TypeVar

from lowcostgpu.app.decisions import Decision, commit_of, version_after
from lowcostgpu.core import engine
from lowcostgpu.core.engine import EngineState
from lowcostgpu.core.lifecycle import InstanceState
from lowcostgpu.domain.capacity import Host, Timestamp
from lowcostgpu.domain.status import LIVE_INSTANCE_STATUSES, ClusterStatus, NodeStatus
from lowcostgpu.ports.store import Store
from lowcostgpu.ports.store_records import ClusterWrite, Commit, NodeWrite, StoredInstance

V = TypeVar("V")


@dataclass
class LiveState:
    """The engine state of the live objects and the version of each as stored."""

    state: EngineState
    instance_versions: dict[str, int] = field(default_factory=dict)
    cluster_versions: dict[str, int] = field(default_factory=dict)
    node_versions: dict[str, int] = field(default_factory=dict)

    @classmethod
    def load(cls, store: Store, hosts: Iterable[Host]) -> LiveState:
        """Read the live rows once. Cost: O(live instances + clusters + nodes), not history."""
        stored = store.live_instances()
        clusters = store.clusters()
        nodes = store.nodes()
        state = engine.state_from_instances(
            hosts,
            [s.state for s in stored],
            clusters=[c.state for c in clusters],
            nodes=[n.state for n in nodes],
        )
        return cls(
            state,
            {s.state.id: s.version for s in stored},
            {c.state.id: c.version for c in clusters},
            {n.state.id: n.version for n in nodes},
        )

    def adopt(self, stored: StoredInstance) -> None:
        """Bring one instance that is not live (stopped, interrupted, finished) back in, so that
        a request about it (a resume, a delete) decides on it. It holds no GPUs and no ticket;
        unless the decision makes it live again, it leaves at once (`let_go`)."""
        if stored.state.id in self.state.instances:
            return
        self.state = engine.adopt(self.state, stored.state)
        self.instance_versions[stored.state.id] = stored.version

    def let_go(self, instance_id: str) -> None:
        """An instance that is not live leaves the live state (a refused request adopted it)."""
        inst = self.state.instances.get(instance_id)
        if inst is not None and inst.status not in LIVE_INSTANCE_STATUSES:
            self.state = engine.forget_instances(self.state, [instance_id])
            self.instance_versions.pop(instance_id, None)

    def commit_for(self, decision: Decision, now: Timestamp) -> Commit:
        """The store commit of a decision: only what its step touched, at the kept versions."""
        step = decision.step
        commit = commit_of(decision, self.state.instances, self.instance_versions, now)
        clusters = [
            ClusterWrite(c, self.cluster_versions.get(c.id))
            for c in _changed(self.state.clusters, step.state.clusters, step.touched.clusters)
        ]
        nodes = [
            NodeWrite(n, self.node_versions.get(n.id))
            for n in _changed(self.state.nodes, step.state.nodes, step.touched.nodes)
        ]
        return replace(commit, clusters=clusters, nodes=nodes)

    def committed(self, decision: Decision, commit: Commit) -> list[InstanceState]:
        """Keep the decision's state and the versions just written; let what finished leave.

        Returns the instances that left the live state (metering takes their last spans)."""
        self.state = decision.step.state
        for w in commit.instances:
            self.instance_versions[w.state.id] = version_after(w.expected_version)
        for c in commit.clusters:
            self.cluster_versions[c.state.id] = version_after(c.expected_version)
        for n in commit.nodes:
            self.node_versions[n.state.id] = version_after(n.expected_version)
        gone = [w.state for w in commit.instances if w.state.status not in LIVE_INSTANCE_STATUSES]
        if gone:
            self.state = engine.forget_instances(self.state, [i.id for i in gone])
            for inst in gone:
                self.instance_versions.pop(inst.id, None)
        self._forget_history(commit)
        return gone

    def _forget_history(self, commit: Commit) -> None:
        removed = [n.state.id for n in commit.nodes if n.state.status is NodeStatus.REMOVED]
        deleted = [c.state.id for c in commit.clusters if c.state.status is ClusterStatus.DELETED]
        if not removed and not deleted:
            return
        self.state = engine.forget_history(self.state)
        for node_id in removed:
            self.node_versions.pop(node_id, None)
        for cluster_id in deleted:
            self.cluster_versions.pop(cluster_id, None)


def _changed(old: Mapping[str, V], new: Mapping[str, V], touched: Iterable[str]) -> list[V]:
    """The values of `touched` ids that are new or differ from `old`. Cost: O(touched)."""
    out = []
    for key in sorted(touched):
        value = new.get(key)
        if value is None:
            continue
        before = old.get(key)
        if before is None or (before is not value and before != value):
            out.append(value)
    return out

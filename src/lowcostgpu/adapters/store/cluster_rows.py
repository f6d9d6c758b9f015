"""Clusters and nodes as table rows and back, and their versioned writes (shared by both stores).

The rows mirror the instances': the core's record as JSON (see `codec`), a version for optimistic
concurrency, and the columns queries filter on copied out of it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from lowcostgpu.adapters.store import codec
from lowcostgpu.core.clusters import ClusterState
from lowcostgpu.core.nodes import NodeState
from lowcostgpu.domain.errors import StaleWrite
from lowcostgpu.domain.status import ClusterStatus, NodeStatus
from lowcostgpu.ports.store_records import ClusterWrite, NodeWrite, StoredCluster, StoredNode

Row = Mapping[Any, Any]
DELETED = ClusterStatus.DELETED.value
REMOVED = NodeStatus.REMOVED.value


def cluster_row(state: ClusterState) -> dict[str, Any]:
    return {
        "id": state.id,
        "account_id": state.account_id,
        "status": state.status.value,
        "state": codec.dumps(state),
    }


def stored_cluster(row: Row) -> StoredCluster:
    return StoredCluster(codec.loads(ClusterState, row["state"]), row["version"])


def node_row(state: NodeState) -> dict[str, Any]:
    return {
        "id": state.id,
        "cluster_id": state.cluster_id,
        "account_id": state.account_id,
        "status": state.status.value,
        "state": codec.dumps(state),
    }


def stored_node(row: Row) -> StoredNode:
    return StoredNode(codec.loads(NodeState, row["state"]), row["version"])


def stale(kind: str, subject_id: str, expected: int | None) -> StaleWrite:
    if expected is None:
        return StaleWrite(
            f"{kind} {subject_id} already exists",
            hint="someone created it first; re-read it and decide again",
        )
    return StaleWrite(
        f"{kind} {subject_id} is no longer at version {expected}",
        hint="someone else wrote it first; re-read it and decide again",
    )


def versioned_after(
    current: Mapping[str, dict[str, Any]],
    writes: Sequence[ClusterWrite] | Sequence[NodeWrite],
    kind: str,
    row_of: Callable[[Any], dict[str, Any]],
) -> dict[str, dict[str, Any]]:
    """The rows after `writes` (the memory store's check), or `StaleWrite` with nothing changed."""
    after: dict[str, dict[str, Any]] = {}
    for w in writes:
        subject_id = w.state.id
        found = after.get(subject_id) or current.get(subject_id)
        if w.expected_version is None:
            if found is not None:
                raise stale(kind, subject_id, None)
            after[subject_id] = {**row_of(w.state), "version": 1}
            continue
        if found is None or found["version"] != w.expected_version:
            raise stale(kind, subject_id, w.expected_version)
        after[subject_id] = {**row_of(w.state), "version": w.expected_version + 1}
    return after

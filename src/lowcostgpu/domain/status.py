"""Status enums and their transition tables.

Each table maps a status to the statuses it may move to, with a comment on every edge saying what
causes it. A change that is not in the table raises `IllegalTransition`: the table is the contract,
and code that wants another edge has to add it here, in view.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import TypeVar

from lowcostgpu.domain.errors import IllegalTransition


class InstanceStatus(StrEnum):
    QUEUED = "queued"
    STARTING = "starting"
    RUNNING = "running"
    INTERRUPTING = "interrupting"
    INTERRUPTED = "interrupted"
    STOPPING = "stopping"
    STOPPED = "stopped"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    DELETED = "deleted"


_I = InstanceStatus
INSTANCE_TRANSITIONS: Mapping[InstanceStatus, frozenset[InstanceStatus]] = {
    _I.QUEUED: frozenset(
        {
            _I.STARTING,  # the scheduler placed it (or it was on-demand and placed at once)
            _I.STOPPED,  # the user stopped it while it waited: it leaves the queue
            _I.DELETED,  # the user deleted it while it waited
        }
    ),
    _I.STARTING: frozenset(
        {
            _I.RUNNING,  # the runtime reports the workload process is up
            _I.FAILED,  # the command or template could not start; its GPUs are freed
            _I.INTERRUPTING,  # reclaimed before it came up: the drain still runs in full
            _I.STOPPING,  # the user stopped it while it started
        }
    ),
    _I.RUNNING: frozenset(
        {
            _I.INTERRUPTING,  # T+0 of a reclaim: notice, SIGTERM, GPU billing stops
            _I.SUCCEEDED,  # the workload reported completion (or exited 0 without a notice)
            _I.FAILED,  # the workload exited non-zero without a notice
            _I.STOPPING,  # the user stopped it: the same SIGTERM/grace, but no requeue
        }
    ),
    _I.INTERRUPTING: frozenset(
        {
            _I.INTERRUPTED,  # the workload exited in its grace period, or SIGKILL at the deadline
        }
    ),
    _I.INTERRUPTED: frozenset(
        {
            _I.QUEUED,  # auto-requeue (or the user's resume) at its original enqueue time
            _I.STOPPED,  # the user stopped it while interrupted: no requeue
            _I.DELETED,  # the user deleted it; the volume is kept unless deleted on its own
        }
    ),
    _I.STOPPING: frozenset(
        {
            _I.STOPPED,  # the workload exited, or SIGKILL at the deadline
        }
    ),
    _I.STOPPED: frozenset(
        {
            _I.QUEUED,  # the user resumed it
            _I.DELETED,  # the user deleted it
        }
    ),
    _I.SUCCEEDED: frozenset(
        {
            _I.DELETED,  # the user deleted the finished instance
        }
    ),
    _I.FAILED: frozenset(
        {
            _I.QUEUED,  # the user resumed it (e.g. after fixing the volume's contents)
            _I.DELETED,  # the user deleted it
        }
    ),
    _I.DELETED: frozenset(),  # terminal
}

# Statuses in which an instance holds GPUs (and so has an allocation).
INSTANCE_HOLDS_GPUS = frozenset({_I.STARTING, _I.RUNNING, _I.INTERRUPTING, _I.STOPPING})

LIVE_INSTANCE_STATUSES: frozenset[InstanceStatus] = frozenset(
    {_I.QUEUED, _I.STARTING, _I.RUNNING, _I.INTERRUPTING, _I.STOPPING, _I.INTERRUPTED}
)
"""The statuses of the instances the leader keeps in memory (`Store.live_instances()`).

Those the scheduler and the lifecycle still act on: waiting, holding GPUs or draining — and
INTERRUPTED too, which may be about to auto-requeue (it is few rows, so cheap to keep). Stopped,
succeeded, failed and deleted instances change only by a user's request, which reads its one row;
leaving them out keeps the leader's load O(live), however long the history grows. The SQL store's
partial index `ix_instances_active` covers exactly these (its predicate is written from this set).
"""


class NodeStatus(StrEnum):
    PENDING = "pending"
    READY = "ready"
    CORDONED = "cordoned"
    REMOVED = "removed"


_N = NodeStatus
NODE_TRANSITIONS: Mapping[NodeStatus, frozenset[NodeStatus]] = {
    _N.PENDING: frozenset(
        {
            _N.READY,  # the queue placed the preemptible node (standard nodes start here too)
            _N.REMOVED,  # the target was lowered or the cluster deleted before it was placed
        }
    ),
    _N.READY: frozenset(
        {
            _N.CORDONED,  # T+0 of a reclaim, a lowered target or a cluster delete: no new work
        }
    ),
    _N.CORDONED: frozenset(
        {
            _N.REMOVED,  # its pods left in their grace period, or the deadline passed
        }
    ),
    _N.REMOVED: frozenset(),  # terminal: replacement capacity is a new node
}


class ClusterStatus(StrEnum):
    ACTIVE = "active"
    DELETING = "deleting"
    DELETED = "deleted"


_C = ClusterStatus
CLUSTER_TRANSITIONS: Mapping[ClusterStatus, frozenset[ClusterStatus]] = {
    _C.ACTIVE: frozenset(
        {
            _C.DELETING,  # the user deleted it: every node is drained with its grace period
        }
    ),
    _C.DELETING: frozenset(
        {
            _C.DELETED,  # the last node is gone
        }
    ),
    _C.DELETED: frozenset(),  # terminal
}

S = TypeVar("S", InstanceStatus, NodeStatus, ClusterStatus)


def check_transition(table: Mapping[S, frozenset[S]], current: S, target: S, *, subject: str) -> S:
    """Return `target` if `current → target` is an edge of `table`; raise otherwise."""
    if target in table[current]:
        return target
    allowed = ", ".join(sorted(table[current])) or "nothing (it is final)"
    raise IllegalTransition(
        f"{subject} cannot go from {current} to {target}",
        hint=f"from {current} it can go to: {allowed}",
        subject=subject,
        current=str(current),
        target=str(target),
    )

"""Effects: what the shell must do after a decision has been written.

The core never acts; it returns effects. The app layer stores them in the outbox in the same
transaction as the state they follow from, then carries them out. Every effect is idempotent when
keyed by `effect_key`: carrying one out twice (after a crash between doing it and marking it done)
has the same result as once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, get_args

from lowcostgpu.domain.capacity import Timestamp
from lowcostgpu.domain.events import EventType, Reason, event_type_of


@dataclass(frozen=True, slots=True)
class StartWorkload:
    """Start the subject's workload on these GPUs (restart_count > 0 after an interruption)."""

    subject_id: str
    allocation_id: str
    host_id: str
    gpu_indices: tuple[int, ...]
    restart_count: int
    # A gang member: its rank of `nodes`, and the host of rank 0 (torchrun's master).
    rank: int = 0
    nodes: int = 1
    master_host_id: str = ""

    @property
    def effect_key(self) -> str:
        return f"start:{self.allocation_id}"


@dataclass(frozen=True, slots=True)
class SignalWorkload:
    """Send SIGTERM to the whole process group of the subject's workload (the notice)."""

    subject_id: str
    allocation_id: str
    signal: str = "SIGTERM"

    @property
    def effect_key(self) -> str:
        return f"signal:{self.signal}:{self.allocation_id}"


@dataclass(frozen=True, slots=True)
class KillWorkload:
    """SIGKILL whatever still runs at the deadline."""

    subject_id: str
    allocation_id: str

    @property
    def effect_key(self) -> str:
        return f"kill:{self.allocation_id}"


@dataclass(frozen=True, slots=True)
class CordonNode:
    node_id: str

    @property
    def effect_key(self) -> str:
        return f"cordon:{self.node_id}"


@dataclass(frozen=True, slots=True)
class RemoveNode:
    node_id: str

    @property
    def effect_key(self) -> str:
        return f"remove:{self.node_id}"


@dataclass(frozen=True, slots=True)
class ReleaseAllocation:
    """The allocation's GPUs are free again."""

    allocation_id: str

    @property
    def effect_key(self) -> str:
        return f"release:{self.allocation_id}"


@dataclass(frozen=True, slots=True)
class EmitEvent:
    """Record an event (and fire the account's webhooks for it)."""

    object_kind: str
    object_id: str
    reason: Reason
    message: str
    at: Timestamp
    account_id: str = ""
    data: Mapping[str, Any] = field(default_factory=dict)

    @property
    def event_type(self) -> EventType:
        return event_type_of(self.reason)

    @property
    def effect_key(self) -> str:
        return f"event:{self.object_kind}:{self.object_id}:{self.reason}:{self.at}"


@dataclass(frozen=True, slots=True)
class AddNode:
    """Bring a cluster node up on these GPUs, labelled `lowcostgpu.io/compute-class=<label>`."""

    node_id: str
    cluster_id: str
    allocation_id: str
    host_id: str
    gpu_indices: tuple[int, ...]
    compute_class: str

    @property
    def effect_key(self) -> str:
        return f"add-node:{self.node_id}:{self.allocation_id}"


@dataclass(frozen=True, slots=True)
class MarkNodeRisk:
    """Mark a preemptible cluster node at risk of being reclaimed for on-demand work (`risk`
    "next", warned at `at`), or clear the mark (`risk` "", `at` when the pressure ended): advice
    for the cluster's own tooling, as `PreemptionRisk` is for an instance's workload (`core.risk`).
    On Kubernetes a label and an annotation on the Node, on Slurm the node's comment; a provider
    leaves a node that no longer holds this role alone (a late replay)."""

    node_id: str
    risk: str
    at: Timestamp

    @property
    def effect_key(self) -> str:
        return f"node-risk:{self.node_id}:{self.risk or 'clear'}:{self.at}"


NodeEffect = AddNode | CordonNode | RemoveNode | MarkNodeRisk
"""The effects a node provider carries out (`ports.nodes.NodeProvider`)."""

NODE_EFFECT_KINDS: frozenset[str] = frozenset(c.__name__ for c in get_args(NodeEffect))
"""Their kinds in the outbox (an entry's kind is its effect's class name)."""

Effect = StartWorkload | SignalWorkload | KillWorkload | ReleaseAllocation | EmitEvent | NodeEffect

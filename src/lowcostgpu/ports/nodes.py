"""The node provider port: what makes a cluster's node effects true.

The core emits `AddNode`, `CordonNode` and `RemoveNode` (`core.effects.NodeEffect`; it signals
and kills the node's allocation like any workload's, through the runtime); a provider carries out
the node effects.
On the local runtime a node is a placeholder workload (`adapters.local.PlaceholderNodes`); on
Kubernetes it is a Node object (`adapters.kubernetes.KubernetesNodes`). A provider reports a
drained node through the runtime's `observe` (the node's allocation `exited`), which ends its
drain in the core. Effects may be carried out more than once (the outbox is at-least-once), so
every operation must be idempotent.
"""

from __future__ import annotations

from typing import Protocol

from lowcostgpu.ports.runtime import Runtime
from lowcostgpu.ports.store_records import OutboxEntry


class NodeProvider(Protocol):
    def carry_out(self, entry: OutboxEntry, runtime: Runtime) -> None:
        """Carry out one node effect (`entry.kind` in `core.effects.NODE_EFFECT_KINDS`)."""
        ...
